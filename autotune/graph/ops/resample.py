"""Resampling: Resize (nearest and linear, every coordinate transformation but the crop) and
ConvTranspose (2-d and, through the 1-d lifting of :mod:`.nn`, 1-d)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, all_of, compare

from ..ir import GraphError, Node, TensorType, contiguous
from .base import (
    INJECTIVE,
    REDUCE,
    Arg,
    AttrNode,
    Consts,
    Types,
    float_only,
    norm_axis,
    operand,
    register,
    same,
)
from .nn import _two, lifted
from .te_build import nd_compute, tensor_arg

_COORD = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _attr(node: Any, key: str, default: str) -> str:
    v = node.attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _check_resize(node: Node) -> str | None:
    mode = _attr(node, "mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"mode={mode!r}"
    ct = _attr(node, "coordinate_transformation_mode", "half_pixel")
    if ct not in _COORD:
        return f"coordinate_transformation_mode={ct!r}"
    nm = _attr(node, "nearest_mode", "round_prefer_floor")
    if nm not in _NEAREST:
        return f"nearest_mode={nm!r}"
    if node.attrs.get("antialias", 0):
        return "antialias=1"
    if _attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return f"keep_aspect_ratio_policy={node.attrs['keep_aspect_ratio_policy']!r}"
    return None


def resize_plan(node: Any, shape: Sequence[int], consts: Consts) -> tuple[tuple[int, ...], list[float]]:
    """The output shape and the per-axis scale (output / input) of a Resize."""
    nd = len(shape)
    axes = node.attrs.get("axes")
    axes = list(range(nd)) if axes is None else [norm_axis(int(a), nd, "Resize") for a in axes]
    scales = operand(node, consts, 2, "scales")
    sizes = operand(node, consts, 3, "sizes")
    if sizes is not None and sizes.size:
        if sizes.size != len(axes):
            raise GraphError(f"Resize node {node.name!r}: {sizes.size} sizes for {len(axes)} axes")
        out = list(shape)
        for a, s in zip(axes, sizes.reshape(-1)):
            out[a] = int(s)
        scale = [out[d] / shape[d] if shape[d] else 1.0 for d in range(nd)]
    elif scales is not None and scales.size:
        if scales.size != len(axes):
            raise GraphError(f"Resize node {node.name!r}: {scales.size} scales for {len(axes)} axes")
        scale = [1.0] * nd
        for a, s in zip(axes, scales.reshape(-1)):
            scale[a] = float(s)
        out = [int(math.floor(shape[d] * scale[d])) for d in range(nd)]
    else:
        raise GraphError(f"Resize node {node.name!r}: neither scales nor sizes")
    if any(s <= 0 for s in scale) or any(o <= 0 for o in out):
        raise GraphError(f"Resize node {node.name!r}: empty or negative output {out}")
    return tuple(out), scale


def _source_coord(node: Any, x: Any, size: int, out: int, scale: float) -> Any:
    """The input coordinate of output coordinate ``x`` (numpy array or te expression)."""
    ct = _attr(node, "coordinate_transformation_mode", "half_pixel")
    if ct == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if ct == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else x * 0.0
    if ct == "align_corners":  # the resized length is size * scale, not rounded (as ONNX defines it)
        length = size * scale
        return x * ((size - 1) / (length - 1)) if out > 1 and length != 1 else x * 0.0
    if ct == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    return x / scale  # asymmetric


def nearest(mode: str, v: Any, floor: Any, ceil: Any) -> Any:
    """``v`` rounded as Resize's ``nearest_mode`` says, with ``floor`` / ``ceil`` of numpy or of te."""
    if mode == "round_prefer_floor":
        return ceil(v - 0.5)
    if mode == "round_prefer_ceil":
        return floor(v + 0.5)
    return floor(v) if mode == "floor" else ceil(v)


