"""Resampling: Resize (nearest, linear and cubic; antialiased linear and cubic; every coordinate
transformation, crop-and-resize included) and ConvTranspose (2-d and 3-d and, through the 1-d lifting
of :mod:`.nn`, 1-d).

A Resize is separable: along each resized axis an output position ``o`` maps to a source coordinate
``x(o)`` and reads a fixed number of taps around it, with weights from the mode's kernel (nearest: one
tap; linear: the triangle; cubic: Keys' kernel with ``cubic_coeff_a``; antialiasing stretches the
kernel by ``1 / scale`` when downsampling). :func:`_axis_taps` writes that once over a small math
namespace, so the numpy form (float64, one axis at a time) and the kernel (float32, the product of the
axes' taps) are the same formulas."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, all_of, any_of, compare

from ..ir import GraphError, Node, TensorType, contiguous
from .base import (
    IMPORTED_AS,
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
from .nn import lifted, per_axis
from .te_build import nd_compute, tensor_arg

_COORD = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")


def _attr(node: Any, key: str, default: str) -> str:
    v = node.attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _check_resize(node: Node) -> str | None:
    mode = _attr(node, "mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode={mode!r}"
    ct = _attr(node, "coordinate_transformation_mode", "half_pixel")
    if ct not in _COORD:
        return f"coordinate_transformation_mode={ct!r}"
    nm = _attr(node, "nearest_mode", "round_prefer_floor")
    if nm not in _NEAREST:
        return f"nearest_mode={nm!r}"
    if node.attrs.get("antialias", 0) and mode == "nearest":
        return "antialias=1 with mode='nearest'"
    policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
    if policy not in _POLICIES:
        return f"keep_aspect_ratio_policy={policy!r}"
    return None


@dataclass(frozen=True)
class ResizePlan:
    """What a Resize does to each axis: output size, scale (output / input, as ONNX defines it for
    the coordinate mapping), crop window (``tf_crop_and_resize``) and which axes change at all."""

    out: tuple[int, ...]
    scale: tuple[float, ...]
    roi: tuple[tuple[Any, Any], ...] | None  # per axis (start, end), float32 as given
    axes: tuple[int, ...]  # the axes resampled (the others are copied)


def resize_plan(node: Any, shape: Sequence[int], consts: Consts) -> ResizePlan:
    """The output shape, per-axis scales, crop window and resampled axes of a Resize."""
    nd = len(shape)
    axes = node.attrs.get("axes")
    axes = list(range(nd)) if axes is None else [norm_axis(int(a), nd, "Resize") for a in axes]
    if len(set(axes)) != len(axes):
        raise GraphError(f"Resize node {node.name!r}: repeated axes {axes}")
    scales = operand(node, consts, 2, "scales")
    sizes = operand(node, consts, 3, "sizes")
    crop = _attr(node, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    if any(s <= 0 for s in shape):
        raise GraphError(f"Resize node {node.name!r}: empty input {tuple(shape)}")
    if sizes is not None and sizes.size:
        if sizes.size != len(axes):
            raise GraphError(f"Resize node {node.name!r}: {sizes.size} sizes for {len(axes)} axes")
        out = list(shape)
        for a, s in zip(axes, sizes.reshape(-1)):
            out[a] = int(s)
        scale = [out[d] / shape[d] for d in range(nd)]
        policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(scale[a] for a in axes)
            for a in axes:
                scale[a], out[a] = s, int(s * shape[a] + 0.5)
    elif scales is not None and scales.size:
        if scales.size != len(axes):
            raise GraphError(f"Resize node {node.name!r}: {scales.size} scales for {len(axes)} axes")
        if crop:  # ONNX's text and its reference disagree on this output size: refuse
            raise GraphError(f"Resize node {node.name!r}: tf_crop_and_resize with scales (only with sizes)")
        scale = [1.0] * nd
        for a, s in zip(axes, scales.reshape(-1)):
            scale[a] = float(s)
        out = [int(math.floor(shape[d] * scale[d])) for d in range(nd)]
    else:
        raise GraphError(f"Resize node {node.name!r}: neither scales nor sizes")
    if any(s <= 0 for s in scale) or any(o <= 0 for o in out):
        raise GraphError(f"Resize node {node.name!r}: empty or negative output {out}")
    roi = None
    if crop:
        given = operand(node, consts, 1, "roi")
        if given is None or given.size != 2 * len(axes):
            raise GraphError(f"Resize node {node.name!r}: tf_crop_and_resize needs a roi of 2 x {len(axes)}")
        vals = np.asarray(given, dtype=np.float32).reshape(-1)
        per = [(np.float32(0.0), np.float32(1.0))] * nd
        for k, a in enumerate(axes):
            per[a] = (vals[k], vals[len(axes) + k])
        roi = tuple(per)
    changed = tuple(
        d
        for d in range(nd)
        if not (
            math.isclose(scale[d], 1.0)
            and out[d] == shape[d]
            and (roi is None or (math.isclose(float(roi[d][0]), 0.0) and math.isclose(float(roi[d][1]), 1.0)))
        )
    )
    return ResizePlan(tuple(out), tuple(scale), roi, changed)


def _source_coord(node: Any, o: Any, size: int, plan: ResizePlan, d: int) -> Any:
    """The input coordinate of output coordinate ``o`` along axis ``d`` (numpy array or te expression)."""
    ct = _attr(node, "coordinate_transformation_mode", "half_pixel")
    scale, out = plan.scale[d], plan.out[d]
    length = scale * size  # the resized length before rounding, as ONNX defines it
    if ct == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if ct == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / length)
        return offset + (o + 0.5) / scale - 0.5
    if ct == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if length != 1 else o * 0.0 - 0.5
    if ct == "align_corners":
        return o * ((size - 1) / (length - 1)) if length != 1 else o * 0.0
    if ct == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    if ct == "tf_crop_and_resize":
        assert plan.roi is not None
        start, end = plan.roi[d]
        # ONNX's arithmetic, float32 where the roi is (the extrapolated positions depend on it)
        at = float(start * (size - 1))
        if length == 1:
            return o * 0.0 + (float((end - start) * (size - 1) / 2) + at)
        return o * float(end - start) * (size - 1) / (length - 1) + at
    return o / scale  # asymmetric


def _crop_range(node: Any, size: int, plan: ResizePlan, d: int) -> tuple[int, int] | None:
    """The output positions along ``d`` whose crop coordinate lies inside the input (an interval: the
    coordinate is affine in the position); None when every position does (no extrapolation)."""
    if plan.roi is None or d not in plan.axes:
        return None
    x = _source_coord(node, np.arange(plan.out[d], dtype=np.float64), size, plan, d)
    inside = np.nonzero((x >= 0) & (x <= size - 1))[0]
    if inside.size == plan.out[d]:
        return None
    return (int(inside[0]), int(inside[-1])) if inside.size else (0, -1)


def nearest(mode: str, v: Any, floor: Any, ceil: Any) -> Any:
    """``v`` rounded as Resize's ``nearest_mode`` says, with ``floor`` / ``ceil`` of numpy or of te."""
    if mode == "round_prefer_floor":
        return ceil(v - 0.5)
    if mode == "round_prefer_ceil":
        return floor(v + 0.5)
    return floor(v) if mode == "floor" else ceil(v)


