"""Tensor-expression builders of graph operators: a node's inputs (te tensors, or Python floats for
scalar constants folded into the expression) -> its output tensor. The op library
(``autotune.te.ops``) is used where it fits; N-d and NHWC variants are written here."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence, Union

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, FloatImm, all_of, as_expr
from autotune.te.ops import conv as conv_ops
from autotune.te.ops import pool as pool_ops

from .ir import GraphError
from .ops import broadcast_shapes, layernorm_axis, matmul_shape, pool_params, softmax_axes, transpose_perm

Arg = Union[te.Tensor, float, None]


class _AttrNode:
    """The slice of a graph Node the axis helpers read (op, attrs, name)."""

    def __init__(self, op: str, attrs: dict[str, Any], name: str) -> None:
        self.op, self.attrs, self.name, self.outputs = op, attrs, name, [name]


def nd_compute(shape: Sequence[int], fn: Callable[[list[Expr]], Expr], name: str, tag: str = "") -> te.Tensor:
    """``te.compute`` over an n-d shape with the body written against a list of index variables."""
    names = [f"i{d}" for d in range(len(shape))]
    lam = eval(f"lambda {', '.join(names)}: fn([{', '.join(names)}])", {"fn": fn})  # noqa: S307
    return T.compute(tuple(shape), lam, name=name, tag=tag)


def read(x: Arg, idx: Sequence[Expr], out_shape: Sequence[int]) -> Expr:
    """Element of ``x`` at output index ``idx`` under numpy broadcasting (right-aligned)."""
    if x is None:
        raise GraphError("missing operand")
    if not isinstance(x, te.Tensor):
        return as_expr(float(x))
    off = len(out_shape) - x.ndim
    return x[tuple(0 if x.shape[d] == 1 else idx[off + d] for d in range(x.ndim))]


def _shape(x: Arg) -> tuple[int, ...]:
    return x.shape if isinstance(x, te.Tensor) else ()


# --- elementwise ----------------------------------------------------------------------------------
# erf(x) ~= x * P(x^2) / Q(x^2) on x clamped to +-3.92 (where erf is 1 to float32 precision):
# a rational fit made for this compiler (iteratively reweighted least squares against math.erf),
# max abs error 3.2e-7 evaluated in float32. Unlike the libm call it is plain arithmetic (add, mul,
# div, min, max), so the vectorizer turns a GELU epilogue into vector code.
ERF_CLAMP = 3.92
ERF_P = (
    1.1283791505652283,
    0.18524740107618864,
    0.05215095024488755,
    0.003568581127612459,
    0.0002846817420582848,
    2.144723905778134e-06,
)
ERF_Q = (
    1.0,
    0.49750425950635646,
    0.11205386523138361,
    0.014569769532586905,
    0.0011227262393114796,
    3.9062595769322195e-05,
)


def _horner(t: Expr, coeffs: Sequence[float]) -> Expr:
    out: Expr = as_expr(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * t + c
    return out


def erf_expr(v: Expr) -> Expr:
    """erf as a clamped rational function (see ERF_P / ERF_Q)."""
    x = T.min(T.max(v, -ERF_CLAMP), ERF_CLAMP)
    t = x * x
    return x * _horner(t, ERF_P) / _horner(t, ERF_Q)


def gelu_expr(v: Expr, approximate: str = "none") -> Expr:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * v * (1.0 + T.tanh(c * (v + 0.044715 * (v * v * v))))
    return 0.5 * v * (1.0 + erf_expr(v * (1.0 / math.sqrt(2.0))))


def _pow(a: Expr, b: Expr) -> Expr:
    if isinstance(b, FloatImm):
        e = b.value
        if e == 1.0:
            return a
        if e == 2.0:
            return a * a
        if e == 3.0:
            return a * a * a
        if e == 0.5:
            return T.sqrt(a)
    return T.power(a, b)


_UNARY: dict[str, Callable[[Expr, dict], Expr]] = {
    "Relu": lambda v, a: T.max(v, 0.0),
    "Sigmoid": lambda v, a: T.sigmoid(v),
    "Tanh": lambda v, a: T.tanh(v),
    "Erf": lambda v, a: erf_expr(v),
    "Sqrt": lambda v, a: T.sqrt(v),
    "Exp": lambda v, a: T.exp(v),
    "Neg": lambda v, a: -v,
    "Abs": lambda v, a: T.fabs(v),
    "Reciprocal": lambda v, a: 1.0 / v,
    "Gelu": lambda v, a: gelu_expr(v, a.get("approximate", "none")),
}

_BINARY: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": lambda x, y: x + y,
    "Sub": lambda x, y: x - y,
    "Mul": lambda x, y: x * y,
    "Div": lambda x, y: x / y,
    "Pow": _pow,
    "Max": lambda x, y: T.max(x, y),
    "Min": lambda x, y: T.min(x, y),
}


def elementwise(op: str, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    if op in _UNARY:
        x = args[0]
        if not isinstance(x, te.Tensor):
            raise GraphError(f"{op} of a constant should have been folded")
        fn = _UNARY[op]
        return nd_compute(x.shape, lambda idx: fn(read(x, idx, x.shape), attrs), name, "elementwise")
    a, b = args[0], args[1]
    shape = broadcast_shapes(_shape(a), _shape(b))
    fn2 = _BINARY[op]
    return nd_compute(shape, lambda idx: fn2(read(a, idx, shape), read(b, idx, shape)), name, "elementwise")


# --- anchors --------------------------------------------------------------------------------------
def conv2d(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x, w = args[0], args[1]
    assert isinstance(x, te.Tensor) and isinstance(w, te.Tensor)
    stride = list(attrs.get("strides", [1, 1]))[0]
    pad = list(attrs.get("pads", [0, 0, 0, 0]))[0]
    dil = list(attrs.get("dilations", [1, 1]))[0]
    groups = int(attrs.get("group", 1))
    nhwc = attrs.get("layout", "NCHW") == "NHWC"
    if nhwc:
        y = conv_ops.conv2d_nhwc(x, w, stride, pad, dil, groups, name=name)
    else:
        y = conv_ops.conv2d_nchw(x, w, stride, pad, dil, groups, name=name)
    bias = args[2] if len(args) > 2 else None
    if bias is None:
        return y
    assert isinstance(bias, te.Tensor)
    axis = 3 if nhwc else 1
    return nd_compute(y.shape, lambda i: y[tuple(i)] + bias[i[axis]], name + "_bias", "elementwise")


def matmul(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    """``C[..., i, j] = sum_k A[..., i, k] * B[..., k, j]`` with broadcast batch dims."""
    a, b = args[0], args[1]
    assert isinstance(a, te.Tensor) and isinstance(b, te.Tensor)
    shape = matmul_shape(a.shape, b.shape, name)
    nb = len(shape) - 2
    k = T.reduce_axis(a.shape[-1], "k")

    def body(idx: list[Expr]) -> Expr:
        batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
        ai = [0 if a.shape[d] == 1 else batch[d + nb - (a.ndim - 2)] for d in range(a.ndim - 2)]
        bi = [0 if b.shape[d] == 1 else batch[d + nb - (b.ndim - 2)] for d in range(b.ndim - 2)]
        return T.sum(a[(*ai, i, k)] * b[(*bi, k, j)], axis=k)

    return nd_compute(shape, body, name, "matmul")


# --- reductions -----------------------------------------------------------------------------------
def _reduce_over(
    x: te.Tensor, axes: Sequence[int], combiner: Callable, body: Callable[[list[Expr]], Expr], name: str
) -> te.Tensor:
    """A reduction over ``axes`` of ``body(full index)``; the result drops the reduced dims."""
    keep = [d for d in range(x.ndim) if d not in axes]
    raxes = [T.reduce_axis(x.shape[d], f"r{d}") for d in axes]

    def fn(idx: list[Expr]) -> Expr:
        full: list[Any] = [None] * x.ndim
        for d, v in zip(keep, idx):
            full[d] = v
        for d, r in zip(axes, raxes):
            full[d] = r.var
        return combiner(body(full), axis=raxes)

    return nd_compute(tuple(x.shape[d] for d in keep), fn, name, "reduce")


def _drop(idx: Sequence[Expr], axes: Sequence[int]) -> tuple:
    return tuple(v for d, v in enumerate(idx) if d not in axes)


def softmax(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x = args[0]
    assert isinstance(x, te.Tensor)
    axes = softmax_axes(_AttrNode("Softmax", attrs, name), x.ndim)
    mx = _reduce_over(x, axes, T.max_reduce, lambda i: x[tuple(i)], name + "_max")
    ex = _reduce_over(x, axes, T.sum, lambda i: T.exp(x[tuple(i)] - mx[_drop(i, axes)]), name + "_expsum")
    return nd_compute(
        x.shape, lambda i: T.exp(x[tuple(i)] - mx[_drop(i, axes)]) / ex[_drop(i, axes)], name, "elementwise"
    )


def layernorm(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x, gamma = args[0], args[1]
    beta = args[2] if len(args) > 2 else None
    assert isinstance(x, te.Tensor)
    axis = layernorm_axis(_AttrNode("LayerNormalization", attrs, name), x.ndim)
    axes = list(range(axis, x.ndim))
    eps = float(attrs.get("epsilon", 1e-5))
    inv_n = 1.0 / math.prod(x.shape[axis:])
    mean = _reduce_over(x, axes, T.sum, lambda i: x[tuple(i)] * inv_n, name + "_mean")

    def sq(i: list[Expr]) -> Expr:
        d = x[tuple(i)] - mean[_drop(i, axes)]
        return d * d * inv_n

    var = _reduce_over(x, axes, T.sum, sq, name + "_var")

    def out(i: list[Expr]) -> Expr:
        m = _drop(i, axes)
        y = (x[tuple(i)] - mean[m]) * T.rsqrt(var[m] + eps) * read(gamma, i, x.shape)
        return y + read(beta, i, x.shape) if beta is not None else y

    return nd_compute(x.shape, out, name, "elementwise")


def _pad(x: te.Tensor, pad: int, value: float, nhwc: bool, name: str) -> te.Tensor:
    if pad == 0:
        return x
    if not nhwc:
        return conv_ops.pad_nchw(x, pad, name=name, pad_value=value)
    n, h, w, c = x.shape

    def fn(i: list[Expr]) -> Expr:
        b, y, xx, ch = i
        inside = all_of(y >= pad, y < h + pad, xx >= pad, xx < w + pad)
        return T.select(inside, x[b, y - pad, xx - pad, ch], value)

    return nd_compute((n, h + 2 * pad, w + 2 * pad, c), fn, name, "pad")


MAX_WINDOW_TAPS = 16  # pooling windows up to this size are unrolled into elementwise stages


def pool2d(op: str, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x = args[0]
    assert isinstance(x, te.Tensor)
    nhwc = attrs.get("layout", "NCHW") == "NHWC"
    p = pool_params(_AttrNode(op, attrs, name))
    kh, kw, st, pad = p["kh"], p["kw"], p["stride"], p["pad"]
    if nhwc:
        n, h, w, c = x.shape
    else:
        n, c, h, w = x.shape
    oh, ow = (h + 2 * pad - kh) // st + 1, (w + 2 * pad - kw) // st + 1
    is_max = op == "MaxPool"
    xp = _pad(x, pad, pool_ops.lowest(x.dtype) if is_max else 0.0, nhwc, name + "_pad")
    shape = (n, oh, ow, c) if nhwc else (n, c, oh, ow)

    def tap(i: list[Expr], r: Any, s: Any) -> Expr:
        if nhwc:
            b, y, xx, ch = i
            return xp[b, y * st + r, xx * st + s, ch]
        b, ch, y, xx = i
        return xp[b, ch, y * st + r, xx * st + s]

    if kh * kw <= MAX_WINDOW_TAPS:
        # small windows: an elementwise max / sum of the taps, so the output stage vectorizes along
        # its innermost axis (a reduction stage would stay scalar)
        taps = [(r, s) for r in range(kh) for s in range(kw)]

        def win(i: list[Expr]) -> Expr:
            out = tap(i, *taps[0])
            for r, s in taps[1:]:
                out = T.max(out, tap(i, r, s)) if is_max else out + tap(i, r, s)
            return out

        total = nd_compute(shape, win, name if is_max else name + "_sum", "pool")
    else:
        ry, rx = T.reduce_axis(kh, "ry"), T.reduce_axis(kw, "rx")
        reducer = T.max_reduce if is_max else T.sum
        total = nd_compute(
            shape, lambda i: reducer(tap(i, ry, rx), axis=[ry, rx]), name if is_max else name + "_sum", "pool"
        )
    if is_max:
        return total
    if p["count_include_pad"] or pad == 0:
        inv = 1.0 / (kh * kw)
        return nd_compute(shape, lambda i: total[tuple(i)] * inv, name, "elementwise")

    def extent(v: Expr, k: int, size: int) -> Expr:
        return T.min(v * st - pad + k, size) - T.max(v * st - pad, 0)

    def avg(i: list[Expr]) -> Expr:
        y, xx = (i[1], i[2]) if nhwc else (i[2], i[3])
        return total[tuple(i)] / T.cast(x.dtype, extent(y, kh, h) * extent(xx, kw, w))

    return nd_compute(shape, avg, name, "elementwise")


def global_avg_pool(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x = args[0]
    assert isinstance(x, te.Tensor)
    nhwc = attrs.get("layout", "NCHW") == "NHWC"
    axes = [1, 2] if nhwc else [2, 3]
    inv = 1.0 / (x.shape[axes[0]] * x.shape[axes[1]])
    total = _reduce_over(x, axes, T.sum, lambda i: x[tuple(i)], name + "_sum")
    shape = (x.shape[0], 1, 1, x.shape[3]) if nhwc else (x.shape[0], x.shape[1], 1, 1)
    return nd_compute(shape, lambda i: total[i[0], i[3] if nhwc else i[1]] * inv, name, "elementwise")


# --- injective ------------------------------------------------------------------------------------
def transpose(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    x = args[0]
    assert isinstance(x, te.Tensor)
    perm = transpose_perm(_AttrNode("Transpose", attrs, name), x.ndim)
    shape = tuple(x.shape[p] for p in perm)

    def fn(i: list[Expr]) -> Expr:
        src: list[Any] = [None] * x.ndim
        for d, p in enumerate(perm):
            src[p] = i[d]
        return x[tuple(src)]

    return nd_compute(shape, fn, name, "injective")


def concat(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    xs = [a for a in args if a is not None]
    assert all(isinstance(a, te.Tensor) for a in xs)
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


def build(op: str, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
    """The te tensor of one graph node."""
    if op in _UNARY or op in _BINARY:
        return elementwise(op, attrs, args, name)
    if op == "Conv":
        return conv2d(attrs, args, name)
    if op == "MatMul":
        return matmul(attrs, args, name)
    if op == "Softmax":
        return softmax(attrs, args, name)
    if op == "LayerNormalization":
        return layernorm(attrs, args, name)
    if op in ("MaxPool", "AveragePool"):
        return pool2d(op, attrs, args, name)
    if op == "GlobalAveragePool":
        return global_avg_pool(attrs, args, name)
    if op == "Transpose":
        return transpose(attrs, args, name)
    if op == "Concat":
        return concat(attrs, args, name)
    if op in ("WinogradInput", "WinogradOutput"):
        from . import winograd

        x = args[0]
        assert isinstance(x, te.Tensor)
        fn = winograd.input_transform if op == "WinogradInput" else winograd.output_transform
        return fn(attrs, x, name)
    raise GraphError(f"no tensor-expression builder for {op} (it should have been rewritten by a pass)")
