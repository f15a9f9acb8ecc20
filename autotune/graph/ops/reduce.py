"""Reductions without data reuse: the Reduce* family, ArgMax/ArgMin, Softmax/LogSoftmax and the
normalizations (layer, instance, group). Each is its own kernel; elementwise consumers fuse after it."""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, compare, const

from ..ir import GraphError, Node, TensorType
from .base import (
    REDUCE,
    Arg,
    AttrNode,
    Consts,
    Types,
    broadcast_shapes,
    float_only,
    norm_axis,
    operand,
    output_positions,
    register,
    same,
)
from .elementwise import ANY, FLOAT, NUMERIC, _kernel_types
from .te_build import nd_compute, read, reduce_over, shape_of, tensor_arg


def reduced(
    x: te.Tensor, axes: Sequence[int], combiner: Callable, body: Callable[[list[Expr]], Expr], name: str
) -> tuple[te.Tensor, Callable[[Sequence[Expr]], tuple]]:
    """A reduction over ``axes`` and the function that indexes it from a full index (the reduced dims
    are kept as 1 when every dim is reduced, so no value is 0-d)."""
    keep = len(axes) == x.ndim
    r = reduce_over(x, axes, combiner, body, name, keepdims=keep)
    if keep:
        return r, lambda idx: tuple(0 for _ in idx)
    return r, lambda idx: tuple(v for d, v in enumerate(idx) if d not in axes)


# --- the Reduce family --------------------------------------------------------------------------------
def reduce_axes(node: Node, ndim: int, consts: Consts) -> list[int] | None:
    """The reduced axes (sorted), or None for the identity (empty axes with noop_with_empty_axes)."""
    axes = node.attrs.get("axes")
    given = operand(node, consts, 1, "axes")
    if given is not None:
        axes = [int(a) for a in given.reshape(-1)]
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return None
        return list(range(ndim))
    out = sorted({norm_axis(int(a), ndim, node.op) for a in axes})
    return out


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if d in axes else s for d, s in enumerate(shape) if keepdims or d not in axes)


def _lowest(dtype: np.dtype, sign: int) -> Any:
    """The identity of max (``sign`` -1: the lowest value) or min (+1: the highest) in ``dtype``, the
    result of reducing an empty set."""
    if dtype == np.bool_:
        return sign > 0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if sign > 0 else info.min
    return sign * np.inf


# name: (operand types, numpy of (x, axes), expression builder of (x, axes, name) -> full-rank te)
_REDUCE_NP: dict[str, Callable[[np.ndarray, tuple], np.ndarray]] = {
    "ReduceSum": lambda x, a: np.sum(x, axis=a, keepdims=True),
    "ReduceMean": lambda x, a: np.mean(x, axis=a, keepdims=True),
    "ReduceMax": lambda x, a: np.max(x, axis=a, keepdims=True, initial=_lowest(x.dtype, -1)),
    "ReduceMin": lambda x, a: np.min(x, axis=a, keepdims=True, initial=_lowest(x.dtype, 1)),
    "ReduceProd": lambda x, a: np.prod(x, axis=a, keepdims=True),
    "ReduceL1": lambda x, a: np.sum(np.abs(x), axis=a, keepdims=True),
    "ReduceL2": lambda x, a: np.sqrt(np.sum(x * x, axis=a, keepdims=True)),
    "ReduceSumSquare": lambda x, a: np.sum(x * x, axis=a, keepdims=True),
    "ReduceLogSum": lambda x, a: np.log(np.sum(x, axis=a, keepdims=True)),
    "ReduceLogSumExp": lambda x, a: np.log(np.sum(np.exp(x), axis=a, keepdims=True)),
}
_REDUCE_TYPES = {"ReduceSum": NUMERIC, "ReduceMax": ANY, "ReduceMin": ANY}  # of bools: any / all
# the ATen overloads that are each reduction (``OpDef.aten``)
_REDUCE_ATEN = {
    "ReduceSum": ("sum.dim_IntList", "sum.default"),
    "ReduceMean": ("mean.dim", "mean.default"),
    "ReduceMax": ("amax.default",),
    "ReduceMin": ("amin.default",),
    "ReduceProd": ("prod.dim_int",),
}


MAX_PRODUCT_TERMS = 64  # a run-time ReduceProd is an unrolled product of at most this many elements


