"""Convolutions, matrix products and pooling: 2-d (4-d tensors) in NCHW as imported or NHWC after the
layout pass, with per-axis strides and dilations, begin/end padding, ``auto_pad`` and ``ceil_mode``;
pools also over 3 spatial dims (NCDHW) and MaxPool's Indices."""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, all_of, compare, const, equal
from autotune.te.ops import conv as conv_ops

from ..ir import GraphError, Node, TensorType, contiguous
from .base import (
    ANCHOR,
    REDUCE,
    REWRITE,
    Arg,
    Consts,
    Types,
    broadcast_shapes,
    float_only,
    output_positions,
    register,
    same,
)
from .products import check_operands, operand_np, operand_te, result_type
from .te_build import nd_compute, reduce_over, tensor_arg


# --- geometry -----------------------------------------------------------------------------------------
def per_axis(attrs: dict, key: str, default: int, n: int) -> tuple[int, ...]:
    """An n-axis attribute (strides, dilations...): its values, one value for every axis, or the default."""
    v = attrs.get(key)
    if v is None:
        return (default,) * n
    v = [int(x) for x in v]
    return tuple(v) if len(v) == n else (v[0],) * n


def _two(attrs: dict, key: str, default: int) -> tuple[int, int]:
    return per_axis(attrs, key, default, 2)  # type: ignore[return-value]


