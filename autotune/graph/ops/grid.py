"""AffineGrid: the sampling grid of a batch of affine transforms, ``grid[n, *p, k] = sum_j
theta[n, k, j] * base_j(p)`` where the base point of position p is its normalised coordinates in
[-1, 1] (x along the last axis first) followed by 1. The output size is a constant operand."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr

from ..ir import GraphError, Node, TensorType
from .base import INJECTIVE, Arg, Consts, Types, float_only, need_const, register, same
from .te_build import nd_compute, tensor_arg


def _spatial(node: Any, consts: Consts, theta: TensorType) -> tuple[int, ...]:
    size = [int(v) for v in need_const(node, consts, 1, "size").reshape(-1)]
    s = len(size) - 2
    if s not in (2, 3) or theta.shape != (size[0], s, s + 1) or min(size) < 1:
        raise GraphError(f"AffineGrid node {node.name!r}: theta {theta.shape} does not fit size {size}")
    return tuple(size[2:])


def base_coordinate(i: Any, n: int, align_corners: bool) -> Any:
    """The normalised coordinate of position ``i`` of ``n`` (numpy values or te expressions)."""
    if align_corners:
        return i * (2.0 / (n - 1)) - 1.0 if n > 1 else i * 0.0 - 1.0
    return (i * 2.0 + 1.0) * (1.0 / n) - 1.0


class _AffineGrid:
    const_operands = {1: "size"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        theta = same(types[0])
        float_only(node, types[:1])
        spatial = _spatial(node, consts, theta)
        return [TensorType((theta.shape[0], *spatial, len(spatial)), theta.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        theta = np.asarray(xs[0])
        spatial = _spatial(node, [None, xs[1]], TensorType(theta.shape, str(theta.dtype)))
        align = bool(node.attrs.get("align_corners", 0))
        axes = [base_coordinate(np.arange(n, dtype=np.float64), n, align) for n in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")  # one array per spatial axis, in axis order
        base = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)  # x, y(, z), 1
        grid = np.einsum("...j,nkj->n...k", base, theta.astype(np.float64))
        return [grid.astype(theta.dtype)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        theta = tensor_arg(args[0])
        spatial = tuple(int(v) for v in attrs["_size"][2:])
        s = len(spatial)
        align = bool(attrs.get("align_corners", 0))

        def fn(i: list[Expr]) -> Expr:
            n, pos, k = i[0], i[1:-1], i[-1]
            coords = [base_coordinate(T.cast(theta.dtype, p), size, align) for p, size in zip(pos, spatial)]
            out = theta[n, k, s]
            for j, c in enumerate(coords[::-1]):  # x (the last axis) first
                out = out + theta[n, k, j] * c
            return out

        return nd_compute((theta.shape[0], *spatial, s), fn, name, "injective")


register("AffineGrid", INJECTIVE)(_AffineGrid)