class _NumpyMath:
    floor, ceil, abs, where = np.floor, np.ceil, np.abs, np.where
    minimum, maximum = np.minimum, np.maximum
    inside = staticmethod(lambda i, top: (i >= 0) & (i <= top))
    index = staticmethod(lambda v: v.astype(np.int64))
    nonzero = staticmethod(lambda v: np.where(v == 0.0, 1.0, v))


class _TeMath:
    floor, ceil, abs, where = T.floor, T.ceil, T.fabs, T.select
    minimum, maximum = T.min, T.max
    inside = staticmethod(lambda i, top: all_of(compare("le", 0, i), compare("le", i, top)))
    index = staticmethod(lambda v: T.cast("int32", v))
    nonzero = staticmethod(lambda v: T.select(compare("eq", v, 0.0), 1.0, v))


def _kernel(cubic: bool, a: float, t: Any, m: Any) -> Any:
    """The interpolation kernel at distance ``t >= 0`` (in input pixels, already scaled)."""
    if not cubic:
        return m.maximum(1.0 - t, 0.0)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return m.where(t <= 1.0, near, m.where(t < 2.0, far, 0.0))


def tap_count(node: Any, scale: float) -> int:
    """Taps per output position along an axis of this scale."""
    mode = _attr(node, "mode", "nearest")
    if mode == "nearest":
        return 1
    support = 2 if mode == "cubic" else 1
    s = min(scale, 1.0) if node.attrs.get("antialias", 0) else 1.0
    return 2 - 2 * int(math.floor(-support / s) + 1)


