"""Convolutions: conv2d (NCHW and NHWC; stride, padding, dilation, groups) and depthwise conv2d."""

from __future__ import annotations

from .. import tensor as T
from ..expr import all_of
from ..tensor import Tensor


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out <= 0:
        raise ValueError(
            f"conv2d: output size {out} is not positive (input {size}, kernel {kernel}, "
            f"stride {stride}, pad {pad}, dilation {dilation})"
        )
    return out


def pad_nchw(data: Tensor, pad: int, name: str = "pad", pad_value: float = 0.0) -> Tensor:
    """Constant padding (default zero) of the two spatial dims; an injective stage meant to be inlined."""
    if pad == 0:
        return data
    n, c, h, w = data.shape
    return T.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: T.select(
            all_of(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, ch, y - pad, x - pad],
            pad_value,
        ),
        name=name,
        tag="pad",
    )


def conv2d_nchw(
    data: Tensor,
    weight: Tensor,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    groups: int = 1,
    name: str = "conv2d",
) -> Tensor:
    """``out[n, f, y, x] = sum_{c, r, s} pad(data)[n, g*C/G + c, y*st + r*d, x*st + s*d] * w[f, c, r, s]``."""
    n, c, h, w = data.shape
    f, cg, kh, kw = weight.shape
    if c % groups or f % groups or cg != c // groups:
        raise ValueError(
            f"conv2d: channels {c}, filters {f}, weight {weight.shape} and groups {groups} disagree"
        )
    oh = _out_size(h, kh, stride, pad, dilation)
    ow = _out_size(w, kw, stride, pad, dilation)
    padded = pad_nchw(data, pad)
    rc = T.reduce_axis(cg, "rc")
    ry = T.reduce_axis(kh, "ry")
    rx = T.reduce_axis(kw, "rx")
    fpg = f // groups

    def body(b, ff, y, x):  # noqa: ANN001, ANN202
        ch = rc if groups == 1 else (ff // fpg) * cg + rc
        return T.sum(
            padded[b, ch, y * stride + ry * dilation, x * stride + rx * dilation] * weight[ff, rc, ry, rx],
            axis=[rc, ry, rx],
        )

    return T.compute((n, f, oh, ow), body, name=name, tag="conv2d")


def pad_nhwc(data: Tensor, pad: int, name: str = "pad") -> Tensor:
    """Zero padding of the two spatial dims of an NHWC tensor; an injective stage meant to be inlined."""
    if pad == 0:
        return data
    n, h, w, c = data.shape
    return T.compute(
        (n, h + 2 * pad, w + 2 * pad, c),
        lambda b, y, x, ch: T.select(
            all_of(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, y - pad, x - pad, ch],
            0.0,
        ),
        name=name,
        tag="pad",
    )


def conv2d_nhwc(
    data: Tensor,
    weight: Tensor,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    groups: int = 1,
    name: str = "conv2d_nhwc",
) -> Tensor:
    """NHWC conv2d with HWIO weights ``[kh, kw, C/G, F]``.

    ``out[n, y, x, f] = sum_{r, s, c} pad(data)[n, y*st + r*d, x*st + s*d, g*C/G + c] * w[r, s, c, f]``.
    """
    n, h, w, c = data.shape
    kh, kw, cg, f = weight.shape
    if c % groups or f % groups or cg != c // groups:
        raise ValueError(
            f"conv2d: channels {c}, filters {f}, weight {weight.shape} and groups {groups} disagree"
        )
    oh = _out_size(h, kh, stride, pad, dilation)
    ow = _out_size(w, kw, stride, pad, dilation)
    padded = pad_nhwc(data, pad)
    ry = T.reduce_axis(kh, "ry")
    rx = T.reduce_axis(kw, "rx")
    rc = T.reduce_axis(cg, "rc")
    fpg = f // groups

    def body(b, y, x, ff):  # noqa: ANN001, ANN202
        ch = rc if groups == 1 else (ff // fpg) * cg + rc
        return T.sum(
            padded[b, y * stride + ry * dilation, x * stride + rx * dilation, ch] * weight[ry, rx, rc, ff],
            axis=[ry, rx, rc],
        )

    return T.compute((n, oh, ow, f), body, name=name, tag="conv2d")


def depthwise_conv2d_nchw(
    data: Tensor,
    weight: Tensor,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    name: str = "depthwise_conv2d",
) -> Tensor:
    """Depthwise NCHW conv2d, channel multiplier 1, weights ``[C, 1, kh, kw]``.

    ``out[n, c, y, x] = sum_{r, s} pad(data)[n, c, y*st + r*d, x*st + s*d] * w[c, 0, r, s]``.
    """
    n, c, h, w = data.shape
    wc, mult, kh, kw = weight.shape
    if wc != c or mult != 1:
        raise ValueError(f"depthwise_conv2d: weight {weight.shape} does not fit {c} channels (multiplier 1)")
    oh = _out_size(h, kh, stride, pad, dilation)
    ow = _out_size(w, kw, stride, pad, dilation)
    padded = pad_nchw(data, pad)
    ry = T.reduce_axis(kh, "ry")
    rx = T.reduce_axis(kw, "rx")
    return T.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: T.sum(
            padded[b, ch, y * stride + ry * dilation, x * stride + rx * dilation] * weight[ch, 0, ry, rx],
            axis=[ry, rx],
        ),
        name=name,
        tag="depthwise_conv2d",
    )
