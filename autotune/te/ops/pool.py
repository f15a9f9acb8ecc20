"""2-D pooling over NCHW tensors: max pool, average pool (padding excluded) and global average pool."""

from __future__ import annotations

import numpy as np

from .. import tensor as T
from ..tensor import Tensor
from .conv import pad_nchw


def _pool_out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    if pad < 0 or pad >= kernel:
        raise ValueError(f"pool: pad {pad} must be in [0, kernel {kernel})")
    out = (size + 2 * pad - kernel) // stride + 1
    if out <= 0:
        raise ValueError(
            f"pool: output size {out} is not positive (input {size}, kernel {kernel}, pad {pad})"
        )
    return out


def lowest(dtype: str) -> float:
    """The most negative finite value of a float dtype (the max-pool padding value)."""
    return float(np.finfo(dtype).min)


def max_pool2d_nchw(
    data: Tensor, kernel: int, stride: int = 1, pad: int = 0, name: str = "max_pool2d"
) -> Tensor:
    """``out[n, c, y, x] = max_{r, s} pad(data)[n, c, y*st + r, x*st + s]``; padding never wins.

    ``pad < kernel`` so every window holds at least one real element.
    """
    n, c, h, w = data.shape
    oh = _pool_out_size(h, kernel, stride, pad)
    ow = _pool_out_size(w, kernel, stride, pad)
    padded = pad_nchw(data, pad, pad_value=lowest(data.dtype))
    ry = T.reduce_axis(kernel, "ry")
    rx = T.reduce_axis(kernel, "rx")
    return T.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: T.max_reduce(padded[b, ch, y * stride + ry, x * stride + rx], axis=[ry, rx]),
        name=name,
        tag="pool",
    )


def avg_pool2d_nchw(
    data: Tensor, kernel: int, stride: int = 1, pad: int = 0, name: str = "avg_pool2d"
) -> Tensor:
    """Average pooling; padded elements are excluded from the count (ONNX default ``count_include_pad=0``).

    Two stages: a window sum over zero-padded data, then a division by the number of real elements
    of each window, ``(min(y*st - p + k, H) - max(y*st - p, 0)) * (same for x)``.
    """
    n, c, h, w = data.shape
    oh = _pool_out_size(h, kernel, stride, pad)
    ow = _pool_out_size(w, kernel, stride, pad)
    padded = pad_nchw(data, pad)
    ry = T.reduce_axis(kernel, "ry")
    rx = T.reduce_axis(kernel, "rx")
    total = T.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: T.sum(padded[b, ch, y * stride + ry, x * stride + rx], axis=[ry, rx]),
        name=name + "_sum",
        tag="pool",
    )
    if pad == 0:
        inv = 1.0 / (kernel * kernel)
        return T.compute(
            (n, c, oh, ow), lambda b, ch, y, x: total[b, ch, y, x] * inv, name=name, tag="elementwise"
        )

    def extent(i, size):  # noqa: ANN001, ANN202 - real elements of the window starting at i*st - pad
        return T.min(i * stride - pad + kernel, size) - T.max(i * stride - pad, 0)

    return T.compute(
        (n, c, oh, ow),
        lambda b, ch, y, x: total[b, ch, y, x] / T.cast(data.dtype, extent(y, h) * extent(x, w)),
        name=name,
        tag="elementwise",
    )


def global_avg_pool2d_nchw(data: Tensor, name: str = "global_avg_pool2d") -> Tensor:
    """``out[n, c, 0, 0] = mean_{y, x} data[n, c, y, x]`` (sum, then a scale)."""
    n, c, h, w = data.shape
    ry = T.reduce_axis(h, "ry")
    rx = T.reduce_axis(w, "rx")
    total = T.compute(
        (n, c, 1, 1),
        lambda b, ch, y, x: T.sum(data[b, ch, ry, rx], axis=[ry, rx]),
        name=name + "_sum",
        tag="pool",
    )
    inv = 1.0 / (h * w)
    return T.compute((n, c, 1, 1), lambda b, ch, y, x: total[b, ch, y, x] * inv, name=name, tag="elementwise")
