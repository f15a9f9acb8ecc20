"""Views and shape computations. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout in
inference) move no data: the output aliases the input's storage. Shape computations (Constant, Shape,
Size, ConstantOfShape, Range, NonZero) are evaluated at import and only on constants; Shape, Size,
EyeLike and Dropout's mask depend only on shapes and are constants whatever their operands hold."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te.expr import Expr

from ..ir import GraphError, Node, TensorType
from .base import (
    ALIAS,
    FOLD,
    Arg,
    Consts,
    Types,
    fold_only,
    infer_by_numpy,
    norm_axis,
    operand,
    register,
    same,
)
from .elementwise import onnx_dtype
from .te_build import nd_compute, tensor_arg


# --- views --------------------------------------------------------------------------------------------
def reshape_target(node: Any, in_shape: Sequence[int], spec: Sequence[int]) -> tuple[int, ...]:
    allowzero = node.attrs.get("allowzero", 0)
    out = []
    for d, s in enumerate(int(v) for v in spec):
        out.append(in_shape[d] if s == 0 and not allowzero else s)
    total = int(np.prod(in_shape)) if len(in_shape) else 1
    if out.count(-1) > 1:
        raise GraphError(f"Reshape node {node.name!r}: more than one -1 in {list(spec)}")
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1])) if len(out) > 1 else 1
        if known == 0 or total % known:
            raise GraphError(f"Reshape node {node.name!r}: cannot reshape {tuple(in_shape)} to {list(spec)}")
        out[out.index(-1)] = total // known
    if any(s < 0 for s in out) or int(np.prod(out)) != total:
        raise GraphError(f"Reshape node {node.name!r}: cannot reshape {tuple(in_shape)} to {out}")
    return tuple(out)


def _dropout_training(node: Node, consts: Consts) -> bool:
    """Whether a Dropout really drops (training mode with a non-zero ratio)."""
    mode = operand(node, consts, 2, "training_mode")
    if mode is None or not bool(mode.reshape(-1)[0]):
        return False
    ratio = operand(node, consts, 1, "ratio")
    r = float(ratio.reshape(-1)[0]) if ratio is not None else float(node.attrs.get("ratio", 0.5))
    return r != 0.0


def alias_shape(node: Any, x: TensorType, consts: Consts) -> tuple[int, ...]:
    """The output shape of a view (the element order never changes)."""
    op, s = node.op, x.shape
    if op in ("Identity", "Dropout"):
        return s
    if op == "Reshape":
        spec = operand(node, consts, 1, "shape")
        if spec is None:
            raise GraphError(f"Reshape node {node.name!r}: no target shape")
        return reshape_target(node, s, spec.reshape(-1))
    if op == "Flatten":
        axis = int(node.attrs.get("axis", 1))
        if not -len(s) <= axis <= len(s):
            raise GraphError(f"Flatten node {node.name!r}: axis {axis} out of range for rank {len(s)}")
        if axis < 0:
            axis += len(s)
        return (int(np.prod(s[:axis])), int(np.prod(s[axis:])))
    if op in ("Squeeze", "Unsqueeze"):
        axes = node.attrs.get("axes")
        given = operand(node, consts, 1, "axes")
        if given is not None:
            axes = [int(a) for a in given.reshape(-1)]
        if op == "Squeeze":
            if axes is None:
                return tuple(d for d in s if d != 1)
            axes = {norm_axis(a, len(s), "Squeeze") for a in axes}
            if any(s[a] != 1 for a in axes):
                raise GraphError(f"Squeeze node {node.name!r}: axes {sorted(axes)} of {s} are not 1")
            return tuple(d for i, d in enumerate(s) if i not in axes)
        if axes is None:
            raise GraphError(f"Unsqueeze node {node.name!r}: no axes")
        nd = len(s) + len(axes)
        norm = {norm_axis(a, nd, "Unsqueeze") for a in axes}
        if len(norm) != len(axes):
            raise GraphError(f"Unsqueeze node {node.name!r}: repeated axes {list(axes)}")
        it = iter(s)
        return tuple(1 if i in norm else next(it) for i in range(nd))
    raise GraphError(f"not a view: {op}")


def view_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """The dims of a view's source and result in matching runs of equal size (unit dims left out):
    (source dims, result dims) per run, so a run with one source dim is a split of it."""
    a = [i for i, d in enumerate(src) if d != 1]
    b = [j for j, d in enumerate(dst) if d != 1]
    runs: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        gi, gj, pi, pj = [a[i]], [b[j]], src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                gi.append(a[i])
                pi, i = pi * src[a[i]], i + 1
            else:
                gj.append(b[j])
                pj, j = pj * dst[b[j]], j + 1
        runs.append((gi, gj))
    return runs


def view_splits_only(src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether reading a view's source at a result index needs no division (every source dim is
    split into result dims, or kept)."""
    return all(len(gi) == 1 for gi, _ in view_groups(src, dst))