def _axis_taps(node: Any, size: int, out: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output position along one axis: (first index, second index, weight of the second)."""
    x = _source_coord(node, np.arange(out, dtype=np.float64), size, out, scale)
    if _attr(node, "mode", "nearest") == "nearest":
        nm = _attr(node, "nearest_mode", "round_prefer_floor")
        r = nearest(nm, x, np.floor, np.ceil)
        i = np.clip(r, 0, size - 1).astype(np.int64)
        return i, i, np.zeros(out)
    x = np.clip(x, 0, size - 1)
    i0 = np.floor(x).astype(np.int64)
    return i0, np.minimum(i0 + 1, size - 1), x - i0


class _Resize:
    const_operands = {1: "roi", 2: "scales", 3: "sizes"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types[:1])
        x = same(types[0])
        return [TensorType(resize_plan(node, x.shape, consts)[0], x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        out, scale = resize_plan(node, x.shape, [None] + list(xs[1:]))
        y = x.astype(np.float64)
        for d in range(x.ndim):
            if out[d] == x.shape[d] and scale[d] == 1.0:
                continue
            i0, i1, w = _axis_taps(node, x.shape[d], out[d], scale[d])
            shape = [1] * x.ndim
            shape[d] = out[d]
            w = w.reshape(shape)
            y = np.take(y, i0, axis=d) * (1 - w) + np.take(y, i1, axis=d) * w
        return [contiguous(y.astype(x.dtype))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        node = AttrNode("Resize", attrs, name)
        out, scale = resize_plan(node, x.shape, [])
        axes = [d for d in range(x.ndim) if not (out[d] == x.shape[d] and scale[d] == 1.0)]
        linear = _attr(node, "mode", "nearest") == "linear"
        nm = _attr(node, "nearest_mode", "round_prefer_floor")

        def taps(d: int, v: Expr) -> tuple[Expr, Expr, Expr]:
            c = _source_coord(node, T.cast("float32", v), x.shape[d], out[d], scale[d])
            top = x.shape[d] - 1
            if not linear:
                r = nearest(nm, c, T.floor, T.ceil)
                i = T.min(T.max(T.cast("int32", r), 0), top)
                return i, i, T.cast("float32", 0)
            c = T.min(T.max(c, 0.0), float(top))
            f = T.floor(c)
            i0 = T.cast("int32", f)
            return i0, T.min(i0 + 1, top), c - f

        def body(i: list[Expr]) -> Expr:
            per = {d: taps(d, i[d]) for d in axes}
            total: Expr | None = None
            corners = list(itertools.product((0, 1) if linear else (0,), repeat=len(axes)))
            for corner in corners:
                idx = list(i)
                weight: Expr | None = None
                for d, k in zip(axes, corner):
                    i0, i1, w = per[d]
                    idx[d] = i1 if k else i0
                    if linear:
                        f = w if k else 1.0 - w
                        weight = f if weight is None else weight * f
                v = x[tuple(idx)]
                term = v if weight is None else v * weight
                total = term if total is None else total + term
            assert total is not None
            return total

        return nd_compute(out, body, name, "injective")


register("Resize", INJECTIVE, _check_resize)(_Resize)


# --- ConvTranspose ------------------------------------------------------------------------------------
def conv_transpose_geometry(attrs: dict, in_hw: Sequence[int], k_hw: Sequence[int]) -> dict[str, Any]:
    """Strides, dilations, pads (top, left, bottom, right) and output size of a 2-d ConvTranspose."""
    st, dil = _two(attrs, "strides", 1), _two(attrs, "dilations", 1)
    opad = _two(attrs, "output_padding", 0)
    full = [st[d] * (in_hw[d] - 1) + opad[d] + (k_hw[d] - 1) * dil[d] + 1 for d in range(2)]
    auto = attrs.get("auto_pad", "NOTSET")
    pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    if attrs.get("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = (
            [int(v) for v in attrs["output_shape"]][-2:]
            if attrs.get("output_shape") is not None
            else [in_hw[d] * st[d] for d in range(2)]
        )
        for d in range(2):
            total = full[d] - want[d]
            small, big = total // 2, total - total // 2
            pads[d], pads[d + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    out = tuple(full[d] - pads[d] - pads[d + 2] for d in range(2))
    return {"strides": st, "dilations": dil, "pads": tuple(pads), "out": out}


def _check_conv_transpose(node: Node) -> str | None:
    ks = node.attrs.get("kernel_shape")
    if ks is not None and len(ks) not in (1, 2):
        return f"{len(ks)}-d kernel (only 1-d and 2-d)"
    return None


class _ConvTranspose:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x, w = same(types[0]), same(types[1])
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise GraphError(f"ConvTranspose node {node.name!r}: only 1-d and 2-d, got {x.shape}")
        g = int(node.attrs.get("group", 1))
        if x.shape[1] != w.shape[0] or x.shape[1] % g:
            raise GraphError(
                f"ConvTranspose node {node.name!r}: input {x.shape}, weight {w.shape}, group {g}"
            )
        f = w.shape[1] * g
        if len(types) > 2 and types[2] is not None and types[2].shape != (f,):
            raise GraphError(
                f"ConvTranspose node {node.name!r}: bias shape {types[2].shape}, expected ({f},)"
            )
        oh, ow = conv_transpose_geometry(node.attrs, x.shape[2:], w.shape[2:])["out"]
        if oh <= 0 or ow <= 0:
            raise GraphError(f"ConvTranspose node {node.name!r}: empty output ({oh}x{ow})")
        return [TensorType((x.shape[0], f, oh, ow), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
        g = int(node.attrs.get("group", 1))
        geo = conv_transpose_geometry(node.attrs, x.shape[2:], w.shape[2:])
        (sh, sw), (dh, dw), (pt, pl, _, _) = geo["strides"], geo["dilations"], geo["pads"]
        n, c, h, wd = x.shape
        _, fg, kh, kw = w.shape
        full = (
            sh * (h - 1) + (kh - 1) * dh + 1 + geo["out"][0] + pt,
            sw * (wd - 1) + (kw - 1) * dw + 1 + geo["out"][1] + pl,
        )
        y = np.zeros((n, g, fg, *full))
        xg = x.reshape(n, g, c // g, h, wd)
        wg = w.reshape(g, c // g, fg, kh, kw)
        for r in range(kh):
            for s in range(kw):
                contrib = np.einsum("ngchw,gcf->ngfhw", xg, wg[..., r, s])
                y[..., r * dh : r * dh + sh * (h - 1) + 1 : sh, s * dw : s * dw + sw * (wd - 1) + 1 : sw] += (
                    contrib
                )
        y = y.reshape(n, g * fg, *full)[:, :, pt : pt + geo["out"][0], pl : pl + geo["out"][1]]
        if len(xs) > 2 and xs[2] is not None:
            y = y + xs[2][:, None, None]
        return [contiguous(y.astype(xs[0].dtype))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        """``y[n, f, oy, ox] = sum_{c, r, s} x[n, c, iy, ix] * w[c, f, r, s]`` over the taps whose
        ``iy = (oy + pt - r*dh) / sh`` (and ``ix``) are whole and inside the input."""
        x, w = tensor_arg(args[0]), tensor_arg(args[1])
        g = int(attrs.get("group", 1))
        n, c, h, wd = x.shape
        _, fg, kh, kw = w.shape
        geo = conv_transpose_geometry(attrs, (h, wd), (kh, kw))
        (sh, sw), (dh, dw), (pt, pl, _, _) = geo["strides"], geo["dilations"], geo["pads"]
        cg = c // g
        rc, ry, rx = T.reduce_axis(cg, "rc"), T.reduce_axis(kh, "ry"), T.reduce_axis(kw, "rx")
        bias = args[2] if len(args) > 2 else None

        def body(i: list[Expr]) -> Expr:
            b, f, oy, ox = i
            ch = rc.var if g == 1 else (f // fg) * cg + rc.var
            ty, tx = oy + pt - ry.var * dh, ox + pl - rx.var * dw
            ok = all_of(
                compare("le", 0, ty),
                compare("lt", ty, sh * h),
                compare("le", 0, tx),
                compare("lt", tx, sw * wd),
                compare("eq", ty % sh, 0),
                compare("eq", tx % sw, 0),
            )
            iy = T.min(T.max(ty, 0), sh * (h - 1)) // sh
            ix = T.min(T.max(tx, 0), sw * (wd - 1)) // sw
            v = T.select(ok, x[b, ch, iy, ix] * w[ch, f % fg if g > 1 else f, ry.var, rx.var], 0.0)
            return T.sum(v, axis=[rc, ry, rx])

        y = nd_compute((n, g * fg, *geo["out"]), body, name, "reduce")
        if bias is None:
            return y
        bt = tensor_arg(bias)
        return nd_compute(y.shape, lambda i: y[tuple(i)] + bt[i[1]], name + "_bias", "elementwise")


register("ConvTranspose", REDUCE, _check_conv_transpose)(lifted(_ConvTranspose, "ConvTranspose"))
