"""Convolutions: conv2d in NCHW and NHWC (per-axis strides and dilations, begin/end padding, groups)."""

from __future__ import annotations

from typing import Sequence, Union

from .. import tensor as T
from ..expr import all_of
from ..tensor import Tensor

IntOrPair = Union[int, Sequence[int]]


def pair(v: IntOrPair) -> tuple[int, int]:
    """(height, width) values from one int or two."""
    if isinstance(v, int):
        return v, v
    a, b = (int(x) for x in v)
    return a, b


def pads4(v: IntOrPair) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) padding from one int (every side) or ONNX's four values."""
    if isinstance(v, int):
        return v, v, v, v
    t, left, b, r = (int(x) for x in v)
    return t, left, b, r


def _out_size(size: int, kernel: int, stride: int, pad: int | tuple[int, int], dilation: int) -> int:
    begin, end = (pad, pad) if isinstance(pad, int) else pad
    out = (size + begin + end - dilation * (kernel - 1) - 1) // stride + 1
    if out <= 0:
        raise ValueError(
            f"conv2d: output size {out} is not positive (input {size}, kernel {kernel}, "
            f"stride {stride}, pad {pad}, dilation {dilation})"
        )
    return out


def pad_nchw(data: Tensor, pad: IntOrPair, name: str = "pad", pad_value: float = 0.0) -> Tensor:
    """Constant padding (default zero) of the two spatial dims (one int for every side, or top, left,
    bottom, right); an injective stage meant to be inlined."""
    pt, pl, pb, pr = pads4(pad)
    if not (pt or pl or pb or pr):
        return data
    n, c, h, w = data.shape
    return T.compute(
        (n, c, h + pt + pb, w + pl + pr),
        lambda b, ch, y, x: T.select(
            all_of(y >= pt, y < h + pt, x >= pl, x < w + pl),
            data[b, ch, y - pt, x - pl],
            pad_value,
        ),
        name=name,
        tag="pad",
    )


def conv2d_nchw(
    data: Tensor,
    weight: Tensor,
    stride: IntOrPair = 1,
    pad: IntOrPair = 0,
    dilation: IntOrPair = 1,
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
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = pair(stride), pair(dilation), pads4(pad)
    oh = _out_size(h, kh, sh, (pt, pb), dh)
    ow = _out_size(w, kw, sw, (pl, pr), dw)
    padded = pad_nchw(data, pad)
    rc = T.reduce_axis(cg, "rc")
    ry = T.reduce_axis(kh, "ry")
    rx = T.reduce_axis(kw, "rx")
    fpg = f // groups

    def body(b, ff, y, x):  # noqa: ANN001, ANN202
        ch = rc if groups == 1 else (ff // fpg) * cg + rc
        return T.sum(
            padded[b, ch, y * sh + ry * dh, x * sw + rx * dw] * weight[ff, rc, ry, rx],
            axis=[rc, ry, rx],
        )

    return T.compute((n, f, oh, ow), body, name=name, tag="conv2d")


def pad_nhwc(data: Tensor, pad: IntOrPair, name: str = "pad", pad_value: float = 0.0) -> Tensor:
    """Constant padding of the two spatial dims of an NHWC tensor (as :func:`pad_nchw`); an injective
    stage meant to be inlined."""
    pt, pl, pb, pr = pads4(pad)
    if not (pt or pl or pb or pr):
        return data
    n, h, w, c = data.shape
    return T.compute(
        (n, h + pt + pb, w + pl + pr, c),
        lambda b, y, x, ch: T.select(
            all_of(y >= pt, y < h + pt, x >= pl, x < w + pl),
            data[b, y - pt, x - pl, ch],
            pad_value,
        ),
        name=name,
        tag="pad",
    )


def conv2d_nhwc(
    data: Tensor,
    weight: Tensor,
    stride: IntOrPair = 1,
    pad: IntOrPair = 0,
    dilation: IntOrPair = 1,
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
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = pair(stride), pair(dilation), pads4(pad)
    oh = _out_size(h, kh, sh, (pt, pb), dh)
    ow = _out_size(w, kw, sw, (pl, pr), dw)
    padded = pad_nhwc(data, pad)
    ry = T.reduce_axis(kh, "ry")
    rx = T.reduce_axis(kw, "rx")
    rc = T.reduce_axis(cg, "rc")
    fpg = f // groups

    def body(b, y, x, ff):  # noqa: ANN001, ANN202
        ch = rc if groups == 1 else (ff // fpg) * cg + rc
        return T.sum(
            padded[b, y * sh + ry * dh, x * sw + rx * dw, ch] * weight[ry, rx, rc, ff],
            axis=[ry, rx, rc],
        )

    return T.compute((n, oh, ow, f), body, name=name, tag="conv2d")