def _reduce_expr(op: str, x: te.Tensor, axes: list[int], name: str) -> tuple[te.Tensor | None, Callable]:
    """The reduction stage(s) of ``op`` (None: computed inline) and a function from a full index to
    its value there."""
    n = math.prod(x.shape[d] for d in axes)
    if op == "ReduceProd":  # no product reducer: the elements multiplied in order, unrolled
        taps = list(itertools.product(*(range(x.shape[d]) for d in axes)))

        def product(i: Sequence[Expr]) -> Expr:
            out = None
            for tap in taps:
                idx = list(i)
                for d, v in zip(axes, tap):
                    idx[d] = v
                out = x[tuple(idx)] if out is None else out * x[tuple(idx)]
            return out

        return None, product
    if op in ("ReduceMax", "ReduceMin"):
        r, at = reduced(
            x,
            axes,
            T.max_reduce if op == "ReduceMax" else T.min_reduce,
            lambda i: x[tuple(i)],
            name + ("_max" if op == "ReduceMax" else "_min"),
        )
        return r, lambda i: r[at(i)]
    if op == "ReduceLogSumExp":
        mx, at = reduced(x, axes, T.max_reduce, lambda i: x[tuple(i)], name + "_max")
        s, _ = reduced(x, axes, T.sum, lambda i: T.exp(x[tuple(i)] - mx[at(i)]), name + "_sum")
        return s, lambda i: mx[at(i)] + T.log(s[at(i)])
    body = {
        "ReduceSum": lambda i: x[tuple(i)],
        "ReduceMean": lambda i: x[tuple(i)],
        "ReduceL1": lambda i: T.fabs(x[tuple(i)]),
        "ReduceL2": lambda i: x[tuple(i)] * x[tuple(i)],
        "ReduceSumSquare": lambda i: x[tuple(i)] * x[tuple(i)],
        "ReduceLogSum": lambda i: x[tuple(i)],
    }[op]
    s, at = reduced(x, axes, T.sum, body, name + "_sum")
    post = {
        "ReduceMean": lambda v: v * (1.0 / n),
        "ReduceL2": T.sqrt,
        "ReduceLogSum": T.log,
    }.get(op, lambda v: v)
    return s, lambda i: post(s[at(i)])


def _reduce_def(op: str) -> type:
    class _Reduce:
        const_operands = {1: "axes"}
        aten = dict.fromkeys(_REDUCE_ATEN.get(op, ()), "reduce")

        @staticmethod
        def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
            x = same(types[0])
            _kernel_types(node, types[:1], consts[:1], _REDUCE_TYPES.get(op, FLOAT))
            axes = reduce_axes(node, len(x.shape), consts)
            if axes is None:
                return [x]
            terms = math.prod(x.shape[d] for d in axes)
            if op == "ReduceProd" and consts[0] is None and terms > MAX_PRODUCT_TERMS:
                raise GraphError(
                    f"ReduceProd node {node.name!r}: a run-time product of {terms} elements "
                    f"(at most {MAX_PRODUCT_TERMS} compiled)"
                )
            return [TensorType(_reduced_shape(x.shape, axes, bool(node.attrs.get("keepdims", 1))), x.dtype)]

        @staticmethod
        def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
            x = np.asarray(xs[0])
            axes = reduce_axes(
                node, x.ndim, [None] + [np.asarray(v) if v is not None else None for v in xs[1:]]
            )
            if axes is None:
                return [x]
            y = _REDUCE_NP[op](x, tuple(axes))
            if not node.attrs.get("keepdims", 1):
                y = y.reshape(_reduced_shape(x.shape, axes, False))
            return [np.asarray(y).astype(x.dtype, copy=False)]

        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            x = tensor_arg(args[0])
            axes = reduce_axes(AttrNode(op, attrs, name), x.ndim, [])
            if axes is None:
                return nd_compute(x.shape, lambda i: x[tuple(i)], name, "injective")
            keepdims = bool(attrs.get("keepdims", 1))
            _, value = _reduce_expr(op, x, axes, name)
            out_shape = _reduced_shape(x.shape, axes, keepdims)

            def body(i: list[Expr]) -> Expr:
                full, it = [], iter(i)
                for d in range(x.ndim):
                    if d in axes:
                        full.append(0)
                        if keepdims:
                            next(it)
                    else:
                        full.append(next(it))
                return value(full)

            return nd_compute(out_shape, body, name, "elementwise")

    return _Reduce


