"""Data movement: index remappings that cost a copy (Transpose, Concat, Slice, Pad, Expand, Tile, the
Gathers, Resize, DepthToSpace) and Split, which a pass rewrites into Slices. Operands that shape the
result (starts, pads, repeats...) must be constants known at compile time; gathered indices may be
run-time values (an embedding lookup is a Gather of a weight by token ids)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, all_of, compare, const

from ..ir import GraphError, Node, TensorType, contiguous
from .base import (
    INJECTIVE,
    KERNEL_DTYPES,
    REWRITE,
    Arg,
    AttrNode,
    Consts,
    Types,
    broadcast_shapes,
    kernel_dtype,
    need_const,
    norm_axis,
    operand,
    register,
    same,
)
from .te_build import nd_compute, read, scalar_expr, shape_of, tensor_arg

INDEX_DTYPES = ("int64", "int32")


def _kernel_value(node: Node, t: TensorType, consts: Consts) -> None:
    if (not consts or consts[0] is None) and t.dtype not in KERNEL_DTYPES:
        raise GraphError(f"{node.op} node {node.name!r}: {t.dtype} values are not compiled")


# --- Transpose / Concat -------------------------------------------------------------------------------
def operand_perm(ndim: int, batch: bool, swap: bool) -> list[int]:
    """How onnxruntime's FusedMatMul reads an operand of ``ndim`` axes: with ``batch``
    (transBatchA/B, rank 3 or more) its first axis moved to just before its last, the axes between
    becoming the batch axes; then with ``swap`` (transA/B) its last two axes swapped."""
    perm = list(range(1, ndim - 1)) + [0, ndim - 1] if batch and ndim > 2 else list(range(ndim))
    if swap and ndim >= 2:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    return perm


def transpose_perm(node: Any, ndim: int) -> list[int]:
    """The node's permutation of ``ndim`` axes: ``perm``, reversed without it, or (internal attribute
    ``_operand`` = [batch, swap], of imported FusedMatMul operands) ``operand_perm``."""
    if "_operand" in node.attrs:
        batch, swap = node.attrs["_operand"]
        return operand_perm(ndim, bool(batch), bool(swap))
    perm = node.attrs.get("perm")
    perm = list(range(ndim))[::-1] if perm is None else [int(p) % max(ndim, 1) for p in perm]
    if sorted(perm) != list(range(ndim)):
        raise GraphError(f"Transpose node {node.name!r}: perm {perm} is not a permutation of {ndim} axes")
    return perm


class _Transpose:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        perm = transpose_perm(node, len(x.shape))
        return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [contiguous(np.transpose(xs[0], transpose_perm(node, xs[0].ndim)))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        perm = transpose_perm(AttrNode("Transpose", attrs, name), x.ndim)
        shape = tuple(x.shape[p] for p in perm)

        def fn(i: list[Expr]) -> Expr:
            src: list[Any] = [None] * x.ndim
            for d, p in enumerate(perm):
                src[p] = i[d]
            return x[tuple(src)]

        return nd_compute(shape, fn, name, "injective")


register("Transpose", INJECTIVE)(_Transpose)


class _Concat:
    tensor_operands = None  # (every input: its length along the axis)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        ts = [same(t) for t, i in zip(types, node.inputs) if i]
        nd = len(ts[0].shape)
        axis = norm_axis(node.attrs.get("axis", 0), nd, "Concat")
        for t in ts:
            if len(t.shape) != nd or any(t.shape[d] != ts[0].shape[d] for d in range(nd) if d != axis):
                raise GraphError(f"Concat node {node.name!r}: shapes {[t.shape for t in ts]} do not fit")
            if t.dtype != ts[0].dtype:
                raise GraphError(f"Concat node {node.name!r}: input types differ")
        shape = list(ts[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ts)
        return [TensorType(tuple(shape), ts[0].dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [x for x in xs if x is not None]
        return [np.concatenate(xs, axis=node.attrs.get("axis", 0))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        xs = [tensor_arg(a) for a in args if a is not None and not (isinstance(a, te.Tensor) and a.size == 0)]
        nd = xs[0].ndim
        axis = int(attrs.get("axis", 0)) % nd
        offsets = [0]
        for t in xs:
            offsets.append(offsets[-1] + t.shape[axis])
        shape = list(xs[0].shape)
        shape[axis] = offsets[-1]

        def fn(i: list[Expr]) -> Expr:
            def piece(k: int) -> Expr:
                idx = list(i)
                idx[axis] = i[axis] - offsets[k]
                return xs[k][tuple(idx)]

            out = piece(len(xs) - 1)
            for k in range(len(xs) - 2, -1, -1):
                out = T.select(i[axis] < offsets[k + 1], piece(k), out)
            return out

        return nd_compute(tuple(shape), fn, name, "injective")


register("Concat", INJECTIVE)(_Concat)


# --- Slice --------------------------------------------------------------------------------------------
def slice_plan(node: Any, shape: Sequence[int], consts: Consts) -> list[tuple[int, int, int]]:
    """Per axis (start, step, count) of a Slice (opset >= 10 operands, or the opset-1 attributes)."""
    if "starts" in node.attrs:  # opset 1
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes, steps = node.attrs.get("axes"), None
    else:
        starts = operand(node, consts, 1, "starts")
        ends = operand(node, consts, 2, "ends")
        axes, steps = operand(node, consts, 3, "axes"), operand(node, consts, 4, "steps")
        if starts is None or ends is None:
            raise GraphError(f"Slice node {node.name!r}: starts and ends are required")
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    nd = len(shape)
    axes = (
        list(range(len(starts)))
        if axes is None
        else [norm_axis(int(a), nd, "Slice") for a in np.asarray(axes).reshape(-1)]
    )
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise GraphError(f"Slice node {node.name!r}: starts/ends/axes/steps do not agree")
    plan = [(0, 1, s) for s in shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise GraphError(f"Slice node {node.name!r}: step 0")
        lo, hi, step = slice(s, e, st).indices(shape[a])
        plan[a] = (lo, step, len(range(lo, hi, step)))
    return plan


class _Slice:
    const_operands = {1: "starts", 2: "ends", 3: "axes", 4: "steps"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_value(node, x, consts)
        plan = slice_plan(node, x.shape, consts)
        return [TensorType(tuple(c for _, _, c in plan), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        plan = slice_plan(node, x.shape, [None] + list(xs[1:]))
        idx = tuple(
            slice(lo, lo + step * c if lo + step * c >= 0 else None, step) if c else slice(0, 0)
            for lo, step, c in plan
        )
        return [contiguous(x[idx])]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        plan = slice_plan(AttrNode("Slice", attrs, name), x.shape, [])
        shape = tuple(c for _, _, c in plan)
        return nd_compute(
            shape,
            lambda i: x[
                tuple(lo + step * v if (lo, step) != (0, 1) else v for v, (lo, step, _) in zip(i, plan))
            ],
            name,
            "injective",
        )


register("Slice", INJECTIVE)(_Slice)


# --- Split (rewritten into Slices) --------------------------------------------------------------------
def split_sizes(node: Any, shape: Sequence[int], consts: Consts) -> tuple[int, list[int]]:
    axis = norm_axis(int(node.attrs.get("axis", 0)), len(shape), "Split")
    n_out = len(node.outputs)
    sizes = node.attrs.get("split")
    given = operand(node, consts, 1, "split")
    if given is not None:
        sizes = given.reshape(-1).tolist()
    dim = shape[axis]
    if sizes is None:
        parts = int(node.attrs.get("num_outputs", n_out))
        each = -(-dim // parts)
        sizes = [min(each, dim - k * each) for k in range(parts)]
    sizes = [int(s) for s in sizes]
    if sum(sizes) != dim or len(sizes) != n_out or min(sizes) < 0:
        raise GraphError(f"Split node {node.name!r}: sizes {sizes} do not split {dim} into {n_out} outputs")
    return axis, sizes


class _Split:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        axis, sizes = split_sizes(node, x.shape, consts)
        return [
            TensorType(tuple(s if d == axis else v for d, v in enumerate(x.shape)), x.dtype) for s in sizes
        ]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axis, sizes = split_sizes(node, x.shape, [None] + list(xs[1:]))
        return [contiguous(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis)]


register("Split", REWRITE)(_Split)


# --- Pad ----------------------------------------------------------------------------------------------
def pad_plan(node: Any, shape: Sequence[int], consts: Consts) -> tuple[list[tuple[int, int]], str, Any]:
    """Per axis (begin, end) padding (negative: cropping), the mode, and the constant value operand
    (None: a value computed at run time)."""
    nd = len(shape)
    pads = node.attrs.get("pads")
    given = operand(node, consts, 1, "pads")
    if given is not None:
        pads = given.reshape(-1).tolist()
    if pads is None:
        raise GraphError(f"Pad node {node.name!r}: no pads")
    axes = operand(node, consts, 3, "axes")
    axes = list(range(nd)) if axes is None else [norm_axis(int(a), nd, "Pad") for a in axes.reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise GraphError(f"Pad node {node.name!r}: {len(pads)} pads for {len(axes)} axes")
    plan = [(0, 0)] * nd
    for k, a in enumerate(axes):
        plan[a] = (int(pads[k]), int(pads[k + len(axes)]))
    mode = node.attrs.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    value = node.attrs.get("value", 0.0)
    if len(node.inputs) > 2 and node.inputs[2] and "_value" not in node.attrs and (
        len(consts) <= 2 or consts[2] is None
    ):
        value = None  # computed at run time: the kernel reads operand 2
    else:
        v = operand(node, consts, 2, "value")
        if v is not None:
            value = v.reshape(-1)[0] if v.size else 0
    for a, (b, e) in enumerate(plan):
        if shape[a] + b + e < 0 or (mode in ("reflect", "edge", "wrap") and shape[a] == 0 and (b or e)):
            raise GraphError(f"Pad node {node.name!r}: pads {b}, {e} do not fit axis {a} of size {shape[a]}")
        if mode == "reflect" and max(b, e) >= shape[a] and (b > 0 or e > 0):
            raise GraphError(f"Pad node {node.name!r}: reflect pads must be below the axis size")
    return plan, mode, value


def _check_pad(node: Node) -> str | None:
    mode = node.attrs.get("mode", "constant")
    return None if mode in ("constant", "reflect", "edge", "wrap") else f"mode={mode!r}"


class _Pad:
    const_operands = {1: "pads", 2: "value", 3: "axes"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_value(node, x, consts)
        plan, _, _ = pad_plan(node, x.shape, consts)
        return [TensorType(tuple(s + b + e for s, (b, e) in zip(x.shape, plan)), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        plan, mode, value = pad_plan(node, x.shape, [None] + list(xs[1:]))
        crop = tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(plan))
        x = x[crop]
        widths = [(max(b, 0), max(e, 0)) for b, e in plan]
        if mode == "constant":
            return [np.pad(x, widths, constant_values=np.asarray(value).astype(x.dtype))]
        return [np.pad(x, widths, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        plan, mode, value = pad_plan(AttrNode("Pad", attrs, name), x.shape, [])
        shape = tuple(s + b + e for s, (b, e) in zip(x.shape, plan))

        def src(j: Expr, n: int) -> Expr:
            if mode == "edge":
                return T.min(T.max(j, 0), n - 1)
            if mode == "reflect":
                j = T.select(compare("lt", j, 0), 0 - j, j)
                return T.select(compare("lt", j, n), j, 2 * (n - 1) - j)
            if mode == "wrap":
                return (j + n * (1 + max(b for b, _ in plan) // max(n, 1))) % n
            return j

        def fn(i: list[Expr]) -> Expr:
            idx, inside = [], []
            for d, (v, (b, _)) in enumerate(zip(i, plan)):
                j = v - b if b else v
                if mode == "constant" and (b > 0 or plan[d][1] > 0):
                    inside += [j >= 0, j < x.shape[d]] if b > 0 else [j < x.shape[d]]
                idx.append(src(j, x.shape[d]) if (b > 0 or plan[d][1] > 0) else j)
            if mode != "constant" or not inside:
                return x[tuple(idx)]
            # clamp the index read where the select discards it, so every load stays in bounds
            safe = [T.min(T.max(j, 0), x.shape[d] - 1) for d, j in enumerate(idx)]
            return T.select(all_of(*inside), x[tuple(safe)], fill)

        given = args[2] if len(args) > 2 else None
        fill = given[(0,) * given.ndim] if isinstance(given, te.Tensor) else scalar_expr(value, x.dtype)

        return nd_compute(shape, fn, name, "pad")


register("Pad", INJECTIVE, _check_pad)(_Pad)


# --- Expand / Tile ------------------------------------------------------------------------------------
class _Expand:
    const_operands = {1: "shape"}

    @staticmethod
    def _shape(node: Any, x: Sequence[int], consts: Consts) -> tuple[int, ...]:
        s = operand(node, consts, 1, "shape")
        if s is None:
            raise GraphError(f"Expand node {node.name!r}: no shape")
        return broadcast_shapes(x, [int(v) for v in s.reshape(-1)])

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_value(node, x, consts)
        return [TensorType(_Expand._shape(node, x.shape, consts), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        return [contiguous(np.broadcast_to(x, _Expand._shape(node, x.shape, [None, *xs[1:]])))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        shape = _Expand._shape(AttrNode("Expand", attrs, name), x.shape, [])
        return nd_compute(shape, lambda i: read(x, i, shape), name, "injective")


register("Expand", INJECTIVE)(_Expand)


class _Tile:
    const_operands = {1: "repeats"}

    @staticmethod
    def _reps(node: Any, nd: int, consts: Consts) -> list[int]:
        r = operand(node, consts, 1, "repeats")
        if r is None or r.size != nd or (r < 0).any():
            raise GraphError(f"Tile node {node.name!r}: repeats must be {nd} non-negative constants")
        return [int(v) for v in r.reshape(-1)]

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_value(node, x, consts)
        reps = _Tile._reps(node, len(x.shape), consts)
        return [TensorType(tuple(s * r for s, r in zip(x.shape, reps)), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        return [np.tile(x, _Tile._reps(node, x.ndim, [None, *xs[1:]]))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        reps = _Tile._reps(AttrNode("Tile", attrs, name), x.ndim, [])
        shape = tuple(s * r for s, r in zip(x.shape, reps))
        return nd_compute(
            shape,
            lambda i: x[tuple(v % s if r > 1 else v for v, s, r in zip(i, x.shape, reps))],
            name,
            "injective",
        )


register("Tile", INJECTIVE)(_Tile)


# --- Gathers ------------------------------------------------------------------------------------------
def _index(v: Expr, n: int) -> Expr:
    """A gathered index as a position: negative indices count from the end."""
    return T.select(compare("lt", v, const(0, v.dtype)), v + n, v)


def _check_index_type(node: Node, t: TensorType | None) -> None:
    if t is not None and t.dtype not in INDEX_DTYPES:
        raise GraphError(f"{node.op} node {node.name!r}: indices are {t.dtype}, not int64/int32")


class _Gather:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, ind = same(types[0]), same(types[1])
        _check_index_type(node, ind)
        _kernel_value(node, x, consts)
        axis = norm_axis(int(node.attrs.get("axis", 0)), len(x.shape), "Gather")
        if consts[1] is not None:
            c = np.asarray(consts[1])
            if c.size and (c.min() < -x.shape[axis] or c.max() >= x.shape[axis]):
                raise GraphError(
                    f"Gather node {node.name!r}: an index is out of range for axis size {x.shape[axis]}"
                )
        return [TensorType(x.shape[:axis] + ind.shape + x.shape[axis + 1 :], x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axis = norm_axis(int(node.attrs.get("axis", 0)), x.ndim, "Gather")
        return [contiguous(np.take(x, np.asarray(xs[1]).astype(np.int64), axis=axis))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, ind = tensor_arg(args[0]), args[1]
        axis = int(attrs.get("axis", 0)) % x.ndim
        ishape = shape_of(ind)
        shape = x.shape[:axis] + ishape + x.shape[axis + 1 :]
        k = len(ishape)

        def fn(i: list[Expr]) -> Expr:
            if isinstance(ind, te.Tensor):
                pos = _index(ind[tuple(i[axis : axis + k])], x.shape[axis])
            else:
                v = int(np.asarray(ind).reshape(-1)[0])
                pos = v + x.shape[axis] if v < 0 else v
            return x[(*i[:axis], pos, *i[axis + k :])]

        return nd_compute(shape, fn, name, "injective")


register("Gather", INJECTIVE)(_Gather)


class _GatherElements:
    tensor_operands = (1,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, ind = same(types[0]), same(types[1])
        _check_index_type(node, ind)
        _kernel_value(node, x, consts)
        norm_axis(int(node.attrs.get("axis", 0)), len(x.shape), "GatherElements")
        if len(ind.shape) != len(x.shape):
            raise GraphError(f"GatherElements node {node.name!r}: ranks differ")
        return [TensorType(ind.shape, x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, ind = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64)
        axis = norm_axis(int(node.attrs.get("axis", 0)), x.ndim, "GatherElements")
        ind = np.where(ind < 0, ind + x.shape[axis], ind)
        return [np.take_along_axis(x, ind, axis=axis)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, ind = tensor_arg(args[0]), tensor_arg(args[1])
        axis = int(attrs.get("axis", 0)) % x.ndim

        def fn(i: list[Expr]) -> Expr:
            idx = list(i)
            idx[axis] = _index(ind[tuple(i)], x.shape[axis])
            return x[tuple(idx)]

        return nd_compute(ind.shape, fn, name, "injective")


register("GatherElements", INJECTIVE)(_GatherElements)


class _GatherND:
    tensor_operands = (1,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, ind = same(types[0]), same(types[1])
        _check_index_type(node, ind)
        _kernel_value(node, x, consts)
        b = int(node.attrs.get("batch_dims", 0))
        k = ind.shape[-1] if ind.shape else 0
        if not ind.shape or b + k > len(x.shape) or x.shape[:b] != ind.shape[:b]:
            raise GraphError(f"GatherND node {node.name!r}: indices {ind.shape} do not fit data {x.shape}")
        return [TensorType(ind.shape[:-1] + x.shape[b + k :], x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, ind = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64)
        b = int(node.attrs.get("batch_dims", 0))
        k = ind.shape[-1]
        out = np.empty(ind.shape[:-1] + x.shape[b + k :], dtype=x.dtype)
        for pos in np.ndindex(*ind.shape[:-1]):
            where = tuple(int(v) + (x.shape[b + d] if v < 0 else 0) for d, v in enumerate(ind[pos]))
            out[pos] = x[pos[:b] + where]
        return [out]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, ind = tensor_arg(args[0]), tensor_arg(args[1])
        b = int(attrs.get("batch_dims", 0))
        k = ind.shape[-1]
        shape = ind.shape[:-1] + x.shape[b + k :]
        m = len(ind.shape) - 1

        def fn(i: list[Expr]) -> Expr:
            picks = [_index(ind[(*i[:m], d)], x.shape[b + d]) for d in range(k)]
            return x[(*i[:b], *picks, *i[m:])]

        return nd_compute(shape, fn, name, "injective")


register("GatherND", INJECTIVE)(_GatherND)


# --- DepthToSpace / SpaceToDepth ----------------------------------------------------------------------
def _check_d2s(node: Node) -> str | None:
    mode = node.attrs.get("mode", "DCR")
    return None if mode in ("DCR", "CRD") else f"mode={mode!r}"


def _d2s_perm(node: Any) -> tuple[int, bool]:
    mode = node.attrs.get("mode", "DCR")
    return int(node.attrs["blocksize"]), mode == "CRD"


class _DepthToSpace:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        bs, _ = _d2s_perm(node)
        if len(x.shape) != 4 or x.shape[1] % (bs * bs):
            raise GraphError(f"{node.op} node {node.name!r}: blocksize {bs} does not fit {x.shape}")
        n, c, h, w = x.shape
        return [TensorType((n, c // (bs * bs), h * bs, w * bs), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        bs, crd = _d2s_perm(node)
        n, c, h, w = x.shape
        if crd:
            y = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        return [contiguous(y.reshape(n, c // (bs * bs), h * bs, w * bs))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        bs, crd = _d2s_perm(AttrNode("DepthToSpace", attrs, name))
        n, c, h, w = x.shape
        co = c // (bs * bs)

        def fn(i: list[Expr]) -> Expr:
            b, ch, y, xx = i
            by, bx = y % bs, xx % bs
            src = ch * bs * bs + by * bs + bx if crd else (by * bs + bx) * co + ch
            return x[b, src, y // bs, xx // bs]

        return nd_compute((n, co, h * bs, w * bs), fn, name, "injective")


register("DepthToSpace", INJECTIVE, _check_d2s)(_DepthToSpace)


class _SpaceToDepth:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        bs = int(node.attrs["blocksize"])
        if len(x.shape) != 4 or x.shape[2] % bs or x.shape[3] % bs:
            raise GraphError(f"SpaceToDepth node {node.name!r}: blocksize {bs} does not fit {x.shape}")
        n, c, h, w = x.shape
        return [TensorType((n, c * bs * bs, h // bs, w // bs), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        bs, crd = _d2s_perm(node)
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(
            (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
        )
        return [contiguous(y.reshape(n, c * bs * bs, h // bs, w // bs))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        bs, crd = _d2s_perm(AttrNode("SpaceToDepth", attrs, name))
        n, c, h, w = x.shape

        def fn(i: list[Expr]) -> Expr:
            b, ch, y, xx = i
            # output channel: (block, channel) in DCR order, (channel, block) in CRD order
            blk, src_c = (ch % (bs * bs), ch // (bs * bs)) if crd else (ch // c, ch % c)
            return x[b, src_c, y * bs + blk // bs, xx * bs + blk % bs]

        return nd_compute((n, c * bs * bs, h // bs, w // bs), fn, name, "injective")


register("SpaceToDepth", INJECTIVE, _check_d2s)(_SpaceToDepth)


# --- Trilu --------------------------------------------------------------------------------------------
class _Trilu:
    const_operands = {1: "k"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_value(node, x, consts)
        if len(x.shape) < 2:
            raise GraphError(f"Trilu node {node.name!r}: needs a matrix, got {x.shape}")
        operand(node, consts, 1, "k")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        k = int(np.asarray(xs[1]).reshape(-1)[0]) if len(xs) > 1 and xs[1] is not None else 0
        fn = np.triu if node.attrs.get("upper", 1) else np.tril
        return [fn(x, k)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        kv = operand(AttrNode("Trilu", attrs, name), [], 1, "k")
        k = 0 if kv is None else int(kv.reshape(-1)[0])
        upper = bool(attrs.get("upper", 1))

        def fn(i: list[Expr]) -> Expr:
            r, c = i[-2], i[-1]
            keep = compare("le", r + k, c) if upper else compare("le", c, r + k)
            return T.select(keep, x[tuple(i)], const(0, x.dtype) if x.dtype != "bool" else False)

        return nd_compute(x.shape, fn, name, "injective")


register("Trilu", INJECTIVE)(_Trilu)


# --- OneHot -------------------------------------------------------------------------------------------
def one_hot_axis(node: Any, rank: int) -> int:
    """The position of OneHot's new axis in its output of rank ``rank + 1``."""
    return norm_axis(int(node.attrs.get("axis", -1)), rank + 1, "OneHot")


