"""ScatterND and ScatterElements. Their indices are constants (as models hold them), so which update
elements land on each output element, and in which order, is known at compile time: the pass
``passes.scatter_to_table`` turns a scatter into ``ScatterByTable``, an internal gather through a
constant table (``table[k, i]``: the flat position in the updates of the k-th update applied to
output element i, -1 for none), with the reduction (none, add, mul, max, min) applied in the order
the updates come, as the operators define it. Values are computed at run time or folded at import."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, compare, const

from ..ir import GraphError, Node, TensorType
from .base import INJECTIVE, REWRITE, Arg, Consts, Types, kernel_dtype, need_const, norm_axis, register, same
from .te_build import nd_compute, tensor_arg

MAX_UPDATES_PER_ELEMENT = 16  # with a reduction, updates combined into one element (unrolled)

_REDUCE_NP: dict[str, Callable[[Any, Any], Any] | None] = {
    "none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
}
def _nan_first(fn: Callable[[Expr, Expr], Expr]) -> Callable[[Expr, Expr], Expr]:
    """``fn`` (C's fmax / fmin, which drop a NaN) returning NaN when either operand is NaN, as numpy's
    maximum / minimum and the operators' reference do."""

    def combine(a: Expr, u: Expr) -> Expr:
        if a.dtype != "float32":
            return fn(a, u)
        return T.select(compare("or", compare("ne", a, a), compare("ne", u, u)), a + u, fn(a, u))

    return combine


_REDUCE_TE: dict[str, Callable[[Expr, Expr], Expr]] = {
    "none": lambda acc, u: u,
    "add": lambda acc, u: acc + u,
    "mul": lambda acc, u: acc * u,
    "max": _nan_first(T.max),
    "min": _nan_first(T.min),
}


def _check_scatter(node: Node) -> str | None:
    red = node.attrs.get("reduction", "none")
    return None if red in _REDUCE_NP else f"reduction={red!r}"


def scatter_targets(node: Any, shape: Sequence[int], indices: np.ndarray) -> np.ndarray:
    """The flat output position each update element writes (an int64 array of the updates' shape,
    update elements in C order: the order they are applied); GraphError for indices that do not fit."""
    ind = np.asarray(indices).astype(np.int64)
    where = f"{node.op} node {node.name!r}"
    if node.op == "ScatterND":
        k = ind.shape[-1] if ind.ndim else 0
        if not ind.ndim or k > len(shape):
            raise GraphError(f"{where}: indices of shape {ind.shape} do not fit data {tuple(shape)}")
        dims = np.asarray(shape[:k], dtype=np.int64)
        ind = np.where(ind < 0, ind + dims, ind)
        if ind.size and (ind.min() < 0 or np.any(ind >= dims)):
            raise GraphError(f"{where}: an index is out of range for data {tuple(shape)}")
        strides = np.asarray([math.prod(shape[d + 1 :]) for d in range(k)], dtype=np.int64)
        block = math.prod(shape[k:])
        base = (ind * strides).sum(axis=-1)
        return (base[..., None] + np.arange(block, dtype=np.int64)).reshape(ind.shape[:-1] + tuple(shape[k:]))
    axis = norm_axis(int(node.attrs.get("axis", 0)), len(shape), node.op)
    if ind.ndim != len(shape) or any(i > s for d, (i, s) in enumerate(zip(ind.shape, shape)) if d != axis):
        raise GraphError(f"{where}: indices of shape {ind.shape} do not fit data {tuple(shape)}")
    ind = np.where(ind < 0, ind + shape[axis], ind)
    if ind.size and (ind.min() < 0 or ind.max() >= shape[axis]):
        raise GraphError(f"{where}: an index is out of range for axis size {shape[axis]}")
    grid = list(np.indices(ind.shape, dtype=np.int64))
    grid[axis] = ind
    return np.ravel_multi_index(tuple(grid), tuple(shape)).astype(np.int64)


def scatter_table(node: Any, shape: Sequence[int], indices: np.ndarray) -> np.ndarray:
    """``table[k, *i]``: the flat update position of the k-th update applied to output element i
    (-1: none); one row without a reduction (the last update wins), else as many as the most
    updates any element gets."""
    t = scatter_targets(node, shape, indices).reshape(-1)
    size = math.prod(shape)
    counts = np.bincount(t, minlength=size)
    order = np.argsort(t, kind="stable")  # by target, each target's updates in the order applied
    rank = np.arange(t.size) - (np.cumsum(counts) - counts)[t[order]]
    if node.attrs.get("reduction", "none") == "none":
        last = rank == counts[t[order]] - 1
        order, rank = order[last], np.zeros(int(last.sum()), np.int64)
    rows = int(rank.max()) + 1 if rank.size else 1
    table = np.full((rows, size), -1, dtype=np.int64)
    table[rank, t[order]] = order
    return table.reshape((rows, *shape))


def _apply(node: Any, data: np.ndarray, updates: np.ndarray, table: np.ndarray) -> np.ndarray:
    fn = _REDUCE_NP[node.attrs.get("reduction", "none")]
    out = np.array(data, copy=True)
    flat = np.asarray(updates).reshape(-1)
    for row in table:
        hit = row >= 0
        vals = flat[np.where(hit, row, 0)]
        out = np.where(hit, vals if fn is None else fn(out, vals), out)
    return out.astype(data.dtype, copy=False)


class _Scatter:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        data, upd = same(types[0]), same(types[2])
        if types[1] is not None and types[1].dtype not in ("int64", "int32"):
            raise GraphError(f"{node.op} node {node.name!r}: indices are {types[1].dtype}, not int64/int32")
        ind = need_const(node, consts, 1, "indices")
        if data.dtype != upd.dtype:
            raise GraphError(f"{node.op} node {node.name!r}: data is {data.dtype}, updates {upd.dtype}")
        targets = scatter_targets(node, data.shape, ind)
        if targets.shape != upd.shape:
            raise GraphError(
                f"{node.op} node {node.name!r}: updates of shape {upd.shape}, indices need {targets.shape}"
            )
        if consts[0] is None or consts[2] is None:  # computed at run time
            kernel_dtype(node, data, "data")
            red = node.attrs.get("reduction", "none")
            if red != "none" and data.dtype == "bool":
                raise GraphError(f"{node.op} node {node.name!r}: reduction={red!r} of bool values")
            most = int(np.bincount(targets.reshape(-1)).max()) if targets.size else 0
            if red != "none" and most > MAX_UPDATES_PER_ELEMENT:
                raise GraphError(
                    f"{node.op} node {node.name!r}: {most} updates combined into one element "
                    f"(at most {MAX_UPDATES_PER_ELEMENT} compiled)"
                )
        return [data]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        data = np.asarray(xs[0])
        return [_apply(node, data, xs[2], scatter_table(node, data.shape, np.asarray(xs[1])))]


register("ScatterND", REWRITE, _check_scatter)(_Scatter)
register("ScatterElements", REWRITE, _check_scatter)(_Scatter)


class _ScatterByTable:
    """``(data, flat updates, table)``: each output element is its data element combined, in the
    table's order, with the update elements the table names (see :func:`scatter_table`)."""

    tensor_operands = (0, 1, 2)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [same(types[0])]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [_apply(node, np.asarray(xs[0]), xs[1], np.asarray(xs[2]))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        data, upd, table = (tensor_arg(a) for a in args[:3])
        combine = _REDUCE_TE[attrs.get("reduction", "none")]

        def fn(i: list[Expr]) -> Expr:
            acc = data[tuple(i)]
            for k in range(table.shape[0]):
                src = table[(k, *i)]
                val = upd[T.max(src, const(0, src.dtype))]
                acc = T.select(compare("lt", src, const(0, src.dtype)), acc, combine(acc, val))
            return acc

        return nd_compute(data.shape, fn, name, "injective")


register("ScatterByTable", INJECTIVE, internal=True)(_ScatterByTable)