for _op in _REDUCE_NP:
    register(_op, REDUCE)(_reduce_def(_op))


# --- ArgMax / ArgMin ----------------------------------------------------------------------------------
class _ArgReduce:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_types(node, types, consts, NUMERIC)
        axis = norm_axis(int(node.attrs.get("axis", 0)), len(x.shape), node.op)
        return [TensorType(_reduced_shape(x.shape, [axis], bool(node.attrs.get("keepdims", 1))), "int64")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axis = norm_axis(int(node.attrs.get("axis", 0)), x.ndim, node.op)
        fn = np.argmax if node.op == "ArgMax" else np.argmin
        if node.attrs.get("select_last_index", 0):
            y = x.shape[axis] - 1 - fn(np.flip(x, axis=axis), axis=axis)
        else:
            y = fn(x, axis=axis)
        if node.attrs.get("keepdims", 1):
            y = np.expand_dims(y, axis)
        return [np.asarray(y, dtype=np.int64)]


def _arg_def(op: str) -> type:
    class _Arg(_ArgReduce):
        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            x = tensor_arg(args[0])
            axis = norm_axis(int(attrs.get("axis", 0)), x.ndim, op)
            best, at = reduced(
                x,
                [axis],
                T.max_reduce if op == "ArgMax" else T.min_reduce,
                lambda i: x[tuple(i)],
                name + "_best",
            )
            last = bool(attrs.get("select_last_index", 0))
            n = x.shape[axis]

            def pos(i: list[Expr]) -> Expr:
                hit = compare("eq", x[tuple(i)], best[at(i)])
                r = T.cast("int64", i[axis])
                return T.select(hit, r, const(-1 if last else n, "int64"))

            idx, at2 = reduced(x, [axis], T.max_reduce if last else T.min_reduce, pos, name + "_pos")
            keep = bool(attrs.get("keepdims", 1))
            shape = _reduced_shape(x.shape, [axis], keep)

            def body(i: list[Expr]) -> Expr:
                full = list(i) if keep else [*i[:axis], 0, *i[axis:]]
                full[axis] = 0
                return idx[at2(full)]

            return nd_compute(shape, body, name, "elementwise")

    return _Arg


register("ArgMax", REDUCE)(_arg_def("ArgMax"))
register("ArgMin", REDUCE)(_arg_def("ArgMin"))


# --- Softmax / LogSoftmax -----------------------------------------------------------------------------
def softmax_axes(node: Node, ndim: int) -> list[int]:
    """Axes a (Log)Softmax normalises over (opset >= 13: one axis; before: the flattened tail)."""
    if node.attrs.get("_legacy", False):
        axis = norm_axis(node.attrs.get("axis", 1), ndim, node.op)
        return list(range(axis, ndim))
    return [norm_axis(node.attrs.get("axis", -1), ndim, node.op)]


class _FloatOverAxes:
    """A float32 operator whose output has its input's type, over the axes ``axes_of(node, rank)``
    names (and checks)."""

    axes_of: Callable[[Any, int], Any] = staticmethod(softmax_axes)

    @classmethod
    def infer(cls, node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        cls.axes_of(node, len(x.shape))
        return [x]


def _softmax_def(log: bool) -> type:
    class _Softmax(_FloatOverAxes):
        @staticmethod
        def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
            x = xs[0]
            axes = tuple(softmax_axes(node, x.ndim))
            z = x - x.max(axis=axes, keepdims=True)
            if log:
                return [(z - np.log(np.exp(z).sum(axis=axes, keepdims=True))).astype(x.dtype, copy=False)]
            e = np.exp(z)
            return [(e / e.sum(axis=axes, keepdims=True)).astype(x.dtype, copy=False)]

        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            x = tensor_arg(args[0])
            axes = softmax_axes(AttrNode("LogSoftmax" if log else "Softmax", attrs, name), x.ndim)
            mx, at = reduced(x, axes, T.max_reduce, lambda i: x[tuple(i)], name + "_max")
            if log:
                ex, _ = reduced(x, axes, T.sum, lambda i: T.exp(x[tuple(i)] - mx[at(i)]), name + "_expsum")
                return nd_compute(
                    x.shape, lambda i: x[tuple(i)] - mx[at(i)] - T.log(ex[at(i)]), name, "elementwise"
                )
            # the exponentials a stage of their own, read by the sum and the scaling: a schedule
            # inlines it into both (each computed twice) or keeps a row of them (computed once);
            # one reciprocal a row, a product an element
            e = nd_compute(x.shape, lambda i: T.exp(x[tuple(i)] - mx[at(i)]), name + "_exp", "elementwise")
            ex, _ = reduced(e, axes, T.sum, lambda i: e[tuple(i)], name + "_expsum")
            return nd_compute(x.shape, lambda i: e[tuple(i)] * (1.0 / ex[at(i)]), name, "elementwise")

    return _Softmax


register("Softmax", REDUCE)(_softmax_def(False))
register("LogSoftmax", REDUCE)(_softmax_def(True))


# --- normalizations -----------------------------------------------------------------------------------
def _check_ln(node: Node) -> str | None:
    stash = int(node.attrs.get("stash_type", 1))
    if any(node.outputs[1:]) and stash != 1:
        return f"Mean / InvStdDev outputs with stash_type={stash} (the statistics are float32)"
    return None


def layernorm_axis(node: Node, ndim: int) -> int:
    return norm_axis(node.attrs.get("axis", -1), ndim, "LayerNormalization")


def moments(x: te.Tensor, axes: list[int], name: str) -> tuple[te.Tensor, te.Tensor, Callable]:
    """Mean and (population) variance over ``axes`` and the function that indexes both from a full
    index."""
    inv_n = 1.0 / math.prod(x.shape[d] for d in axes)
    mean, at = reduced(x, axes, T.sum, lambda i: x[tuple(i)] * inv_n, name + "_mean")

    def sq(i: list[Expr]) -> Expr:
        d = x[tuple(i)] - mean[at(i)]
        return d * d * inv_n

    var, _ = reduced(x, axes, T.sum, sq, name + "_var")
    return mean, var, at


def normalized(x: te.Tensor, axes: list[int], eps: float, name: str) -> Callable[[list[Expr]], Expr]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes``, as a function of the full index."""
    mean, var, at = moments(x, axes, name)
    return lambda i: (x[tuple(i)] - mean[at(i)]) * T.rsqrt(var[at(i)] + eps)


def _normalize_np(x: np.ndarray, axes: tuple, eps: float) -> np.ndarray:
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


LN_MEAN, LN_INV_STD = 1, 2  # LayerNormalization's optional outputs


class _LayerNorm:
    """Y, and the optional Mean and InvStdDev (shape ``x.shape[:axis] + (1, ...)``, float32: the
    stash type), each its own kernel (the statistics read only X)."""

    output_operands = {LN_MEAN: 1, LN_INV_STD: 1}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        axis = layernorm_axis(node, len(x.shape))
        tail = x.shape[axis:]
        for t in types[1:3]:
            if t is not None:
                if len(t.shape) > len(tail) or broadcast_shapes(tail, t.shape) != tuple(tail):
                    raise GraphError(f"LayerNormalization node {node.name!r}: scale/bias {t.shape} vs {tail}")
        stats = TensorType(x.shape[:axis] + (1,) * len(tail), "float32")
        return [x if k == 0 else stats for k in output_positions(node)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axes = tuple(range(layernorm_axis(node, x.ndim), x.ndim))
        eps = node.attrs.get("epsilon", 1e-5)
        mu = x.mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
        outs = []
        for k in output_positions(node):
            if k == LN_MEAN:
                outs.append(mu.astype(np.float32))
            elif k == LN_INV_STD:
                outs.append(inv.astype(np.float32))
            else:
                y = (x - mu) * inv * xs[1]
                if len(xs) > 2 and xs[2] is not None:
                    y = y + xs[2]
                outs.append(y.astype(x.dtype, copy=False))
        return outs

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        axis = layernorm_axis(AttrNode("LayerNormalization", attrs, name), x.ndim)
        axes = list(range(axis, x.ndim))
        eps = float(attrs.get("epsilon", 1e-5))
        k = int(attrs.get("_output", 0))
        if k:
            mean, var, at = moments(x, axes, name)
            stats = x.shape[:axis] + (1,) * len(axes)
            if k == LN_MEAN:
                return nd_compute(stats, lambda i: mean[at(i)], name, "elementwise")
            return nd_compute(stats, lambda i: T.rsqrt(var[at(i)] + eps), name, "elementwise")
        gamma = args[1]
        beta = args[2] if len(args) > 2 else None
        norm = normalized(x, axes, eps, name)

        def out(i: list[Expr]) -> Expr:
            y = norm(i) * read(gamma, i, x.shape)
            return y + read(beta, i, x.shape) if beta is not None else y

        return nd_compute(x.shape, out, name, "elementwise")


register("LayerNormalization", REDUCE, _check_ln)(_LayerNorm)


def _check_rms(node: Node) -> str | None:
    stash = int(node.attrs.get("stash_type", 1))
    return None if stash == 1 else f"stash_type={stash} (computed in float32)"


class _RMSNorm:
    """``x / sqrt(mean(x^2) + epsilon) * scale`` over the axes from ``axis`` on (RMSNormalization)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x, scale = same(types[0]), same(types[1])
        norm_axis(node.attrs.get("axis", -1), len(x.shape), "RMSNormalization")
        if broadcast_shapes(x.shape, scale.shape) != x.shape:
            raise GraphError(f"RMSNormalization node {node.name!r}: scale {scale.shape} vs input {x.shape}")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axis = norm_axis(node.attrs.get("axis", -1), x.ndim, "RMSNormalization")
        ms = (x * x).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
        return [(x / np.sqrt(ms + node.attrs.get("epsilon", 1e-5)) * xs[1]).astype(x.dtype, copy=False)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, scale = tensor_arg(args[0]), args[1]
        axis = norm_axis(attrs.get("axis", -1), x.ndim, "RMSNormalization")
        axes = list(range(axis, x.ndim))
        inv_n = 1.0 / math.prod(x.shape[d] for d in axes)
        ms, at = reduced(x, axes, T.sum, lambda i: x[tuple(i)] * x[tuple(i)] * inv_n, name + "_ms")
        eps = float(attrs.get("epsilon", 1e-5))

        def out(i: list[Expr]) -> Expr:
            return x[tuple(i)] * T.rsqrt(ms[at(i)] + eps) * read(scale, i, x.shape)

        return nd_compute(x.shape, out, name, "elementwise")


register("RMSNormalization", REDUCE, _check_rms)(_RMSNorm)


MVN_EPSILON = 1e-9  # added to the standard deviation, as the operator's function body does


def _mvn_axes(node: Any, ndim: int) -> list[int]:
    axes = node.attrs.get("axes", [0, 2, 3])
    return sorted({norm_axis(int(a), ndim, "MeanVarianceNormalization") for a in axes})


class _MeanVarianceNorm(_FloatOverAxes):
    """``(x - mean) / (std + 1e-9)`` over ``axes`` (MeanVarianceNormalization)."""

    axes_of = staticmethod(_mvn_axes)

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        axes = tuple(_mvn_axes(node, xs[0].ndim))
        centred = xs[0] - xs[0].mean(axis=axes, keepdims=True)
        std = np.sqrt((centred**2).mean(axis=axes, keepdims=True))
        return [(centred / (std + MVN_EPSILON)).astype(xs[0].dtype, copy=False)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        axes = _mvn_axes(AttrNode("MeanVarianceNormalization", attrs, name), x.ndim)
        mean, var, at = moments(x, axes, name)

        def out(i: list[Expr]) -> Expr:
            return (x[tuple(i)] - mean[at(i)]) / (T.sqrt(var[at(i)]) + MVN_EPSILON)

        return nd_compute(x.shape, out, name, "elementwise")


register("MeanVarianceNormalization", REDUCE)(_MeanVarianceNorm)


def _check_lp(node: Node) -> str | None:
    p = int(node.attrs.get("p", 2))
    return None if p in (1, 2) else f"p={p} (only 1 and 2)"


def _lp_axis(node: Any, ndim: int) -> int:
    return norm_axis(int(node.attrs.get("axis", -1)), ndim, "LpNormalization")


class _LpNorm(_FloatOverAxes):
    """``x / ||x||_p`` along ``axis`` (p = 1 or 2); where the norm is 0 the output is 0."""

    axes_of = staticmethod(_lp_axis)

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axis = _lp_axis(node, x.ndim)
        if int(node.attrs.get("p", 2)) == 1:
            norm = np.abs(x).sum(axis=axis, keepdims=True)
        else:
            norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            return [np.where(norm == 0, 0, x / norm).astype(x.dtype, copy=False)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        axis = _lp_axis(AttrNode("LpNormalization", attrs, name), x.ndim)
        l1 = int(attrs.get("p", 2)) == 1
        body = (lambda i: T.fabs(x[tuple(i)])) if l1 else (lambda i: x[tuple(i)] * x[tuple(i)])
        s, at = reduced(x, [axis], T.sum, body, name + "_sum")
        zero = const(0, x.dtype)

        def out(i: list[Expr]) -> Expr:
            norm = s[at(i)] if l1 else T.sqrt(s[at(i)])
            return T.select(compare("eq", norm, zero), zero, x[tuple(i)] / norm)

        return nd_compute(x.shape, out, name, "elementwise")


register("LpNormalization", REDUCE, _check_lp)(_LpNorm)


class _Hardmax:
    """1 at the first maximum along the axis (opsets before 13: of the flattened axes from ``axis``
    on), 0 elsewhere."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_types(node, types, consts, NUMERIC)
        softmax_axes(node, len(x.shape))
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axes = softmax_axes(node, x.ndim)
        # one axis moved last, or the trailing axes (opsets before 13) flattened into one
        rows = np.moveaxis(x, axes[0], -1) if len(axes) == 1 else x.reshape(*x.shape[: axes[0]], -1)
        y = np.zeros_like(rows)
        np.put_along_axis(y, np.argmax(rows, axis=-1)[..., None], 1, axis=-1)
        return [np.ascontiguousarray(np.moveaxis(y, -1, axes[0]) if len(axes) == 1 else y.reshape(x.shape))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        axes = softmax_axes(AttrNode("Hardmax", attrs, name), x.ndim)
        strides = {d: math.prod(x.shape[e] for e in axes if e > d) for d in axes}

        def flat(i: Sequence[Expr]) -> Expr:
            out: Any = 0
            for d in axes:
                out = out + T.cast("int64", i[d]) * strides[d]
            return out

        best, at = reduced(x, axes, T.max_reduce, lambda i: x[tuple(i)], name + "_best")
        n = math.prod(x.shape[d] for d in axes)

        def pos(i: list[Expr]) -> Expr:
            return T.select(compare("eq", x[tuple(i)], best[at(i)]), flat(i), const(n, "int64"))

        first, _ = reduced(x, axes, T.min_reduce, pos, name + "_first")
        one, zero = const(1, x.dtype), const(0, x.dtype)
        return nd_compute(
            x.shape, lambda i: T.select(compare("eq", flat(i), first[at(i)]), one, zero), name, "elementwise"
        )


register("Hardmax", REDUCE)(_Hardmax)


class _InstanceNorm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        if len(x.shape) < 3:
            raise GraphError(f"InstanceNormalization node {node.name!r}: needs spatial dims, got {x.shape}")
        for t in types[1:3]:
            if t is None or t.shape != (x.shape[1],):
                raise GraphError(
                    f"InstanceNormalization node {node.name!r}: scale/bias must be ({x.shape[1]},)"
                )
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, s, b = xs[:3]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = _normalize_np(x, tuple(range(2, x.ndim)), node.attrs.get("epsilon", 1e-5))
        return [(y * s.reshape(shape) + b.reshape(shape)).astype(x.dtype, copy=False)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, s, b = tensor_arg(args[0]), args[1], args[2]  # s, b: one value may come folded to a scalar
        norm = normalized(x, list(range(2, x.ndim)), float(attrs.get("epsilon", 1e-5)), name)
        c = (x.shape[1],)

        def out(i: list[Expr]) -> Expr:
            return norm(i) * read(s, [i[1]], c) + read(b, [i[1]], c)

        return nd_compute(x.shape, out, name, "elementwise")


register("InstanceNormalization", REDUCE)(_InstanceNorm)


class _GroupNorm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        g = int(node.attrs.get("num_groups", 0))
        if len(x.shape) < 3 or g <= 0 or x.shape[1] % g:
            raise GraphError(f"GroupNormalization node {node.name!r}: {g} groups do not divide {x.shape}")
        for t in types[1:3]:
            if t is None or t.shape not in ((x.shape[1],), (g,)):
                raise GraphError(f"GroupNormalization node {node.name!r}: scale/bias shape {t and t.shape}")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, s, b = xs[:3]
        g = int(node.attrs["num_groups"])
        n, c = x.shape[:2]
        y = _normalize_np(x.reshape(n, g, -1), (2,), node.attrs.get("epsilon", 1e-5)).reshape(x.shape)
        if s.shape[0] != c:  # one scale per group (opset 18)
            s, b = np.repeat(s, c // g), np.repeat(b, c // g)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return [(y * s.reshape(shape) + b.reshape(shape)).astype(x.dtype, copy=False)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, s, b = tensor_arg(args[0]), args[1], args[2]  # s, b: one value may come folded to a scalar
        g = int(attrs["num_groups"])
        n, c = x.shape[:2]
        cpg = c // g
        spatial = x.shape[2:]
        inv_n = 1.0 / (cpg * math.prod(spatial))
        eps = float(attrs.get("epsilon", 1e-5))
        rc = T.reduce_axis(cpg, "rc")
        rs = [T.reduce_axis(d, f"rs{k}") for k, d in enumerate(spatial)]

        mean = nd_compute(
            (n, g),
            lambda i: T.sum(x[(i[0], i[1] * cpg + rc.var, *[r.var for r in rs])] * inv_n, axis=[rc, *rs]),
            name + "_mean",
            "reduce",
        )

        def sq(i: list[Expr]) -> Expr:
            d = x[(i[0], i[1] * cpg + rc.var, *[r.var for r in rs])] - mean[i[0], i[1]]
            return T.sum(d * d * inv_n, axis=[rc, *rs])

        var = nd_compute((n, g), sq, name + "_var", "reduce")
        per_group = shape_of(s) == (g,) and g != c

        def out(i: list[Expr]) -> Expr:
            grp = i[1] // cpg
            y = (x[tuple(i)] - mean[i[0], grp]) * T.rsqrt(var[i[0], grp] + eps)
            k = grp if per_group else i[1]
            return y * read(s, [k], shape_of(s)) + read(b, [k], shape_of(b))

        return nd_compute(x.shape, out, name, "elementwise")


register("GroupNormalization", REDUCE)(_GroupNorm)


# --- CumSum -------------------------------------------------------------------------------------------
class _CumSum:
    const_operands = {1: "axis"}

    @staticmethod
    def _axis(node: Any, ndim: int, consts: Consts) -> int:
        a = operand(node, consts, 1, "axis")
        if a is None:
            raise GraphError(f"CumSum node {node.name!r}: no axis")
        return norm_axis(int(a.reshape(-1)[0]), ndim, "CumSum")

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        _kernel_types(node, types[:1], consts[:1], NUMERIC)
        _CumSum._axis(node, len(x.shape), consts)
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axis = _CumSum._axis(node, x.ndim, [None, *xs[1:]])
        rev, excl = node.attrs.get("reverse", 0), node.attrs.get("exclusive", 0)
        y = np.flip(x, axis) if rev else x
        c = np.cumsum(y, axis=axis, dtype=x.dtype)
        if excl:
            c = c - y
        return [np.flip(c, axis).copy() if rev else c]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        """A running sum as a masked reduction over the whole axis (quadratic in its length: meant for
        the short axes real models cumulate over, e.g. position ids from a padding mask)."""
        x = tensor_arg(args[0])
        axis = _CumSum._axis(AttrNode("CumSum", attrs, name), x.ndim, [])
        rev, excl = attrs.get("reverse", 0), attrs.get("exclusive", 0)
        r = T.reduce_axis(x.shape[axis], "r")
        zero = const(0, x.dtype)

        def body(i: list[Expr]) -> Expr:
            src = list(i)
            src[axis] = r.var
            if rev:
                keep = compare("lt", i[axis], r.var) if excl else compare("le", i[axis], r.var)
            else:
                keep = compare("lt", r.var, i[axis]) if excl else compare("le", r.var, i[axis])
            return T.sum(T.select(keep, x[tuple(src)], zero), axis=r)

        return nd_compute(x.shape, body, name, "reduce")


register("CumSum", REDUCE)(_CumSum)