def _axis_taps(node: Any, plan: ResizePlan, size: int, d: int, o: Any, m: Any) -> tuple[list, Any]:
    """Along axis ``d`` at output position ``o`` (float): the taps ``[(index, weight or None)]`` and
    the divisor of their weighted sum (None: 1)."""
    x = _source_coord(node, o, size, plan, d)
    top = size - 1
    mode = _attr(node, "mode", "nearest")
    if mode == "nearest":
        r = nearest(_attr(node, "nearest_mode", "round_prefer_floor"), x, m.floor, m.ceil)
        return [(m.minimum(m.maximum(m.index(r), 0), top), None)], None
    antialias = bool(node.attrs.get("antialias", 0))
    s = min(plan.scale[d], 1.0) if antialias else 1.0
    n = tap_count(node, plan.scale[d])
    base = m.ceil(x) - 1.0  # the taps around x, the left one preferred: ratio in (0, 1]
    ratio = x - base
    first = m.index(base)
    exclude = bool(node.attrs.get("exclude_outside", 0))
    a = float(node.attrs.get("cubic_coeff_a", -0.75))
    taps, total = [], None
    for k in range(1 - n // 2, n // 2 + 1):
        w = _kernel(mode == "cubic", a, m.abs((ratio - k) * s), m)
        i = first + k
        if exclude:
            w = m.where(m.inside(i, top), w, 0.0)
        taps.append((m.minimum(m.maximum(i, 0), top), w))
        total = w if total is None else total + w
    if not (antialias or exclude):
        return taps, None
    return taps, m.nonzero(total)


class _Resize:
    const_operands = {1: "roi", 2: "scales", 3: "sizes"}

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types[:1])
        x = same(types[0])
        plan = resize_plan(node, x.shape, consts)
        shrunk = any(plan.scale[d] < 1 for d in plan.axes)
        if node.attrs.get("_legacy") and _attr(node, "mode", "nearest") == "nearest" and shrunk:
            raise GraphError(
                f"Resize node {node.name!r}: nearest downsampling before opset 11 is computed differently "
                "by onnxruntime (rounds up) and by ONNX's version converter and PyTorch (round down); "
                "export at opset 11 or later"
            )
        taps = math.prod(tap_count(node, plan.scale[d]) for d in plan.axes)
        if taps > MAX_RESIZE_TAPS:
            raise GraphError(
                f"Resize node {node.name!r}: {taps} taps per output value (at most {MAX_RESIZE_TAPS})"
            )
        return [TensorType(plan.out, x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        plan = resize_plan(node, x.shape, [None] + list(xs[1:]))
        extrap = float(node.attrs.get("extrapolation_value", 0.0))
        y = x.astype(np.float64)
        for d in plan.axes:
            size = x.shape[d]
            o = np.arange(plan.out[d], dtype=np.float64)
            taps, norm = _axis_taps(node, plan, size, d, o, _NumpyMath)
            shape = [1] * x.ndim
            shape[d] = plan.out[d]
            acc = sum(np.take(y, i, axis=d) * (1.0 if w is None else w.reshape(shape)) for i, w in taps)
            y = acc if norm is None else acc / norm.reshape(shape)
            inside = _crop_range(node, size, plan, d)
            if inside is not None:
                keep = ((o >= inside[0]) & (o <= inside[1])).reshape(shape)
                y = np.where(keep, y, extrap)
        return [contiguous(np.asarray(y).astype(x.dtype))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = tensor_arg(args[0])
        node = AttrNode("Resize", attrs, name)
        plan = resize_plan(node, x.shape, [])
        extrap = float(attrs.get("extrapolation_value", 0.0))
        crops = {d: _crop_range(node, x.shape[d], plan, d) for d in plan.axes}

        def body(i: list[Expr]) -> Expr:
            per = {
                d: _axis_taps(node, plan, x.shape[d], d, T.cast("float32", i[d]), _TeMath) for d in plan.axes
            }

            def gather(k: int, idx: list[Any]) -> Expr:
                # sum over the taps of axis plan.axes[k] of weight * (the sum over the later axes)
                if k == len(plan.axes):
                    return x[tuple(idx)]
                d = plan.axes[k]
                total: Expr | None = None
                for j, w in per[d][0]:
                    v = gather(k + 1, idx[:d] + [j] + idx[d + 1 :])
                    term = v if w is None else v * w
                    total = term if total is None else total + term
                assert total is not None
                return total

            val = gather(0, list(i))
            for d in plan.axes:
                if per[d][1] is not None:
                    val = val / per[d][1]
            out = [(d, r) for d, r in crops.items() if r is not None]
            if out:
                outside = any_of(*[any_of(i[d] < r[0], i[d] > r[1]) for d, r in out])
                val = T.select(outside, extrap, val)
            return val

        return nd_compute(plan.out, body, name, "injective")


MAX_RESIZE_TAPS = 256  # input values read per output value (the product over the resampled axes)

register("Resize", INJECTIVE, _check_resize)(_Resize)
IMPORTED_AS["Upsample"] = "Resize"


def as_opset11_resize(attrs: dict, inputs: list[str]) -> tuple[dict, list[str], np.ndarray | None]:
    """Upsample (opsets 7-9) or a Resize of opset 10 as the opset-11 Resize that computes the same:
    asymmetric coordinates, nearest rounding down (ONNX's version converter maps them so), the
    scales as the third input. Upsample-7 holds its scales as an attribute: they come back as an
    array for the caller to hold as a constant (its input name is then left empty)."""
    new = {k: v for k, v in attrs.items() if k != "scales"}
    new["coordinate_transformation_mode"] = "asymmetric"
    new["nearest_mode"] = "floor"
    new["_legacy"] = True  # nearest downsampling is refused (Resize.infer)
    if "scales" in attrs:
        return new, [inputs[0], "", ""], np.asarray(attrs["scales"], np.float32)
    return new, [inputs[0], "", inputs[1] if len(inputs) > 1 else ""], None


# --- ConvTranspose ------------------------------------------------------------------------------------
def conv_transpose_geometry(attrs: dict, in_hw: Sequence[int], k_hw: Sequence[int]) -> dict[str, Any]:
    """Strides, dilations, pads (every axis's begin, then every axis's end) and output size of a
    ConvTranspose over ``len(in_hw)`` spatial axes."""
    n = len(in_hw)
    st, dil = per_axis(attrs, "strides", 1, n), per_axis(attrs, "dilations", 1, n)
    opad = per_axis(attrs, "output_padding", 0, n)
    full = [st[d] * (in_hw[d] - 1) + opad[d] + (k_hw[d] - 1) * dil[d] + 1 for d in range(n)]
    auto = attrs.get("auto_pad", "NOTSET")
    pads = [int(p) for p in attrs.get("pads", [0] * (2 * n))]
    if attrs.get("output_shape") is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = (
            [int(v) for v in attrs["output_shape"]][-n:]
            if attrs.get("output_shape") is not None
            else [in_hw[d] * st[d] for d in range(n)]
        )
        for d in range(n):
            total = full[d] - want[d]
            small, big = total // 2, total - total // 2
            pads[d], pads[d + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * n)
    out = tuple(full[d] - pads[d] - pads[d + n] for d in range(n))
    return {"strides": st, "dilations": dil, "pads": tuple(pads), "out": out}


def _check_conv_transpose(node: Node) -> str | None:
    ks = node.attrs.get("kernel_shape")
    if ks is not None and len(ks) not in (1, 2, 3):
        return f"{len(ks)}-d kernel (only 1-d, 2-d and 3-d)"
    return None


class _ConvTranspose:
    tensor_operands = (1, 2)  # weight, bias

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x, w = same(types[0]), same(types[1])
        if len(x.shape) not in (4, 5) or len(w.shape) != len(x.shape):
            raise GraphError(f"ConvTranspose node {node.name!r}: only 1-d, 2-d and 3-d, got {x.shape}")
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
        out = conv_transpose_geometry(node.attrs, x.shape[2:], w.shape[2:])["out"]
        if any(o <= 0 for o in out):
            raise GraphError(f"ConvTranspose node {node.name!r}: empty output {out}")
        return [TensorType((x.shape[0], f, *out), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
        g = int(node.attrs.get("group", 1))
        sp, k = x.shape[2:], w.shape[2:]
        nd = len(sp)
        geo = conv_transpose_geometry(node.attrs, sp, k)
        st, dil, begin, out = geo["strides"], geo["dilations"], geo["pads"][:nd], geo["out"]
        n, c = x.shape[:2]
        fg = w.shape[1]
        # room for every tap's contribution and for the output window (output padding is zeros)
        full = [st[d] * (sp[d] - 1) + (k[d] - 1) * dil[d] + 1 + out[d] + begin[d] for d in range(nd)]
        y = np.zeros((n, g, fg, *full))
        xg = x.reshape(n, g, c // g, *sp)
        wg = w.reshape(g, c // g, fg, *k)
        for r in itertools.product(*(range(kd) for kd in k)):
            contrib = np.einsum("ngc...,gcf->ngf...", xg, wg[(Ellipsis, *r)])
            at = tuple(
                slice(r[d] * dil[d], r[d] * dil[d] + st[d] * (sp[d] - 1) + 1, st[d]) for d in range(nd)
            )
            y[(Ellipsis, *at)] += contrib
        y = y.reshape(n, g * fg, *full)[(Ellipsis, *(slice(b, b + o) for b, o in zip(begin, out)))]
        if len(xs) > 2 and xs[2] is not None:
            y = y + xs[2].reshape((-1,) + (1,) * nd)
        return [contiguous(y.astype(xs[0].dtype))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        """``y[n, f, o...] = sum_{c, r...} x[n, c, i...] * w[c, f, r...]`` over the taps whose
        ``i = (o + pad - r*dil) / st`` are whole and inside the input, on every spatial axis."""
        x, w = tensor_arg(args[0]), tensor_arg(args[1])
        g = int(attrs.get("group", 1))
        n, c = x.shape[:2]
        sp, k = x.shape[2:], w.shape[2:]
        nd = len(sp)
        fg = w.shape[1]
        geo = conv_transpose_geometry(attrs, sp, k)
        st, dil, begin = geo["strides"], geo["dilations"], geo["pads"][:nd]
        cg = c // g
        rc = T.reduce_axis(cg, "rc")
        rk = [T.reduce_axis(kd, a) for kd, a in zip(k, ("rz", "ry", "rx")[3 - nd :])]
        bias = args[2] if len(args) > 2 else None

        def body(i: list[Expr]) -> Expr:
            b, f, o = i[0], i[1], i[2:]
            ch = rc.var if g == 1 else (f // fg) * cg + rc.var
            t = [o[d] + begin[d] - rk[d].var * dil[d] for d in range(nd)]
            inside = [(compare("le", 0, t[d]), compare("lt", t[d], st[d] * sp[d])) for d in range(nd)]
            ok = all_of(
                *[c for pair in inside for c in pair], *[compare("eq", t[d] % st[d], 0) for d in range(nd)]
            )
            src = [T.min(T.max(t[d], 0), st[d] * (sp[d] - 1)) // st[d] for d in range(nd)]
            v = T.select(ok, x[(b, ch, *src)] * w[(ch, f % fg if g > 1 else f, *(r.var for r in rk))], 0.0)
            return T.sum(v, axis=[rc, *rk])

        y = nd_compute((n, g * fg, *geo["out"]), body, name, "reduce")
        if bias is None:
            return y
        bt = tensor_arg(bias)
        return nd_compute(y.shape, lambda i: y[tuple(i)] + bt[i[1]], name + "_bias", "elementwise")


register("ConvTranspose", REDUCE, _check_conv_transpose)(lifted(_ConvTranspose, "ConvTranspose"))
