"""Operator definitions of the graph IR: kind (how it fuses), shape/dtype inference, a numpy
implementation (constant folding, the reference interpreter, subgraph references) and the
attribute values this compiler supports.

Kinds:
  anchor     a reduction with data reuse (Conv, MatMul): one per fused kernel, tiled
  elemwise   elementwise with numpy broadcasting: fused into a producer's epilogue or chained
  injective  index remapping that costs a copy (Transpose, Concat): fused as a consumer's prologue
  reduce     a reduction without reuse (Softmax, LayerNormalization, pools): its own kernel,
             elementwise consumers fused after it
  alias      no data movement (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout): a view of
             the input's storage
  fold       only meaningful on constants (Constant, Shape, Gather, Cast...): folded at import
  rewrite    removed by a pass before fusion (Gemm, BatchNormalization)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .ir import GraphError, Node, TensorType

ANCHOR, ELEMWISE, INJECTIVE, REDUCE, ALIAS, FOLD, REWRITE = (
    "anchor",
    "elemwise",
    "injective",
    "reduce",
    "alias",
    "fold",
    "rewrite",
)

Types = Sequence["TensorType | None"]
Consts = Sequence["np.ndarray | None"]


@dataclass(frozen=True)
class OpDef:
    """How the compiler handles one operator type."""

    name: str
    kind: str
    infer: Callable[[Node, Types, Consts], list[TensorType]]
    numpy: Callable[[Node, list[np.ndarray]], list[np.ndarray]]
    check: Callable[[Node], str | None] = lambda node: None  # an unsupported attribute, or None
    internal: bool = False  # made by the compiler's passes only; never accepted from a model


OPS: dict[str, OpDef] = {}


def _op(name: str, kind: str, check: Callable[[Node], str | None] | None = None, internal: bool = False):  # noqa: ANN202
    def wrap(cls):  # noqa: ANN001, ANN202
        OPS[name] = OpDef(name, kind, cls.infer, cls.numpy, check or (lambda node: None), internal)
        return cls

    return wrap


def op_def(op: str) -> OpDef:
    if op not in OPS:
        raise GraphError(f"unsupported operator {op}")
    return OPS[op]


# --- helpers ------------------------------------------------------------------------------------
def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; GraphError if they do not broadcast."""
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise GraphError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype, copy=False)


def _same(t: TensorType | None) -> TensorType:
    assert t is not None
    return t


def _norm_axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise GraphError(f"{what}: axis {axis} out of range for rank {ndim}")
    return axis % max(ndim, 1)


def gelu_np(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return (0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))).astype(x.dtype, copy=False)
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


# --- elementwise --------------------------------------------------------------------------------
_UNARY_NP: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Erf": _erf,
    "Sqrt": np.sqrt,
    "Exp": np.exp,
    "Neg": np.negative,
    "Abs": np.abs,
    "Reciprocal": lambda x: 1 / x,
}

_BINARY_NP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
    "Max": np.maximum,
    "Min": np.minimum,
}


def _float_only(node: Node, types: Types) -> None:
    for i, t in zip(node.inputs, types):
        if t is not None and t.dtype != "float32":
            raise GraphError(
                f"{node.op} node {node.name!r}: input {i!r} is {t.dtype}; only float32 is compiled"
            )


class _Unary:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [_same(types[0])]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        return [np.asarray(_UNARY_NP[node.op](x)).astype(x.dtype, copy=False)]


class _Binary:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        a, b = _same(types[0]), _same(types[1])
        if a.dtype != b.dtype:
            raise GraphError(f"{node.op} node {node.name!r}: dtypes differ ({a.dtype} vs {b.dtype})")
        return [TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = xs
        out = _BINARY_NP[node.op](a, b)
        if node.op == "Div" and a.dtype.kind in "iu":
            out = np.trunc(a / b)
        return [np.asarray(out).astype(np.result_type(a, b), copy=False)]


for _name in _UNARY_NP:
    _op(_name, ELEMWISE)(_Unary)
for _name in _BINARY_NP:
    _op(_name, ELEMWISE)(_Binary)


def _check_gelu(node: Node) -> str | None:
    approx = node.attrs.get("approximate", "none")
    return None if approx in ("none", "tanh") else f"approximate={approx!r}"


@_op("Gelu", ELEMWISE, _check_gelu)
class _Gelu:
    infer = _Unary.infer

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [gelu_np(xs[0], node.attrs.get("approximate", "none"))]


# --- anchors ------------------------------------------------------------------------------------
def conv_params(node: Node) -> dict[str, int]:
    """Stride, pad, dilation, groups of a 2-D Conv/pool node (symmetric, square only)."""
    a = node.attrs
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    return {"stride": strides[0], "pad": pads[0], "dilation": dil[0], "groups": int(a.get("group", 1))}


def _check_conv_like(node: Node) -> str | None:
    a = node.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={a['auto_pad']}"
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) != 2:
        return f"{len(ks)}-d kernel (only 2-d)"
    for key in ("strides", "dilations"):
        v = a.get(key)
        if v is not None and (len(v) != 2 or v[0] != v[1]):
            return f"{key}={list(v)} (only equal values for both axes)"
    pads = a.get("pads")
    if pads is not None and (len(pads) != 4 or len(set(pads)) != 1):
        return f"pads={list(pads)} (only the same padding on every side)"
    if a.get("ceil_mode", 0):
        return "ceil_mode=1"
    if a.get("storage_order", 0):
        return "storage_order=1"
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        return "a second output (Indices)"
    return None


