"""Matrix products: matmul, dense (with fused epilogues), batch_matmul."""

from __future__ import annotations

from .. import tensor as T
from ..tensor import Tensor
from . import elementwise as ew


def matmul(a: Tensor, b: Tensor, name: str = "matmul") -> Tensor:
    """``C[i, j] = sum_k A[i, k] * B[k, j]``."""
    (m, ka), (kb, n) = a.shape, b.shape
    if ka != kb:
        raise ValueError(f"matmul: inner dims differ ({ka} vs {kb})")
    k = T.reduce_axis(ka, "k")
    return T.compute((m, n), lambda i, j: T.sum(a[i, k] * b[k, j], axis=k), name=name, tag="matmul")


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


def batch_matmul(a: Tensor, b: Tensor, name: str = "batch_matmul") -> Tensor:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``."""
    (ba, m, ka), (bb, kb, n) = a.shape, b.shape
    if ba != bb or ka != kb:
        raise ValueError(f"batch_matmul: shapes {a.shape} and {b.shape} do not match")
    k = T.reduce_axis(ka, "k")
    return T.compute(
        (ba, m, n), lambda z, i, j: T.sum(a[z, i, k] * b[z, k, j], axis=k), name=name, tag="matmul"
    )