def one_hot_depth(node: Any, depth: Any) -> int:
    d = np.asarray(depth).reshape(-1)
    if d.size != 1 or int(d[0]) < 1:
        raise GraphError(f"OneHot node {node.name!r}: depth {d.tolist()} is not one positive number")
    return int(d[0])


class _OneHot:
    """``values[1]`` where an index (a negative one counted from ``depth``; a float one truncated)
    equals the position along the new ``axis``, ``values[0]`` elsewhere: an index out of range marks
    nothing. ``passes.lower_one_hot`` computes it with Equal and Where."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        idx, values = same(types[0]), same(types[2])
        depth = one_hot_depth(node, need_const(node, consts, 1, "depth"))
        if values.shape != (2,):
            raise GraphError(f"OneHot node {node.name!r}: values {values.shape}, expected (2,)")
        axis = one_hot_axis(node, len(idx.shape))
        out = TensorType(idx.shape[:axis] + (depth,) + idx.shape[axis:], values.dtype)
        if consts[0] is None or consts[2] is None:  # computed at run time: by kernels
            kernel_dtype(node, out)
        return [out]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        idx, values = np.trunc(np.asarray(xs[0])).astype(np.int64), np.asarray(xs[2])
        depth = one_hot_depth(node, xs[1])
        axis = one_hot_axis(node, idx.ndim)
        idx = np.where(idx < 0, idx + depth, idx)
        pos = np.arange(depth).reshape([depth if d == axis else 1 for d in range(idx.ndim + 1)])
        return [np.where(np.expand_dims(idx, axis) == pos, values[1], values[0]).astype(values.dtype)]


register("OneHot", REWRITE)(_OneHot)
