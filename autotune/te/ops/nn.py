"""Dense (``X @ W^T``, weights stored out-features first) with its fused bias / activation epilogue."""

from __future__ import annotations

from .. import tensor as T
from ..tensor import Tensor
from . import elementwise as ew


def dense(x: Tensor, w: Tensor, name: str = "dense") -> Tensor:
    """``Y[i, j] = sum_k X[i, k] * W[j, k]`` (weights stored out-features first)."""
    (m, kx), (n, kw) = x.shape, w.shape
    if kx != kw:
        raise ValueError(f"dense: inner dims differ ({kx} vs {kw})")
    k = T.reduce_axis(kx, "k")
    return T.compute((m, n), lambda i, j: T.sum(x[i, k] * w[j, k], axis=k), name=name, tag="dense")


def dense_epilogue(x: Tensor, w: Tensor, bias: Tensor | None, activation: str | None) -> Tensor:
    """dense, then an optional bias and activation, each a separate (fusable) stage."""
    y = dense(x, w)
    if bias is not None:
        y = ew.bias_add(y, bias, axis=1)
    if activation == "relu":
        y = ew.relu(y)
    elif activation == "gelu":
        y = ew.gelu(y)
    elif activation is not None:
        raise ValueError(f"unknown activation {activation!r}")
    return y