def conv_out(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


@_op("Conv", ANCHOR, _check_conv_like)
class _Conv:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        x, w = _same(types[0]), _same(types[1])
        nhwc = node.attrs.get("layout", "NCHW") == "NHWC"
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise GraphError(f"Conv node {node.name!r}: only 2-d convolutions (4-d tensors), got {x.shape}")
        if nhwc:
            n, h, wd, c = x.shape
            kh, kw, cg, f = w.shape
        else:
            n, c, h, wd = x.shape
            f, cg, kh, kw = w.shape
        p = conv_params(node)
        if c != cg * p["groups"] or f % p["groups"]:
            raise GraphError(
                f"Conv node {node.name!r}: input {x.shape}, weight {w.shape}, group {p['groups']}"
            )
        if len(types) > 2 and types[2] is not None and types[2].shape != (f,):
            raise GraphError(f"Conv node {node.name!r}: bias shape {types[2].shape}, expected ({f},)")
        oh = conv_out(h, kh, p["stride"], p["pad"], p["dilation"])
        ow = conv_out(wd, kw, p["stride"], p["pad"], p["dilation"])
        if oh <= 0 or ow <= 0:
            raise GraphError(f"Conv node {node.name!r}: empty output ({oh}x{ow})")
        return [TensorType((n, oh, ow, f) if nhwc else (n, f, oh, ow), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        from autotune.te.library import im2col_conv2d_nchw, im2col_conv2d_nhwc

        x, w = xs[0], xs[1]
        nhwc = node.attrs.get("layout", "NCHW") == "NHWC"
        p = conv_params(node)
        fn = im2col_conv2d_nhwc if nhwc else im2col_conv2d_nchw
        y = fn(x, w, p["stride"], p["pad"], p["dilation"], p["groups"])
        if len(xs) > 2 and xs[2] is not None:
            b = xs[2]
            y = y + (b if nhwc else b[:, None, None])
        return [np.ascontiguousarray(y, dtype=x.dtype)]


def matmul_shape(a: Sequence[int], b: Sequence[int], name: str) -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise GraphError(f"MatMul node {name!r}: 1-d operands are not supported ({tuple(a)} @ {tuple(b)})")
    if a[-1] != b[-2]:
        raise GraphError(f"MatMul node {name!r}: inner dims differ ({tuple(a)} @ {tuple(b)})")
    batch = broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


@_op("MatMul", ANCHOR)
class _MatMul:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        a, b = _same(types[0]), _same(types[1])
        return [TensorType(matmul_shape(a.shape, b.shape, node.name), a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.matmul(xs[0], xs[1])]


def _check_gemm(node: Node) -> str | None:
    return "transA=1" if node.attrs.get("transA", 0) else None


@_op("Gemm", REWRITE, _check_gemm)
class _Gemm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        a, b = _same(types[0]), _same(types[1])
        bs = b.shape[::-1] if node.attrs.get("transB", 0) else b.shape
        if len(a.shape) != 2 or len(bs) != 2 or a.shape[1] != bs[0]:
            raise GraphError(f"Gemm node {node.name!r}: shapes {a.shape} and {b.shape} do not fit")
        out = (a.shape[0], bs[1])
        if len(types) > 2 and types[2] is not None:
            broadcast_shapes(out, types[2].shape)
        return [TensorType(out, a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        if node.attrs.get("transB", 0):
            b = b.T
        y = node.attrs.get("alpha", 1.0) * (a @ b)
        if len(xs) > 2 and xs[2] is not None:
            y = y + node.attrs.get("beta", 1.0) * xs[2]
        return [np.asarray(y, dtype=a.dtype)]


def _check_bn(node: Node) -> str | None:
    if node.attrs.get("training_mode", 0) or any(node.outputs[1:]):
        return "training mode"
    return None


@_op("BatchNormalization", REWRITE, _check_bn)
class _BatchNorm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = _same(types[0])
        c = x.shape[1] if len(x.shape) > 1 else 1
        for t in types[1:5]:
            if t is None or t.shape != (c,):
                raise GraphError(f"BatchNormalization node {node.name!r}: parameters must have shape ({c},)")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, scale, bias, mean, var = xs[:5]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = node.attrs.get("epsilon", 1e-5)
        k = scale / np.sqrt(var + eps)
        y = (x - mean.reshape(shape)) * k.reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype, copy=False)]


# --- reductions -----------------------------------------------------------------------------------
def softmax_axes(node: Node, ndim: int) -> list[int]:
    """Axes a Softmax normalises over (opset >= 13: one axis; before: the flattened tail)."""
    if node.attrs.get("_legacy", False):
        axis = _norm_axis(node.attrs.get("axis", 1), ndim, "Softmax")
        return list(range(axis, ndim))
    return [_norm_axis(node.attrs.get("axis", -1), ndim, "Softmax")]


@_op("Softmax", REDUCE)
class _Softmax:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        x = _same(types[0])
        softmax_axes(node, len(x.shape))
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axes = tuple(softmax_axes(node, x.ndim))
        e = np.exp(x - x.max(axis=axes, keepdims=True))
        return [(e / e.sum(axis=axes, keepdims=True)).astype(x.dtype, copy=False)]


def _check_ln(node: Node) -> str | None:
    if any(node.outputs[1:]):
        return "Mean / InvStdDev outputs"
    if node.attrs.get("stash_type", 1) != 1:
        return f"stash_type={node.attrs['stash_type']}"
    return None


def layernorm_axis(node: Node, ndim: int) -> int:
    return _norm_axis(node.attrs.get("axis", -1), ndim, "LayerNormalization")


@_op("LayerNormalization", REDUCE, _check_ln)
class _LayerNorm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        x = _same(types[0])
        axis = layernorm_axis(node, len(x.shape))
        tail = x.shape[axis:]
        for t in types[1:3]:
            if t is not None:
                broadcast_shapes(tail, t.shape)
                if len(t.shape) > len(tail):
                    raise GraphError(f"LayerNormalization node {node.name!r}: scale/bias rank too high")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axes = tuple(range(layernorm_axis(node, x.ndim), x.ndim))
        eps = node.attrs.get("epsilon", 1e-5)
        mu = x.mean(axis=axes, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mu) / np.sqrt(var + eps) * xs[1]
        if len(xs) > 2 and xs[2] is not None:
            y = y + xs[2]
        return [y.astype(x.dtype, copy=False)]


def pool_params(node: Node) -> dict[str, int]:
    ks = list(node.attrs.get("kernel_shape", [1, 1]))
    return {
        "kh": ks[0],
        "kw": ks[1],
        "stride": list(node.attrs.get("strides", [1, 1]))[0],
        "pad": list(node.attrs.get("pads", [0, 0, 0, 0]))[0],
        "count_include_pad": int(node.attrs.get("count_include_pad", 0)),
    }


def _check_pool(node: Node) -> str | None:
    if "kernel_shape" not in node.attrs:
        return "no kernel_shape"
    d = node.attrs.get("dilations")
    if d is not None and any(v != 1 for v in d):
        return f"dilations={list(d)}"
    return _check_conv_like(node)


def _spatial(x: TensorType, nhwc: bool) -> tuple[int, int, int, int]:
    if nhwc:
        n, h, w, c = x.shape
    else:
        n, c, h, w = x.shape
    return n, c, h, w


class _Pool:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        x = _same(types[0])
        if len(x.shape) != 4:
            raise GraphError(f"{node.op} node {node.name!r}: only 2-d pooling (4-d tensors)")
        nhwc = node.attrs.get("layout", "NCHW") == "NHWC"
        n, c, h, w = _spatial(x, nhwc)
        p = pool_params(node)
        if p["pad"] >= max(p["kh"], p["kw"]) and p["pad"] > 0:
            raise GraphError(f"{node.op} node {node.name!r}: padding {p['pad']} not below the kernel size")
        oh = (h + 2 * p["pad"] - p["kh"]) // p["stride"] + 1
        ow = (w + 2 * p["pad"] - p["kw"]) // p["stride"] + 1
        if oh <= 0 or ow <= 0:
            raise GraphError(f"{node.op} node {node.name!r}: empty output")
        return [TensorType((n, oh, ow, c) if nhwc else (n, c, oh, ow), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        nhwc = node.attrs.get("layout", "NCHW") == "NHWC"
        if nhwc:
            x = x.transpose(0, 3, 1, 2)
        p = pool_params(node)
        pad, kh, kw, st = p["pad"], p["kh"], p["kw"], p["stride"]
        widths = ((0, 0), (0, 0), (pad, pad), (pad, pad))
        is_max = node.op == "MaxPool"
        xp = np.pad(x, widths, constant_values=-np.inf if is_max else 0.0) if pad else x
        win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::st, ::st]
        if is_max:
            y = win.max(axis=(-2, -1))
        elif p["count_include_pad"] or pad == 0:
            y = win.mean(axis=(-2, -1))
        else:
            ones = np.pad(np.ones(x.shape[2:], dtype=x.dtype), widths[2:])
            cnt = np.lib.stride_tricks.sliding_window_view(ones, (kh, kw))[::st, ::st].sum(axis=(-2, -1))
            y = win.sum(axis=(-2, -1)) / cnt
        if nhwc:
            y = y.transpose(0, 2, 3, 1)
        return [np.ascontiguousarray(y, dtype=x.dtype)]


_op("MaxPool", REDUCE, _check_pool)(_Pool)
_op("AveragePool", REDUCE, _check_pool)(_Pool)


@_op("GlobalAveragePool", REDUCE)
class _GlobalAvgPool:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _float_only(node, types)
        x = _same(types[0])
        if len(x.shape) != 4:
            raise GraphError(f"GlobalAveragePool node {node.name!r}: only 4-d tensors")
        if node.attrs.get("layout", "NCHW") == "NHWC":
            return [TensorType((x.shape[0], 1, 1, x.shape[3]), x.dtype)]
        return [TensorType((x.shape[0], x.shape[1], 1, 1), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        axes = (1, 2) if node.attrs.get("layout", "NCHW") == "NHWC" else (2, 3)
        return [xs[0].mean(axis=axes, keepdims=True).astype(xs[0].dtype, copy=False)]


# --- injective ------------------------------------------------------------------------------------
def transpose_perm(node: Node, ndim: int) -> list[int]:
    perm = node.attrs.get("perm")
    perm = list(range(ndim))[::-1] if perm is None else [int(p) % max(ndim, 1) for p in perm]
    if sorted(perm) != list(range(ndim)):
        raise GraphError(f"Transpose node {node.name!r}: perm {perm} is not a permutation of {ndim} axes")
    return perm


@_op("Transpose", INJECTIVE)
class _Transpose:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = _same(types[0])
        perm = transpose_perm(node, len(x.shape))
        return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(xs[0], transpose_perm(node, xs[0].ndim)))]


@_op("Concat", INJECTIVE)
class _Concat:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        ts = [_same(t) for t in types]
        nd = len(ts[0].shape)
        axis = _norm_axis(node.attrs.get("axis", 0), nd, "Concat")
        for t in ts:
            if len(t.shape) != nd or any(t.shape[d] != ts[0].shape[d] for d in range(nd) if d != axis):
                raise GraphError(f"Concat node {node.name!r}: shapes {[t.shape for t in ts]} do not fit")
        shape = list(ts[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ts)
        return [TensorType(tuple(shape), ts[0].dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.concatenate(xs, axis=node.attrs.get("axis", 0))]


# --- aliases (views) ------------------------------------------------------------------------------
def _need_const(node: Node, consts: Consts, i: int, what: str) -> np.ndarray:
    if len(consts) <= i or consts[i] is None:
        raise GraphError(f"{node.op} node {node.name!r}: {what} must be a constant known at compile time")
    return consts[i]


def reshape_target(node: Node, in_shape: Sequence[int], spec: Sequence[int]) -> tuple[int, ...]:
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
    if int(np.prod(out)) != total:
        raise GraphError(f"Reshape node {node.name!r}: cannot reshape {tuple(in_shape)} to {out}")
    return tuple(out)


def alias_shape(node: Node, x: TensorType, consts: Consts) -> tuple[int, ...]:
    """The output shape of an alias op (the element order never changes)."""
    op, s = node.op, x.shape
    if op in ("Identity", "Dropout"):
        return s
    if op == "Reshape":
        return reshape_target(node, s, _need_const(node, consts, 1, "the target shape"))
    if op == "Flatten":
        axis = _norm_axis(node.attrs.get("axis", 1), len(s) + 1, "Flatten")
        return (int(np.prod(s[:axis])), int(np.prod(s[axis:])))
    if op in ("Squeeze", "Unsqueeze"):
        axes = node.attrs.get("axes")
        if axes is None and len(node.inputs) > 1 and node.inputs[1]:
            axes = [int(a) for a in _need_const(node, consts, 1, "axes")]
        if op == "Squeeze":
            if axes is None:
                return tuple(d for d in s if d != 1)
            axes = {_norm_axis(a, len(s), "Squeeze") for a in axes}
            if any(s[a] != 1 for a in axes):
                raise GraphError(f"Squeeze node {node.name!r}: axes {sorted(axes)} of {s} are not 1")
            return tuple(d for i, d in enumerate(s) if i not in axes)
        if axes is None:
            raise GraphError(f"Unsqueeze node {node.name!r}: no axes")
        nd = len(s) + len(axes)
        axes = {_norm_axis(a, nd, "Unsqueeze") for a in axes}
        it = iter(s)
        return tuple(1 if i in axes else next(it) for i in range(nd))
    raise GraphError(f"not an alias op: {op}")


def _check_dropout(node: Node) -> str | None:
    return "the mask output" if any(node.outputs[1:]) else None


class _Alias:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = _same(types[0])
        return [TensorType(alias_shape(node, x, consts), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        t = TensorType(tuple(x.shape), str(x.dtype))
        consts = [None] + [np.asarray(v) for v in xs[1:]]
        return [np.reshape(x, alias_shape(node, t, consts))]


for _name in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    _op(_name, ALIAS)(_Alias)
_op("Dropout", ALIAS, _check_dropout)(_Alias)


# --- constant-only ops ------------------------------------------------------------------------------
def _fold_only(node: Node, consts: Consts, n: int = 1) -> None:
    if any(c is None for c in consts[:n]):
        raise GraphError(f"{node.op} node {node.name!r} is only supported on constants (shape computations)")


@_op("Constant", FOLD)
class _Constant:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        v = constant_value(node)
        return [TensorType(tuple(v.shape), str(v.dtype))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [constant_value(node)]


def constant_value(node: Node) -> np.ndarray:
    a = node.attrs
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in a:
            v = np.asarray(a[key])
            if key.startswith("value_float"):
                v = v.astype(np.float32)
            elif key.startswith("value_int"):
                v = v.astype(np.int64)
            return v
    raise GraphError(f"Constant node {node.name!r}: no supported value attribute")


@_op("Shape", FOLD)
class _Shape:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [TensorType((len(_same(types[0]).shape),), "int64")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        s = np.asarray(xs[0].shape, dtype=np.int64)
        return [s[node.attrs.get("start", 0) : node.attrs.get("end", len(s))]]


class _Folded:
    """Ops evaluated with numpy when their inputs are constants (and rejected otherwise)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        _fold_only(node, consts, len(node.inputs))
        out = OPS[node.op].numpy(node, [np.asarray(c) for c in consts])[0]
        return [TensorType(tuple(out.shape), str(out.dtype))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        if node.op == "Gather":
            return [np.take(xs[0], xs[1], axis=node.attrs.get("axis", 0))]
        if node.op == "Cast":
            return [xs[0].astype(_ONNX_DTYPES.get(node.attrs.get("to", 1), "float32"))]
        if node.op == "ConstantOfShape":
            v = node.attrs.get("value", np.zeros(1, np.float32))
            return [np.full(tuple(int(s) for s in xs[0]), np.asarray(v).reshape(-1)[0])]
        if node.op == "Range":
            return [np.arange(xs[0], xs[1], xs[2])]
        raise GraphError(f"no constant evaluation for {node.op}")


_ONNX_DTYPES = {1: "float32", 6: "int32", 7: "int64", 11: "float64", 9: "bool"}

for _name in ("Gather", "Cast", "ConstantOfShape", "Range"):
    _op(_name, FOLD)(_Folded)


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Run one node with numpy."""
    return op_def(node.op).numpy(node, list(inputs))  # type: ignore[arg-type]


def supported_ops() -> list[str]:
    return sorted(OPS)


def attr_problem(node: Node) -> str | None:
    """Why this node's attributes are not supported, or None."""
    return op_def(node.op).check(node)


def describe_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe attributes (numpy values become lists / scalars)."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, np.ndarray):
            out[k] = v.tolist()
        elif isinstance(v, (np.integer, np.floating)):
            out[k] = v.item()
        elif isinstance(v, (list, tuple)):
            out[k] = [x.item() if isinstance(x, (np.integer, np.floating)) else x for x in v]
        else:
            out[k] = v
    return out
