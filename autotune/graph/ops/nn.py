"""Convolutions, matrix products and pooling: 2-d (4-d tensors) in NCHW as imported or NHWC after the
layout pass, with per-axis strides and dilations, begin/end padding, ``auto_pad`` and ``ceil_mode``."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr
from autotune.te.ops import conv as conv_ops

from ..ir import GraphError, Node, TensorType, contiguous
from .base import ANCHOR, REDUCE, REWRITE, Arg, Consts, Types, broadcast_shapes, float_only, register, same
from .products import check_operands, operand_np, operand_te, result_type
from .te_build import nd_compute, reduce_over, tensor_arg


# --- geometry -----------------------------------------------------------------------------------------
def _two(attrs: dict, key: str, default: int) -> tuple[int, int]:
    v = attrs.get(key)
    if v is None:
        return default, default
    v = [int(x) for x in v]
    return (v[0], v[1]) if len(v) == 2 else (v[0], v[0])


def window_geometry(
    attrs: dict, in_hw: Sequence[int], k_hw: Sequence[int], ceil: bool = False
) -> dict[str, Any]:
    """Strides, dilations, pads (top, left, bottom, right) and output size of a 2-d window op."""
    strides, dil = _two(attrs, "strides", 1), _two(attrs, "dilations", 1)
    auto = attrs.get("auto_pad", "NOTSET")
    pads = [0, 0, 0, 0]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for d in range(2):
            out = -(-in_hw[d] // strides[d])
            total = max(0, (out - 1) * strides[d] + (k_hw[d] - 1) * dil[d] + 1 - in_hw[d])
            small, big = total // 2, total - total // 2
            pads[d], pads[d + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "NOTSET" and attrs.get("pads") is not None:
        pads = [int(p) for p in attrs["pads"]]
    outs = []
    for d in range(2):
        span = in_hw[d] + pads[d] + pads[d + 2] - ((k_hw[d] - 1) * dil[d] + 1)
        if ceil:
            o = -(-span // strides[d]) + 1
            if (o - 1) * strides[d] >= in_hw[d] + pads[d]:
                o -= 1  # the last window would start in the end padding
        else:
            o = span // strides[d] + 1
        outs.append(o)
    return {"strides": strides, "dilations": dil, "pads": tuple(pads), "out": tuple(outs)}


def _check_window(node: Node) -> str | None:
    a = node.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={a['auto_pad']}"
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) not in (1, 2):
        return f"{len(ks)}-d window (only 1-d and 2-d)"
    for key in ("strides", "dilations"):
        v = a.get(key)
        if v is not None and len(v) not in (1, 2):
            return f"{key}={list(v)} (only 1-d and 2-d)"
    pads = a.get("pads")
    if pads is not None and (len(pads) not in (2, 4) or min(pads) < 0):
        return f"pads={list(pads)}"
    if a.get("storage_order", 0):
        return "storage_order=1"
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        return "a second output (Indices)"
    return None


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
    """Views ``xp[..., y*st + r*dil, x*st + s*dil]`` for each tap (r, s), NCHW."""
    for r in range(k[0]):
        for s in range(k[1]):
            y0, x0 = r * dil[0], s * dil[1]
            yield (
                r,
                s,
                xp[
                    :,
                    :,
                    y0 : y0 + st[0] * (out[0] - 1) + 1 : st[0],
                    x0 : x0 + st[1] * (out[1] - 1) + 1 : st[1],
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
    for r, s, patch in _windows(xp, (kh, kw), geo["strides"], geo["dilations"], geo["out"]):
        out += np.einsum("ngchw,gfc->ngfhw", patch.reshape(n, groups, cg, oh, ow), wg[..., r, s])
    return out.reshape(n, f, oh, ow)


# --- Conv ---------------------------------------------------------------------------------------------
class _Conv:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        check_operands(node, types)
        x, w = same(types[0]), same(types[1])
        nhwc = _is_nhwc(node.attrs)
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise GraphError(f"Conv node {node.name!r}: only 1-d and 2-d convolutions, got {x.shape}")
        n, c, h, wd = _nchw_dims(x, nhwc)
        if nhwc:
            kh, kw, cg, f = w.shape
        else:
            f, cg, kh, kw = w.shape
        groups = int(node.attrs.get("group", 1))
        if groups < 1 or c != cg * groups or f % groups:
            raise GraphError(f"Conv node {node.name!r}: input {x.shape}, weight {w.shape}, group {groups}")
        ks = node.attrs.get("kernel_shape")
        if ks is not None and tuple(ks) != (kh, kw):
            raise GraphError(f"Conv node {node.name!r}: kernel_shape {list(ks)} but weight {w.shape}")
        if len(types) > 2 and types[2] is not None and types[2].shape != (f,):
            raise GraphError(f"Conv node {node.name!r}: bias shape {types[2].shape}, expected ({f},)")
        oh, ow = window_geometry(node.attrs, (h, wd), (kh, kw))["out"]
        if oh <= 0 or ow <= 0:
            raise GraphError(f"Conv node {node.name!r}: output size {oh}x{ow} is not positive")
        return [TensorType((n, oh, ow, f) if nhwc else (n, f, oh, ow), result_type(x))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = operand_np(xs[0], node.attrs, xs[0]), operand_np(xs[1], node.attrs, xs[0])
        nhwc = _is_nhwc(node.attrs)
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
    if node.attrs.get("training_mode", 0) or any(node.outputs[1:]):
        return "training mode"
    return None


class _BatchNorm:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        c = x.shape[1] if len(x.shape) > 1 else 1
        for t in types[1:5]:
            if t is None or t.shape != (c,):
                raise GraphError(f"BatchNormalization node {node.name!r}: parameters must have shape ({c},)")
        if any(v is None for v in consts[1:5]):
            raise GraphError(
                f"BatchNormalization node {node.name!r}: scale, bias, mean and variance must be constants"
            )
        return [x]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, scale, bias, mean, var = xs[:5]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = node.attrs.get("epsilon", 1e-5)
        k = scale / np.sqrt(var + eps)
        y = (x - mean.reshape(shape)) * k.reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype, copy=False)]


register("BatchNormalization", REWRITE, _check_bn)(_BatchNorm)


# --- pooling ------------------------------------------------------------------------------------------
def _check_pool(node: Node) -> str | None:
    if "kernel_shape" not in node.attrs:
        return "no kernel_shape"
    if node.op == "AveragePool":
        d = node.attrs.get("dilations")
        if d is not None and any(v != 1 for v in d):
            return f"dilations={list(d)}"
    return _check_window(node)


def pool_geometry(node_or_attrs: Any, in_hw: Sequence[int]) -> dict[str, Any]:
    attrs = node_or_attrs if isinstance(node_or_attrs, dict) else node_or_attrs.attrs
    k = tuple(int(v) for v in attrs["kernel_shape"])
    geo = window_geometry(attrs, in_hw, k, ceil=bool(attrs.get("ceil_mode", 0)))
    geo["kernel"] = k
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


def _pool_np(node: Node, x: np.ndarray) -> np.ndarray:
    geo = pool_geometry(node, x.shape[2:])
    (oh, ow), (kh, kw) = geo["out"], geo["kernel"]
    (sh, sw), (dh, dw) = geo["strides"], geo["dilations"]
    pt, pl, pb, pr = geo["pads"]
    h, w = x.shape[2:]
    # room for every window, including ceil-mode windows that end past the padding
    eb = max(pb, (oh - 1) * sh + (kh - 1) * dh + 1 - h - pt)
    er = max(pr, (ow - 1) * sw + (kw - 1) * dw + 1 - w - pl)
    is_max = node.op == "MaxPool"
    xp = np.pad(
        x.astype(np.float64), ((0, 0), (0, 0), (pt, eb), (pl, er)), constant_values=-np.inf if is_max else 0.0
    )
    taps = [v for _, _, v in _windows(xp, (kh, kw), (sh, sw), (dh, dw), (oh, ow))]
    if is_max:
        return np.max(taps, axis=0).astype(x.dtype)
    total = np.sum(taps, axis=0)
    lo_h, hi_h, lo_w, hi_w = (
        (-pt, h + pb, -pl, w + pr) if node.attrs.get("count_include_pad", 0) else (0, h, 0, w)
    )
    ys = np.arange(oh) * sh - pt
    xs = np.arange(ow) * sw - pl
    ch = np.minimum(ys + kh, hi_h) - np.maximum(ys, lo_h)
    cw = np.minimum(xs + kw, hi_w) - np.maximum(xs, lo_w)
    return (total / (ch[:, None] * cw[None, :])).astype(x.dtype)


class _Pool:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        if len(x.shape) != 4:
            raise GraphError(f"{node.op} node {node.name!r}: only 1-d and 2-d pooling, got {x.shape}")
        nhwc = _is_nhwc(node.attrs)
        n, c, h, w = _nchw_dims(x, nhwc)
        geo = pool_geometry(node, (h, w))
        oh, ow = geo["out"]
        if oh <= 0 or ow <= 0:
            raise GraphError(f"{node.op} node {node.name!r}: output size {oh}x{ow} is not positive")
        k = geo["kernel"]
        if any(p >= k[d % 2] for d, p in enumerate(geo["pads"])) and node.op == "MaxPool":
            raise GraphError(
                f"{node.op} node {node.name!r}: padding {list(geo['pads'])} not below the kernel"
            )
        return [TensorType((n, oh, ow, c) if nhwc else (n, c, oh, ow), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        nhwc = _is_nhwc(node.attrs)
        y = _pool_np(node, x.transpose(0, 3, 1, 2) if nhwc else x)
        return [contiguous(y.transpose(0, 2, 3, 1) if nhwc else y)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        return pool2d(attrs, tensor_arg(args[0]), name)


MAX_WINDOW_TAPS = 16  # pooling windows up to this size are unrolled into elementwise stages


def pool2d(attrs: dict, x: te.Tensor, name: str) -> te.Tensor:
    op = attrs["_op"]
    nhwc = _is_nhwc(attrs)
    n, c, h, w = _nchw_dims(TensorType(x.shape, x.dtype), nhwc)
    geo = pool_geometry(attrs, (h, w))
    (oh, ow), (kh, kw) = geo["out"], geo["kernel"]
    (sh, sw), (dh, dw) = geo["strides"], geo["dilations"]
    pt, pl, pb, pr = geo["pads"]
    eb = max(pb, (oh - 1) * sh + (kh - 1) * dh + 1 - h - pt)
    er = max(pr, (ow - 1) * sw + (kw - 1) * dw + 1 - w - pl)
    is_max = op == "MaxPool"
    fill = float(np.finfo(x.dtype).min) if is_max else 0.0  # max pool's padding: the lowest value
    pad_fn = conv_ops.pad_nhwc if nhwc else conv_ops.pad_nchw
    uniform = len({pt, pl, eb, er}) == 1
    xp = pad_fn(x, pt if uniform else (pt, pl, eb, er), name + "_pad", pad_value=fill)
    shape = (n, oh, ow, c) if nhwc else (n, c, oh, ow)

    def tap(i: list[Expr], r: Any, s: Any) -> Expr:
        if nhwc:
            b, y, xx, ch = i
            return xp[b, y * sh + r * dh, xx * sw + s * dw, ch]
        b, ch, y, xx = i
        return xp[b, ch, y * sh + r * dh, xx * sw + s * dw]

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
    include = bool(attrs.get("count_include_pad", 0))
    lo_h, hi_h, lo_w, hi_w = (-pt, h + pb, -pl, w + pr) if include else (0, h, 0, w)
    pad_free = not any((pt, pl, pb, pr)) and eb == 0 and er == 0
    if pad_free or (include and eb == pb and er == pr):
        inv = 1.0 / (kh * kw)
        return nd_compute(shape, lambda i: total[tuple(i)] * inv, name, "elementwise")

    def extent(v: Expr, k: int, st: int, begin: int, lo: int, hi: int) -> Expr:
        return T.min(v * st - begin + k, hi) - T.max(v * st - begin, lo)

    def avg(i: list[Expr]) -> Expr:
        y, xx = (i[1], i[2]) if nhwc else (i[2], i[3])
        cnt = extent(y, kh, sh, pt, lo_h, hi_h) * extent(xx, kw, sw, pl, lo_w, hi_w)
        return total[tuple(i)] / T.cast(x.dtype, cnt)

    return nd_compute(shape, avg, name, "elementwise")


def _pool_def(op: str) -> type:
    class _P(_Pool):
        @staticmethod
        def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
            return pool2d(dict(attrs, _op=op), tensor_arg(args[0]), name)

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
            (y,) = cls.infer(n2, ts, consts)
            return [TensorType((y.shape[0], y.shape[1], y.shape[3]), y.dtype)]

        @staticmethod
        def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
            if xs[0].ndim != 3:
                return cls.numpy(node, xs)
            n2 = Node(node.op, node.inputs, node.outputs, lift_attrs(node.attrs), node.name)
            ys = [
                x[:, :, None, :] if k < 2 and x is not None and x.ndim == 3 else x for k, x in enumerate(xs)
            ]
            return [contiguous(cls.numpy(n2, ys)[0][:, :, 0, :])]

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


register("Conv", ANCHOR, _check_window)(lifted(_Conv, "Conv"))
register("MaxPool", REDUCE, _check_pool)(lifted(_pool_def("MaxPool"), "MaxPool"))
register("AveragePool", REDUCE, _check_pool)(lifted(_pool_def("AveragePool"), "AveragePool"))