def window_geometry(
    attrs: dict, in_hw: Sequence[int], k_hw: Sequence[int], ceil: bool = False
) -> dict[str, Any]:
    """Strides, dilations, pads (every axis's begin, then every axis's end: top, left, bottom, right
    in 2-d) and output size of a window op over ``len(in_hw)`` spatial axes."""
    n = len(in_hw)
    strides, dil = per_axis(attrs, "strides", 1, n), per_axis(attrs, "dilations", 1, n)
    auto = attrs.get("auto_pad", "NOTSET")
    pads = [0] * (2 * n)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for d in range(n):
            out = -(-in_hw[d] // strides[d])
            total = max(0, (out - 1) * strides[d] + (k_hw[d] - 1) * dil[d] + 1 - in_hw[d])
            small, big = total // 2, total - total // 2
            pads[d], pads[d + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "NOTSET" and attrs.get("pads") is not None:
        pads = [int(p) for p in attrs["pads"]]
    outs = []
    for d in range(n):
        span = in_hw[d] + pads[d] + pads[d + n] - ((k_hw[d] - 1) * dil[d] + 1)
        if ceil:
            o = -(-span // strides[d]) + 1
            if (o - 1) * strides[d] >= in_hw[d] + pads[d]:
                o -= 1  # the last window would start in the end padding
        else:
            o = span // strides[d] + 1
        outs.append(o)
    return {"strides": strides, "dilations": dil, "pads": tuple(pads), "out": tuple(outs)}


def _check_window(node: Node, dims: Sequence[int] = (1, 2)) -> str | None:
    a = node.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={a['auto_pad']}"
    names = ", ".join(f"{d}-d" for d in dims[:-1]) + f" and {dims[-1]}-d"
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) not in dims:
        return f"{len(ks)}-d window (only {names})"
    for key in ("strides", "dilations"):
        v = a.get(key)
        if v is not None and len(v) not in dims:
            return f"{key}={list(v)} (only {names})"
    pads = a.get("pads")
    if pads is not None and (len(pads) not in [2 * d for d in dims] or min(pads) < 0):
        return f"pads={list(pads)}"
    return None


def _conv_output_size(node: Node, x: TensorType, w: TensorType, types: Types, c: int, f: int, cg: int,
                      spatial: Sequence[int], kernel: Sequence[int]) -> tuple[int, ...]:
    """A convolution's operands checked against each other (``c`` input channels, ``f`` outputs,
    ``cg`` input channels a group, its window ``kernel`` over ``spatial``): its output size."""
    groups = int(node.attrs.get("group", 1))
    if groups < 1 or c != cg * groups or f % groups:
        raise GraphError(f"Conv node {node.name!r}: input {x.shape}, weight {w.shape}, group {groups}")
    ks = node.attrs.get("kernel_shape")
    if ks is not None and tuple(ks) != tuple(kernel):
        raise GraphError(f"Conv node {node.name!r}: kernel_shape {list(ks)} but weight {w.shape}")
    if len(types) > 2 and types[2] is not None and types[2].shape != (f,):
        raise GraphError(f"Conv node {node.name!r}: bias shape {types[2].shape}, expected ({f},)")
    out = window_geometry(node.attrs, spatial, kernel)["out"]
    if min(out) <= 0:
        raise GraphError(f"Conv node {node.name!r}: output size {'x'.join(map(str, out))} is not positive")
    return out


def _nchw_dims(t: TensorType, nhwc: bool) -> tuple[int, int, int, int]:
    if nhwc:
        n, h, w, c = t.shape
        return n, c, h, w
    return t.shape  # type: ignore[return-value]


def _is_nhwc(attrs: dict) -> bool:
    return attrs.get("layout", "NCHW") == "NHWC"


def conv_params(node: Node) -> dict[str, int]:
    """Stride, pad, dilation and groups of a Conv with the same value on every axis and side
    (what Winograd and the baselines take); GraphError-free: values of the first axis."""
    a = node.attrs
    return {
        "stride": _two(a, "strides", 1)[0],
        "pad": int(list(a.get("pads", [0, 0, 0, 0]))[0]) if a.get("auto_pad", "NOTSET") == "NOTSET" else -1,
        "dilation": _two(a, "dilations", 1)[0],
        "groups": int(a.get("group", 1)),
    }


def is_uniform_conv(node: Node) -> bool:
    """Equal strides, dilations and padding on every axis and side, no auto_pad."""
    a = node.attrs
    return (
        a.get("auto_pad", "NOTSET") == "NOTSET"
        and len(set(_two(a, "strides", 1))) == 1
        and len(set(_two(a, "dilations", 1))) == 1
        and len(set(a.get("pads", [0, 0, 0, 0]))) == 1
    )


def _windows(xp: np.ndarray, k: Sequence[int], st: Sequence[int], dil: Sequence[int], out: Sequence[int]):
    """``(r, view)`` for each tap ``r`` of an n-d window in scan order: the view holds
    ``xp[:, :, o * st + r * dil ...]`` for every output position ``o`` (NC + spatial dims)."""
    for r in itertools.product(*(range(kd) for kd in k)):
        yield (
            r,
            xp[
                (slice(None), slice(None))
                + tuple(
                    slice(r[d] * dil[d], r[d] * dil[d] + st[d] * (out[d] - 1) + 1, st[d])
                    for d in range(len(k))
                )
            ],
        )


def conv2d_np(x: np.ndarray, w: np.ndarray, geo: dict, groups: int) -> np.ndarray:
    """NCHW conv with OIHW weights, computed in the inputs' precision by one GEMM per tap."""
    pt, pl, pb, pr = geo["pads"]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c = x.shape[:2]
    f, cg, kh, kw = w.shape
    oh, ow = geo["out"]
    out = np.zeros((n, groups, f // groups, oh, ow), dtype=np.result_type(x, w))
    wg = w.reshape(groups, f // groups, cg, kh, kw)
    for (r, s), patch in _windows(xp, (kh, kw), geo["strides"], geo["dilations"], geo["out"]):
        out += np.einsum("ngchw,gfc->ngfhw", patch.reshape(n, groups, cg, oh, ow), wg[..., r, s])
    return out.reshape(n, f, oh, ow)


def depth_and_plane(geo: dict) -> tuple[dict, dict]:
    """A 3-d window's geometry split into its depth axis and its (height, width) plane."""
    p = geo["pads"]
    depth = {k: (geo[k][0],) for k in ("strides", "dilations", "out")} | {"pads": (p[0], p[3])}
    plane = {k: tuple(geo[k][1:]) for k in ("strides", "dilations", "out")}
    plane["pads"] = (p[1], p[2], p[4], p[5])
    return depth, plane


def conv3d_np(x: np.ndarray, w: np.ndarray, geo: dict, groups: int) -> np.ndarray:
    """NCDHW conv with OIDHW weights: for each output depth, the 2-d convolutions of the input
    planes its window reads with the weight's planes, summed."""
    depth, plane = depth_and_plane(geo)
    xp = np.pad(x, ((0, 0), (0, 0), depth["pads"], (0, 0), (0, 0)))
    (sd,), (dd,), (od,) = depth["strides"], depth["dilations"], depth["out"]
    out = np.zeros((x.shape[0], w.shape[0], od, *plane["out"]), dtype=np.result_type(x, w))
    for o in range(od):
        for k in range(w.shape[2]):
            out[:, :, o] += conv2d_np(xp[:, :, o * sd + k * dd], w[:, :, k], plane, groups)
    return out


# --- Conv ---------------------------------------------------------------------------------------------
class _Conv:
    """2-d convolutions (1-d ones through ``lifted``); 3-d ones are typed and evaluated here and
    computed as 2-d ones over depth-stacked channels (``passes.lower_conv3d``)."""

    tensor_operands = (1, 2)  # weight, bias

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        check_operands(node, types)
        x, w = same(types[0]), same(types[1])
        nhwc = _is_nhwc(node.attrs)
        if len(x.shape) == 5 and len(w.shape) == 5 and not nhwc:  # NCDHW
            (n, c), (f, cg) = x.shape[:2], w.shape[:2]
            out = _conv_output_size(node, x, w, types, c, f, cg, x.shape[2:], w.shape[2:])
            return [TensorType((n, f, *out), result_type(x))]
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise GraphError(f"Conv node {node.name!r}: only 1-, 2- and 3-d convolutions, got {x.shape}")
        n, c, h, wd = _nchw_dims(x, nhwc)
        if nhwc:
            kh, kw, cg, f = w.shape
        else:
            f, cg, kh, kw = w.shape
        oh, ow = _conv_output_size(node, x, w, types, c, f, cg, (h, wd), (kh, kw))
        return [TensorType((n, oh, ow, f) if nhwc else (n, f, oh, ow), result_type(x))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = operand_np(xs[0], node.attrs, xs[0]), operand_np(xs[1], node.attrs, xs[0])
        nhwc = _is_nhwc(node.attrs)
        if x.ndim == 5:
            geo = window_geometry(node.attrs, x.shape[2:], w.shape[2:])
            y = conv3d_np(x, w, geo, int(node.attrs.get("group", 1)))
            if len(xs) > 2 and xs[2] is not None:
                y = y + xs[2][:, None, None, None]
            return [contiguous(y.astype(x.dtype, copy=False))]
        if nhwc:
            x, w = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
        geo = window_geometry(node.attrs, x.shape[2:], w.shape[2:])
        y = conv2d_np(x, w, geo, int(node.attrs.get("group", 1)))
        if len(xs) > 2 and xs[2] is not None:
            y = y + xs[2][:, None, None]
        if nhwc:
            y = y.transpose(0, 2, 3, 1)
        return [contiguous(y.astype(x.dtype, copy=False))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = operand_te(tensor_arg(args[0]), attrs, name + "_x")
        w = operand_te(tensor_arg(args[1]), attrs, name + "_w")
        if x.ndim == 5:
            raise GraphError(f"Conv {name!r}: 3-d convolutions reach kernels as 2-d (passes.lower_conv3d)")
        nhwc = _is_nhwc(attrs)
        hw = x.shape[1:3] if nhwc else x.shape[2:]
        k = w.shape[:2] if nhwc else w.shape[2:]
        geo = window_geometry(attrs, hw, k)
        groups = int(attrs.get("group", 1))
        pads = geo["pads"]
        # one int where every axis / side agrees: the expression the named conv workloads build
        pad = pads[0] if len(set(pads)) == 1 else pads
        st = geo["strides"][0] if len(set(geo["strides"])) == 1 else geo["strides"]
        dil = geo["dilations"][0] if len(set(geo["dilations"])) == 1 else geo["dilations"]
        fn = conv_ops.conv2d_nhwc if nhwc else conv_ops.conv2d_nchw
        y = fn(x, w, st, pad, dil, groups, name=name)
        bias = args[2] if len(args) > 2 else None
        if bias is None:
            return y
        b = tensor_arg(bias)
        axis = 3 if nhwc else 1
        return nd_compute(y.shape, lambda i: y[tuple(i)] + b[i[axis]], name + "_bias", "elementwise")


# --- MatMul / Gemm ------------------------------------------------------------------------------------
def matmul_shape(a: Sequence[int], b: Sequence[int], name: str) -> tuple[int, ...]:
    """numpy's matmul shape: a 1-d left operand is a row, a 1-d right operand a column, and the
    dimension it adds is dropped from the result."""
    if not a or not b:
        raise GraphError(f"MatMul node {name!r}: 0-d operands ({tuple(a)} @ {tuple(b)})")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise GraphError(f"MatMul node {name!r}: inner dims differ ({tuple(a)} @ {tuple(b)})")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    return (*batch, *a2[-2 : -1 if len(a) > 1 else -2], *b2[-1 if len(b) > 1 else len(b2) : len(b2)])


class _MatMul:
    tensor_operands = (0, 1)

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        check_operands(node, types)
        a, b = same(types[0]), same(types[1])
        return [TensorType(matmul_shape(a.shape, b.shape, node.name), result_type(a))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.matmul(operand_np(xs[0], node.attrs, xs[0]), operand_np(xs[1], node.attrs, xs[0]))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        """``C[..., i, j] = sum_k A[..., i, k] * B[..., k, j]`` with broadcast batch dims."""
        a = operand_te(tensor_arg(args[0]), attrs, name + "_a")
        b = operand_te(tensor_arg(args[1]), attrs, name + "_b")
        shape = matmul_shape(a.shape, b.shape, name)
        nb = len(shape) - 2
        k = T.reduce_axis(a.shape[-1], "k")

        def body(idx: list[Expr]) -> Expr:
            batch, i, j = idx[:nb], idx[nb], idx[nb + 1]
            ai = [0 if a.shape[d] == 1 else batch[d + nb - (a.ndim - 2)] for d in range(a.ndim - 2)]
            bi = [0 if b.shape[d] == 1 else batch[d + nb - (b.ndim - 2)] for d in range(b.ndim - 2)]
            return T.sum(a[(*ai, i, k)] * b[(*bi, k, j)], axis=k)

        # the axes of the named matmul / batch_matmul workloads, so records of either apply to both
        batch_names = ["z"] if nb == 1 else [f"z{d}" for d in range(nb)]
        return nd_compute(shape, body, name, "matmul", axes=[*batch_names, "i", "j"])


register("MatMul", ANCHOR)(_MatMul)


class _Gemm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        a, b = same(types[0]), same(types[1])
        as_ = a.shape[::-1] if node.attrs.get("transA", 0) else a.shape
        bs = b.shape[::-1] if node.attrs.get("transB", 0) else b.shape
        if len(as_) != 2 or len(bs) != 2 or as_[1] != bs[0]:
            raise GraphError(f"Gemm node {node.name!r}: shapes {a.shape} and {b.shape} do not fit")
        out = (as_[0], bs[1])
        if len(types) > 2 and types[2] is not None and broadcast_shapes(out, types[2].shape) != out:
            raise GraphError(f"Gemm node {node.name!r}: C of shape {types[2].shape} does not fit {out}")
        return [TensorType(out, a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = xs[0], xs[1]
        if node.attrs.get("transA", 0):
            a = a.T
        if node.attrs.get("transB", 0):
            b = b.T
        y = node.attrs.get("alpha", 1.0) * (a @ b)
        if len(xs) > 2 and xs[2] is not None:
            y = y + node.attrs.get("beta", 1.0) * xs[2]
        return [np.asarray(y, dtype=a.dtype)]


register("Gemm", REWRITE)(_Gemm)


# --- BatchNormalization -------------------------------------------------------------------------------
def _check_bn(node: Node) -> str | None:
    if any(node.outputs[3:]):
        return "training mode with saved mean / variance outputs (opsets before 14)"
    if any(node.outputs[1:]) and not node.attrs.get("training_mode", 0):
        return "running mean / variance outputs without training_mode=1 (training mode of opsets before 14)"
    return None


class _BatchNorm:
    """Inference: the given mean and variance (constants, or computed at run time as tf2onnx writes
    a layer norm); ``training_mode=1``: the batch's statistics over every axis but the channels, with
    the running mean and variance as optional outputs (``passes.lower_batch_norm`` computes each form)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        c = x.shape[1] if len(x.shape) > 1 else 1
        for t in types[1:5]:
            if t is None or t.shape != (c,):
                raise GraphError(f"BatchNormalization node {node.name!r}: parameters must have shape ({c},)")
        if node.attrs.get("training_mode", 0) and len(x.shape) < 2:
            raise GraphError(f"BatchNormalization node {node.name!r}: training mode needs a channel axis")
        return [x, TensorType((c,), x.dtype), TensorType((c,), x.dtype)][: max(1, len(node.outputs))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, scale, bias, mean, var = xs[:5]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = node.attrs.get("epsilon", 1e-5)
        outs = []
        if node.attrs.get("training_mode", 0):
            axes = (0, *range(2, x.ndim))
            m = float(node.attrs.get("momentum", 0.9))
            batch_mean, batch_var = x.mean(axis=axes), x.var(axis=axes)
            outs = [mean * m + batch_mean * (1 - m), var * m + batch_var * (1 - m)]
            mean, var = batch_mean, batch_var
        k = scale / np.sqrt(var + eps)
        y = (x - mean.reshape(shape)) * k.reshape(shape) + bias.reshape(shape)
        return [v.astype(x.dtype, copy=False) for v in [y, *outs][: max(1, len(node.outputs))]]


register("BatchNormalization", REWRITE, _check_bn)(_BatchNorm)


# --- LRN ----------------------------------------------------------------------------------------------
def _check_lrn(node: Node) -> str | None:
    size = node.attrs.get("size")
    return None if isinstance(size, int) and size >= 1 else f"size={size!r} (a positive integer is required)"


def lrn_window(c: int, size: int) -> np.ndarray:
    """The [C, C] 0/1 matrix whose row ``c`` marks the channels LRN sums for channel ``c``:
    ``c - floor((size - 1) / 2)`` to ``c + ceil((size - 1) / 2)``, clipped to the channels."""
    lo, hi = (size - 1) // 2, size // 2
    i = np.arange(c)
    return ((i[None, :] >= i[:, None] - lo) & (i[None, :] <= i[:, None] + hi)).astype(np.float32)


def lrn_params(node: Any) -> tuple[int, float, float, float]:
    """LRN's size, alpha, beta and bias (ONNX's defaults where absent)."""
    a = node.attrs
    return int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))


class _LRN:
    """Local response normalization across channels (axis 1):
    ``x / (bias + alpha / size * sum of x² over the channel window) ** beta``.
    ``passes.lower_lrn`` computes it as the square, a 1x1 convolution with the window's 0/1 matrix,
    and elementwise ops."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        float_only(node, types[:1])
        if len(x.shape) < 2:
            raise GraphError(f"LRN node {node.name!r}: input {x} has no channel axis")
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0].astype(np.float64)
        size, a, b, k = lrn_params(node)
        win = lrn_window(x.shape[1], size).astype(np.float64)
        total = np.moveaxis(np.moveaxis(x * x, 1, -1) @ win.T, -1, 1)
        return [(x / (k + a / size * total) ** b).astype(xs[0].dtype)]


register("LRN", REWRITE, _check_lrn)(_LRN)


# --- pooling ------------------------------------------------------------------------------------------
def _check_pool(node: Node) -> str | None:
    if "kernel_shape" not in node.attrs:
        return "no kernel_shape"
    return _check_window(node, (1, 2, 3))


def pool_geometry(node_or_attrs: Any, in_hw: Sequence[int]) -> dict[str, Any]:
    """:func:`window_geometry` of a pool, plus its ``kernel`` and ``ends``: the end padding that holds
    every window (ceil-mode windows may end past the given padding)."""
    attrs = node_or_attrs if isinstance(node_or_attrs, dict) else node_or_attrs.attrs
    k = tuple(int(v) for v in attrs["kernel_shape"])
    geo = window_geometry(attrs, in_hw, k, ceil=bool(attrs.get("ceil_mode", 0)))
    geo["kernel"] = k
    n, st, dil, pads = len(in_hw), geo["strides"], geo["dilations"], geo["pads"]
    geo["ends"] = tuple(
        max(pads[n + d], (geo["out"][d] - 1) * st[d] + (k[d] - 1) * dil[d] + 1 - in_hw[d] - pads[d])
        for d in range(n)
    )
    return geo


def pool_params(node: Node) -> dict[str, int]:
    """Kernel, stride and pad of a pool with the same values on both axes (the baselines' form)."""
    ks = list(node.attrs.get("kernel_shape", [1, 1]))
    return {
        "kh": ks[0],
        "kw": ks[1],
        "stride": _two(node.attrs, "strides", 1)[0],
        "pad": int(list(node.attrs.get("pads", [0, 0, 0, 0]))[0]),
        "count_include_pad": int(node.attrs.get("count_include_pad", 0)),
    }


def _counted(geo: dict, in_sp: Sequence[int], include: bool) -> list[tuple[int, int]]:
    """Per spatial axis, the input positions an average counts: the input, or with
    ``count_include_pad`` the input and its given padding (never the ceil-mode extension)."""
    n = len(in_sp)
    pads = geo["pads"]
    return [(-pads[d], in_sp[d] + pads[n + d]) if include else (0, in_sp[d]) for d in range(n)]


MAX_POOL_INDICES = 1  # MaxPool's optional second output


def _pool_np(node: Node, x: np.ndarray) -> list[np.ndarray]:
    """The outputs of a pool over NC + spatial dims (MaxPool: values and, if asked, Indices)."""
    n = x.ndim - 2
    in_sp = x.shape[2:]
    geo = pool_geometry(node, in_sp)
    out, k = geo["out"], geo["kernel"]
    st, dil, begin = geo["strides"], geo["dilations"], geo["pads"][:n]
    is_max = node.op == "MaxPool"
    xp = np.pad(
        x.astype(np.float64),
        ((0, 0), (0, 0), *zip(begin, geo["ends"])),
        constant_values=-np.inf if is_max else 0.0,
    )
    taps = list(_windows(xp, k, st, dil, out))
    axis_shape = [[1] * n for _ in range(n)]
    for d in range(n):
        axis_shape[d][d] = out[d]
    # input position of tap r along axis d, for every output position: o * st - begin + r * dil
    start = [(np.arange(out[d]) * st[d] - begin[d]).reshape(axis_shape[d]) for d in range(n)]
    if not is_max:
        total = np.sum([v for _, v in taps], axis=0)
        count = np.ones(out, dtype=np.int64)
        for d, (lo, hi) in enumerate(_counted(geo, in_sp, bool(node.attrs.get("count_include_pad", 0)))):
            pos = start[d][..., None] + np.arange(k[d]) * dil[d]
            count = count * ((pos >= lo) & (pos < hi)).sum(axis=-1)
        return [(total / count).astype(x.dtype)]
    y = np.max([v for _, v in taps], axis=0)
    outs = [y.astype(x.dtype)]
    if MAX_POOL_INDICES in output_positions(node):
        col_major = bool(node.attrs.get("storage_order", 0))
        order = range(n) if col_major else range(n - 1, -1, -1)
        stride, step = [0] * n, 1
        for d in order:
            stride[d], step = step, step * in_sp[d]
        plane = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * n) * step
        idx = np.full(y.shape, -1, dtype=np.int64)
        best = np.full(y.shape, -np.inf)
        for r, v in taps:  # scan order; the first tap holding the maximum wins
            pos = [start[d] + r[d] * dil[d] for d in range(n)]
            inside = np.ones(y.shape, dtype=bool)
            for d, p in enumerate(pos):
                inside = inside & (p >= 0) & (p < in_sp[d])
            take = inside & ((idx < 0) | (v > best))
            flat = plane + sum(p * stride[d] for d, p in enumerate(pos))
            idx, best = np.where(take, flat, idx), np.where(take, v, best)
        outs.append(idx)
    return [outs[0] if p == 0 else outs[1] for p in output_positions(node)]


def _spatial(ndim: int, nhwc: bool) -> list[int]:
    """Positions of the spatial dims in a pool's tensors."""
    return list(range(1, ndim - 1)) if nhwc else list(range(2, ndim))


class _Pool:
    output_operands = {MAX_POOL_INDICES: 1}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        if node.op != "MaxPool" or x.dtype not in ("int8", "uint8"):  # (8-bit ones: passes.lower_quantize)
            float_only(node, types)
        nhwc = _is_nhwc(node.attrs)
        if len(x.shape) not in (4, 5) or (nhwc and len(x.shape) != 4):
            raise GraphError(f"{node.op} node {node.name!r}: only 1-d, 2-d and 3-d pooling, got {x.shape}")
        sp = _spatial(len(x.shape), nhwc)
        geo = pool_geometry(node, [x.shape[d] for d in sp])
        k = geo["kernel"]
        if len(k) != len(sp):
            raise GraphError(f"{node.op} node {node.name!r}: kernel_shape {list(k)} for input {x.shape}")
        if any(o <= 0 for o in geo["out"]):
            raise GraphError(f"{node.op} node {node.name!r}: output size {geo['out']} is not positive")
        if any(p >= k[d % len(k)] for d, p in enumerate(geo["pads"])) and node.op == "MaxPool":
            raise GraphError(
                f"{node.op} node {node.name!r}: padding {list(geo['pads'])} not below the kernel"
            )
        shape = list(x.shape)
        for d, o in zip(sp, geo["out"]):
            shape[d] = o
        y = TensorType(tuple(shape), x.dtype)
        return [y if p == 0 else TensorType(y.shape, "int64") for p in output_positions(node)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        if not _is_nhwc(node.attrs):
            return [contiguous(y) for y in _pool_np(node, x)]
        return [contiguous(y.transpose(0, 2, 3, 1)) for y in _pool_np(node, x.transpose(0, 3, 1, 2))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        return pool_te(attrs, tensor_arg(args[0]), name)


MAX_WINDOW_TAPS = 16  # pooling windows up to this size are unrolled into elementwise stages


def _pad_te(
    x: te.Tensor, sp: Sequence[int], begin: Sequence[int], ends: Sequence[int], fill: float, name: str
):
    """``x`` padded by ``begin`` / ``ends`` on the dims ``sp`` with ``fill`` (an injective stage)."""
    if not any(begin) and not any(ends):
        return x
    if x.ndim == 4:  # the 2-d stage the named pool workloads build
        pad_fn = conv_ops.pad_nchw if sp[0] == 2 else conv_ops.pad_nhwc
        (pt, pl), (pb, pr) = begin, ends
        uniform = len({pt, pl, pb, pr}) == 1
        return pad_fn(x, pt if uniform else (pt, pl, pb, pr), name, pad_value=fill)
    shape = list(x.shape)
    for d, b, e in zip(sp, begin, ends):
        shape[d] += b + e

    def body(i: list[Expr]) -> Expr:
        src = list(i)
        conds = []
        for d, b in zip(sp, begin):
            src[d] = i[d] - b
            conds += [compare("le", b, i[d]), compare("lt", i[d], b + x.shape[d])]
        return T.select(all_of(*conds), x[tuple(src)], fill)

    return nd_compute(shape, body, name, "pad")


def _window_count(v: Expr, k: int, st: int, dil: int, begin: int, lo: int, hi: int) -> Expr:
    """How many of the window's taps at output position ``v`` lie in ``[lo, hi)``."""
    if dil == 1:
        return T.min(v * st - begin + k, hi) - T.max(v * st - begin, lo)
    total: Expr | None = None
    for r in range(k):
        p = v * st - begin + r * dil
        one = T.select(all_of(compare("le", lo, p), compare("lt", p, hi)), 1, 0)
        total = one if total is None else total + one
    assert total is not None
    return total


def pool_te(attrs: dict, x: te.Tensor, name: str) -> te.Tensor:
    """MaxPool / AveragePool (``_op``) over 1 to 3 spatial dims, NCHW or (2-d) NHWC; with
    ``_output`` 1, MaxPool's Indices (flat positions in the NCHW input, row- or column-major)."""
    op = attrs["_op"]
    nhwc = _is_nhwc(attrs)
    sp = _spatial(x.ndim, nhwc)
    in_sp = [x.shape[d] for d in sp]
    n = len(sp)
    geo = pool_geometry(attrs, in_sp)
    out, k = geo["out"], geo["kernel"]
    st, dil, begin = geo["strides"], geo["dilations"], geo["pads"][:n]
    is_max = op == "MaxPool"
    fill = float(np.finfo(x.dtype).min) if is_max else 0.0  # max pool's padding: the lowest value
    xp = _pad_te(x, sp, begin, geo["ends"], fill, name + "_pad")
    shape = list(x.shape)
    for d, o in zip(sp, out):
        shape[d] = o
    indices = is_max and int(attrs.get("_output", 0)) == MAX_POOL_INDICES

    def tap(i: list[Expr], r: Sequence[Any]) -> Expr:
        idx = list(i)
        for j, d in enumerate(sp):
            idx[d] = i[d] * st[j] + r[j] * dil[j]
        return xp[tuple(idx)]

    taps = list(itertools.product(*(range(kd) for kd in k)))
    stage = name + "_max" if indices else name if is_max else name + "_sum"
    if len(taps) <= MAX_WINDOW_TAPS:
        # small windows: an elementwise max / sum of the taps, so the output stage vectorizes along
        # its innermost axis (a reduction stage would stay scalar)
        def win(i: list[Expr]) -> Expr:
            acc = tap(i, taps[0])
            for r in taps[1:]:
                acc = T.max(acc, tap(i, r)) if is_max else acc + tap(i, r)
            return acc

        total = nd_compute(shape, win, stage, "pool")
    else:
        raxes = [T.reduce_axis(kd, a) for kd, a in zip(k, ("rz", "ry", "rx")[3 - n :])]
        reducer = T.max_reduce if is_max else T.sum
        total = nd_compute(
            shape, lambda i: reducer(tap(i, [r.var for r in raxes]), axis=raxes), stage, "pool"
        )
    if indices:
        return _argmax_te(attrs, x, xp, total, sp, geo, taps, tap, name)
    if is_max:
        return total
    include = bool(attrs.get("count_include_pad", 0))
    counted = _counted(geo, in_sp, include)
    pad_free = not any(geo["pads"]) and not any(geo["ends"])
    if pad_free or (include and geo["ends"] == geo["pads"][n:] and all(v == 1 for v in dil)):
        inv = 1.0 / math.prod(k)
        return nd_compute(shape, lambda i: total[tuple(i)] * inv, name, "elementwise")

    def avg(i: list[Expr]) -> Expr:
        cnt: Expr | None = None
        for j, d in enumerate(sp):
            c = _window_count(i[d], k[j], st[j], dil[j], begin[j], *counted[j])
            cnt = c if cnt is None else cnt * c
        return total[tuple(i)] / T.cast(x.dtype, cnt)

    return nd_compute(shape, avg, name, "elementwise")


def _argmax_te(
    attrs: dict,
    x: te.Tensor,
    xp: te.Tensor,
    best: te.Tensor,
    sp: list[int],
    geo: dict,
    taps: list,
    tap: Any,
    name: str,
) -> te.Tensor:
    """MaxPool's Indices: the flat NCHW position of the first tap (in scan order) holding the maximum."""
    n = len(sp)
    in_sp = [x.shape[d] for d in sp]
    st, dil, begin = geo["strides"], geo["dilations"], geo["pads"][:n]
    chan = x.ndim - 1 if sp[0] == 1 else 1
    col_major = bool(attrs.get("storage_order", 0))
    stride, step = [0] * n, 1
    for j in range(n) if col_major else range(n - 1, -1, -1):
        stride[j], step = step, step * in_sp[j]

    def body(i: list[Expr]) -> Expr:
        plane = T.cast("int64", i[0] * x.shape[chan] + i[chan]) * step
        found: Expr = const(-1, "int64")
        for r in reversed(taps):
            pos = [i[d] * st[j] - begin[j] + r[j] * dil[j] for j, d in enumerate(sp)]
            conds = [c for j, p in enumerate(pos) for c in (compare("le", 0, p), compare("lt", p, in_sp[j]))]
            flat = plane
            for j, p in enumerate(pos):
                flat = flat + T.cast("int64", p) * stride[j]
            found = T.select(all_of(*conds, equal(tap(i, r), best[tuple(i)])), flat, found)
        return found

    return nd_compute(best.shape, body, name, "elementwise")


def _pool_def(op: str) -> type:
    class _P(_Pool):
        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            return pool_te(dict(attrs, _op=op), tensor_arg(args[0]), name)

    return _P


class _GlobalPool:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        if len(x.shape) < 3:
            raise GraphError(f"{node.op} node {node.name!r}: needs a batch, a channel and spatial dims")
        if _is_nhwc(node.attrs):
            return [TensorType((x.shape[0], 1, 1, x.shape[3]), x.dtype)]
        return [TensorType(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        axes = (1, 2) if _is_nhwc(node.attrs) else tuple(range(2, x.ndim))
        fn = np.max if node.op == "GlobalMaxPool" else np.mean
        return [fn(x, axis=axes, keepdims=True).astype(x.dtype, copy=False)]


def global_pool(attrs: dict, x: te.Tensor, name: str, is_max: bool) -> te.Tensor:
    nhwc = _is_nhwc(attrs)
    axes = [1, 2] if nhwc else list(range(2, x.ndim))
    reducer = T.max_reduce if is_max else T.sum
    total = reduce_over(x, axes, reducer, lambda i: x[tuple(i)], name + ("" if is_max else "_sum"))
    shape = (x.shape[0], 1, 1, x.shape[3]) if nhwc else x.shape[:2] + (1,) * (x.ndim - 2)
    if is_max:
        return nd_compute(shape, lambda i: total[i[0], i[3] if nhwc else i[1]], name + "_out", "injective")
    inv = 1.0 / math.prod(x.shape[d] for d in axes)
    return nd_compute(shape, lambda i: total[i[0], i[3] if nhwc else i[1]] * inv, name, "elementwise")


class _GlobalAvgPool(_GlobalPool):
    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        return global_pool(attrs, tensor_arg(args[0]), name, False)


class _GlobalMaxPool(_GlobalPool):
    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        return global_pool(attrs, tensor_arg(args[0]), name, True)


register("GlobalAveragePool", REDUCE)(_GlobalAvgPool)
register("GlobalMaxPool", REDUCE)(_GlobalMaxPool)


# --- Einsum (rewritten into Transpose / Reshape / MatMul / ReduceSum) ---------------------------------
def einsum_terms(node: Any, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The operand subscripts and the output subscript of an Einsum, ellipses expanded into letters
    that do not occur elsewhere; GraphError for repeated letters in one term (diagonals)."""
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise GraphError(f"Einsum node {node.name!r}: {len(terms)} terms for {len(ranks)} operands")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(spare[:n_ell])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            t = t.replace("...", ell[n_ell - k :] if k else "")
        if len(t) != r or not t.isalpha():
            raise GraphError(f"Einsum node {node.name!r}: term {t!r} does not fit an operand of rank {r}")
        if len(set(t)) != len(t):
            raise GraphError(
                f"Einsum node {node.name!r}: a repeated index in {t!r} (a diagonal) is not compiled"
            )
        out_terms.append(t)
    if "->" in eq:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    if len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        raise GraphError(f"Einsum node {node.name!r}: bad output subscript {out!r}")
    return out_terms, out


def _einsum_shape(node: Any, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    terms, out = einsum_terms(node, [len(s) for s in shapes])
    size: dict[str, int] = {}
    for t, s in zip(terms, shapes):
        for c, d in zip(t, s):
            if size.get(c, d) != d and 1 not in (d, size[c]):
                raise GraphError(f"Einsum node {node.name!r}: index {c!r} is {size[c]} and {d}")
            size[c] = max(size.get(c, d), d)
    return tuple(size[c] for c in out)


def _check_einsum(node: Node) -> str | None:
    return None if len(node.inputs) in (1, 2) else f"{len(node.inputs)} operands (only 1 or 2)"


class _Einsum:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        ts = [same(t) for t in types]
        return [TensorType(_einsum_shape(node, [t.shape for t in ts]), ts[0].dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        terms, out = einsum_terms(node, [x.ndim for x in xs])
        return [contiguous(np.einsum(f"{','.join(terms)}->{out}", *xs).astype(xs[0].dtype, copy=False))]


register("Einsum", REWRITE, _check_einsum)(_Einsum)


# --- 1-d windows: computed as 2-d ones over a height of 1 ---------------------------------------------
def lift_attrs(attrs: dict) -> dict:
    """The attributes of a 1-d Conv / pool as those of the same 2-d op over a height-1 input."""
    out = dict(attrs)
    for key, pad in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in attrs and len(attrs[key]) == 1:
            out[key] = [pad, int(attrs[key][0])]
    if "output_padding" in attrs and len(attrs["output_padding"]) == 1:
        out["output_padding"] = [0, int(attrs["output_padding"][0])]
    if "output_shape" in attrs and len(attrs["output_shape"]) == 1:
        out["output_shape"] = [1, int(attrs["output_shape"][0])]
    if "pads" in attrs and len(attrs["pads"]) == 2:
        out["pads"] = [0, int(attrs["pads"][0]), 0, int(attrs["pads"][1])]
    return out


def _up(t: TensorType | None) -> TensorType | None:
    return (
        None
        if t is None or len(t.shape) != 3
        else TensorType((t.shape[0], t.shape[1], 1, t.shape[2]), t.dtype)
    )


def _view(x: te.Tensor, shape: Sequence[int], fn: Any, name: str) -> te.Tensor:
    return nd_compute(tuple(shape), lambda i: x[fn(i)], name, "injective")


def lifted(cls: type, op: str) -> type:
    """``cls`` (a 2-d window op) extended to 3-d tensors (N, C, L) as (N, C, 1, L)."""

    class _Lifted(cls):  # type: ignore[misc, valid-type]
        @staticmethod
        def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
            x = same(types[0])
            if len(x.shape) != 3:
                return cls.infer(node, types, consts)
            n2 = Node(node.op, node.inputs, node.outputs, lift_attrs(node.attrs), node.name)
            ts = [_up(t) if k < 2 else t for k, t in enumerate(types)]
            return [
                TensorType((y.shape[0], y.shape[1], y.shape[3]), y.dtype) for y in cls.infer(n2, ts, consts)
            ]

        @staticmethod
        def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
            if xs[0].ndim != 3:
                return cls.numpy(node, xs)
            n2 = Node(node.op, node.inputs, node.outputs, lift_attrs(node.attrs), node.name)
            ys = [
                x[:, :, None, :] if k < 2 and x is not None and x.ndim == 3 else x for k, x in enumerate(xs)
            ]
            return [contiguous(y[:, :, 0, :]) for y in cls.numpy(n2, ys)]

        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            x = tensor_arg(args[0])
            if x.ndim != 3:
                return cls.te(attrs, args, name)
            ups = [
                _view(
                    a,
                    (a.shape[0], a.shape[1], 1, a.shape[2]),
                    lambda i, a=a: (i[0], i[1], i[3]),
                    f"{name}_up{k}",
                )
                if k < 2 and isinstance(a, te.Tensor) and a.ndim == 3
                else a
                for k, a in enumerate(args)
            ]
            y = cls.te(lift_attrs(attrs), ups, name)
            return _view(
                y, (y.shape[0], y.shape[1], y.shape[3]), lambda i: (i[0], i[1], 0, i[2]), name + "_down"
            )

    _Lifted.__name__ = f"_{op}Lifted"
    return _Lifted


register("Conv", ANCHOR, lambda node: _check_window(node, (1, 2, 3)))(lifted(_Conv, "Conv"))
register("MaxPool", REDUCE, _check_pool)(lifted(_pool_def("MaxPool"), "MaxPool"))
register("AveragePool", REDUCE, _check_pool)(lifted(_pool_def("AveragePool"), "AveragePool"))
