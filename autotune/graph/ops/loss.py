"""Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log-probabilities an
optional second output). ``passes.lower_losses`` writes each as the operators it is made of (a
GatherElements of the targets' entries, the class weights gathered, ignored targets masked, the
reduction), so they compute at run time with those operators' kernels."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphError, Node, TensorType
from .base import REWRITE, Consts, Types, float_only, output_positions, register, same

REDUCTIONS = ("none", "sum", "mean")


def _check_loss(node: Node) -> str | None:
    red = node.attrs.get("reduction", "mean")
    return None if red in REDUCTIONS else f"reduction={red!r}"


def ignore_index(node: Any) -> int | None:
    v = node.attrs.get("ignore_index")
    return None if v is None else int(v)


def nll_np(node: Any, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    """The loss of log-probabilities ``x`` [N, C, d...] at ``target`` [N, d...]: ``-x[n, t, d...] *
    weight[t]``, 0 where the target is ``ignore_index``; the mean divides by the weights counted."""
    t = np.asarray(target).astype(np.int64)
    ii = ignore_index(node)
    valid = t != ii if ii is not None else np.ones(t.shape, bool)
    tc = np.where(valid, t, 0)
    picked = np.take_along_axis(x, tc[:, None], axis=1)[:, 0]
    w = np.where(valid, weight[tc] if weight is not None else 1.0, 0.0).astype(x.dtype)
    loss = -picked * w
    red = node.attrs.get("reduction", "mean")
    if red == "sum":
        loss = loss.sum()
    elif red == "mean":
        loss = loss.sum() / w.sum()
    return np.asarray(loss, dtype=x.dtype)


def _loss_types(node: Node, types: Types, consts: Consts) -> tuple[TensorType, TensorType]:
    """(x, target) checked: scores [N, C, d...] (float32 unless folded), integer targets [N, d...],
    weights [C]."""
    x, t = same(types[0]), same(types[1])
    folded = all(c is not None for i, c in zip(node.inputs, consts) if i)
    if not folded:
        float_only(node, [types[0], None, *types[2:3]])
    if len(x.shape) < 2 or t.shape != x.shape[:1] + x.shape[2:] or t.dtype not in ("int64", "int32"):
        raise GraphError(f"{node.op} node {node.name!r}: targets {t} do not fit scores {x}")
    if len(types) > 2 and types[2] is not None and types[2].shape != (x.shape[1],):
        raise GraphError(f"{node.op} node {node.name!r}: weights {types[2]}, expected ({x.shape[1]},)")
    return x, t


def _loss_shape(node: Node, t: TensorType) -> tuple[int, ...]:
    return t.shape if node.attrs.get("reduction", "mean") == "none" else ()


class _NLLLoss:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, t = _loss_types(node, types, consts)
        return [TensorType(_loss_shape(node, t), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [nll_np(node, xs[0], xs[1], xs[2] if len(xs) > 2 else None)]


def log_softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


class _SoftmaxCrossEntropyLoss:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, t = _loss_types(node, types, consts)
        outs = [TensorType(_loss_shape(node, t), x.dtype), x]
        return [outs[k] for k in output_positions(node)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        lp = log_softmax_np(xs[0], 1).astype(xs[0].dtype)
        outs = [nll_np(node, lp, xs[1], xs[2] if len(xs) > 2 else None), lp]
        return [outs[k] for k in output_positions(node)]


register("NegativeLogLikelihoodLoss", REWRITE, _check_loss)(_NLLLoss)
register("SoftmaxCrossEntropyLoss", REWRITE, _check_loss)(_SoftmaxCrossEntropyLoss)
