"""RNN, GRU and LSTM: the sequence length is static, so ``passes.lower_recurrent`` unrolls each into
its steps (a MatMul of all inputs with the input weights, then per step a MatMul of the hidden state
with the recurrence weights, the gates' activations and the state updates), forward, reverse or
both directions, with sequence lengths, initial states, clipping and LSTM peepholes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphError, Node, TensorType
from .base import REWRITE, Consts, Types, register, same

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")  # those taking no alpha / beta


def directions(node: Any) -> int:
    return 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1


def activations(node: Any) -> list[str]:
    """One activation name per function of each direction (the attribute, or the defaults)."""
    given = node.attrs.get("activations")
    if given:
        return [str(a) for a in given]
    return DEFAULT_ACTIVATIONS[node.op] * directions(node)


def _check(node: Node) -> str | None:
    a = node.attrs
    if a.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
        return f"direction={a['direction']!r}"
    bad = [f for f in activations(node) if f not in ACTIVATIONS]
    if bad or len(activations(node)) != len(DEFAULT_ACTIVATIONS[node.op]) * directions(node):
        return f"activations={list(activations(node))} (only {', '.join(ACTIVATIONS)}, one per function)"
    if a.get("activation_alpha") or a.get("activation_beta"):
        return "activation_alpha / activation_beta"
    if a.get("input_forget", 0):
        return "input_forget=1"
    if len(node.inputs) > 4 and node.inputs[4] and a.get("direction", "forward") != "forward":
        return "sequence_lens with a reverse direction"
    return None


def shapes(node: Any, x: TensorType) -> tuple[int, int, int]:
    """(sequence length, batch, input size) of X in either layout."""
    seq, batch, size = x.shape
    return (batch, seq, size) if node.attrs.get("layout", 0) else (seq, batch, size)


class _Recurrent:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, w = same(types[0]), same(types[1])
        for i, t in zip(node.inputs, types):
            if t is not None and i and t.dtype not in ("float32", "int32", "int64"):
                raise GraphError(
                    f"{node.op} node {node.name!r}: input {i!r} is {t.dtype}; only float32 is compiled"
                )
        if len(x.shape) != 3:
            raise GraphError(f"{node.op} node {node.name!r}: X must be 3-d, got {x.shape}")
        seq, batch, _ = shapes(node, x)
        hidden, dirs = int(node.attrs.get("hidden_size", 0)), directions(node)
        if hidden <= 0 or w.shape[:2] != (dirs, GATES[node.op] * hidden):
            raise GraphError(f"{node.op} node {node.name!r}: W {w.shape} does not fit hidden_size {hidden}")
        layout = node.attrs.get("layout", 0)
        y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        return [TensorType(y, x.dtype)] + [TensorType(state, x.dtype)] * (len(node.outputs) - 1)

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        """onnx's reference implementation (constants folded at import; it takes every sequence at
        full length)."""
        import onnx
        from onnx.reference import ReferenceEvaluator

        seq = shapes(node, TensorType(np.shape(xs[0]), "float32"))[0]
        if len(xs) > 4 and xs[4] is not None and np.any(np.asarray(xs[4]) < seq):
            # onnx's reference ignores sequence_lens: no folding that could differ from the kernels
            raise GraphError(f"{node.op} node {node.name!r}: folding with sequences shorter than {seq} "
                             "is not done")
        names = [f"in{k}" if x is not None else "" for k, x in enumerate(xs)]
        outs = [f"out{k}" for k in range(len(node.outputs))]
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
        proto = onnx.helper.make_node(node.op, names, outs, **attrs)
        feeds = {n: x for n, x in zip(names, xs) if n}
        return list(ReferenceEvaluator(proto).run(None, feeds))


for _op in GATES:
    register(_op, REWRITE, _check)(_Recurrent)