class _Alias:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        return [TensorType(alias_shape(node, x, consts), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        consts = [None] + [None if v is None else np.asarray(v) for v in xs[1:]]
        t = TensorType(tuple(x.shape), str(x.dtype))
        return [np.reshape(x, alias_shape(node, t, consts))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        """A view inside a fused kernel (described as Reshape to ``_shape``): the source read at the
        same row-major position; a run of merged dims is divided back, a split one is not."""
        x = tensor_arg(args[0])
        if "_shape" not in attrs:
            raise GraphError(f"view {name!r} inside a kernel needs its result shape")
        dst = tuple(int(d) for d in attrs["_shape"])
        runs = view_groups(x.shape, dst)

        def fn(i: list[Expr]) -> Expr:
            src: list[Any] = [0] * x.ndim
            for gi, gj in runs:
                flat = i[gj[0]]
                for j in gj[1:]:
                    flat = flat * dst[j] + i[j]
                for k in reversed(gi[1:]):
                    src[k] = flat % x.shape[k]
                    flat = flat // x.shape[k]
                src[gi[0]] = flat
            return x[tuple(src)]

        return nd_compute(dst, fn, name, "injective")


for _name in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    register(_name, ALIAS)(_Alias)


def _dropout_mask_dtype(node: Node, x_dtype: str) -> str:
    """The mask is bool (opset 10 on), before that of the input's type."""
    return x_dtype if node.attrs.get("_legacy") else "bool"


class _Dropout:
    """Dropout where nothing is dropped (inference, or training with ratio 0): the output is a view
    of the input and the mask, all kept, a constant. Random dropping is not compiled."""

    shape_only_outputs = (1,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        if _dropout_training(node, consts):
            raise GraphError(f"Dropout node {node.name!r}: training mode (random dropping) is not compiled")
        return [x, TensorType(x.shape, _dropout_mask_dtype(node, x.dtype))][: max(1, len(node.outputs))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        if _dropout_training(node, [None] + [None if v is None else np.asarray(v) for v in xs[1:]]):
            raise GraphError(f"Dropout node {node.name!r}: training mode (random dropping) is not compiled")
        mask = np.ones(x.shape, _dropout_mask_dtype(node, str(x.dtype)))
        return [x, mask][: max(1, len(node.outputs))]


register("Dropout", ALIAS)(_Dropout)


# --- shape computations (constants only) --------------------------------------------------------------
FOLD_LIMIT_BYTES = 1 << 30  # a constant computed at import may not exceed this


class _Folded:
    """Ops evaluated with numpy on constant inputs (and rejected otherwise)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        fold_only(node, consts)
        return infer_by_numpy(node, consts)


def _constant_value(node: Node) -> np.ndarray:
    a = node.attrs
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in a:
            v = np.asarray(a[key])
            if key.startswith("value_float"):
                v = v.astype(np.float32)
            elif key.startswith("value_int"):
                v = v.astype(np.int64)
            return v
    raise GraphError(f"Constant node {node.name!r}: no supported value attribute (sparse or string values)")


class _Constant:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        v = _constant_value(node)
        return [TensorType(tuple(v.shape), str(v.dtype))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [_constant_value(node)]


register("Constant", FOLD)(_Constant)


def _shape_slice(node: Node, n: int) -> slice:
    return slice(node.attrs.get("start", 0), node.attrs.get("end", n))


class _Shape:
    shape_only_outputs = (0,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        nd = len(same(types[0]).shape)
        return [TensorType((len(range(nd)[_shape_slice(node, nd)]),), "int64")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        s = np.asarray(np.shape(xs[0]), dtype=np.int64)
        return [s[_shape_slice(node, len(s))]]


register("Shape", FOLD)(_Shape)


class _Size:
    shape_only_outputs = (0,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [TensorType((), "int64")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(np.size(xs[0]), dtype=np.int64)]


register("Size", FOLD)(_Size)


def _check_size(node: Node, shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise GraphError(f"{node.op} node {node.name!r}: negative dim in {list(shape)}")
    if int(np.prod(shape, dtype=object)) * itemsize > FOLD_LIMIT_BYTES:
        raise GraphError(
            f"{node.op} node {node.name!r}: a constant of shape {list(shape)} is too large to fold"
        )
    return shape


class _ConstantOfShape:
    @staticmethod
    def _value(node: Node) -> np.ndarray:
        return np.asarray(node.attrs.get("value", np.zeros(1, np.float32))).reshape(-1)[:1]

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        fold_only(node, consts)
        v = _ConstantOfShape._value(node)
        shape = _check_size(node, np.asarray(consts[0]).reshape(-1), v.dtype.itemsize)
        return [TensorType(shape, str(v.dtype))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        v = _ConstantOfShape._value(node)
        shape = _check_size(node, np.asarray(xs[0]).reshape(-1), v.dtype.itemsize)
        return [np.full(shape, v[0], dtype=v.dtype)]


register("ConstantOfShape", FOLD)(_ConstantOfShape)


class _Range:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        fold_only(node, consts)
        start, limit, delta = (np.asarray(c).reshape(-1)[0] for c in consts[:3])
        if delta == 0:
            raise GraphError(f"Range node {node.name!r}: delta 0")
        n = max(int(np.ceil((limit - start) / delta)), 0)
        _check_size(node, (n,), np.asarray(start).dtype.itemsize)
        return [TensorType((n,), str(np.asarray(start).dtype))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        start, limit, delta = (np.asarray(x).reshape(-1)[0] for x in xs[:3])
        n = max(int(np.ceil((limit - start) / delta)), 0)
        return [(start + np.arange(n) * delta).astype(np.asarray(xs[0]).dtype)]


register("Range", FOLD)(_Range)


class _NonZero(_Folded):
    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(np.nonzero(np.asarray(xs[0])), dtype=np.int64)]


register("NonZero", FOLD)(_NonZero)


class _EyeLike:
    """An identity-like matrix of the input's 2-d shape: a constant, whatever the input holds."""

    shape_only_outputs = (0,)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        if len(x.shape) != 2:
            raise GraphError(f"EyeLike node {node.name!r}: input of rank {len(x.shape)}, expected 2")
        dt = onnx_dtype(node.attrs["dtype"]) if "dtype" in node.attrs else np.dtype(x.dtype)
        _check_size(node, x.shape, dt.itemsize)
        return [TensorType(x.shape, str(dt))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        dt = onnx_dtype(node.attrs["dtype"]) if "dtype" in node.attrs else x.dtype
        return [np.eye(x.shape[0], x.shape[1], k=int(node.attrs.get("k", 0)), dtype=dt)]


register("EyeLike", FOLD)(_EyeLike)
