"""Normalisations over the last axis of a 2-D tensor: softmax and layer norm (several stages each)."""

from __future__ import annotations

from .. import tensor as T
from ..tensor import Tensor


def softmax(x: Tensor, name: str = "softmax") -> Tensor:
    """Numerically stable softmax over the last axis: row max, sum of ``exp(x - max)``, normalise."""
    if x.ndim != 2:
        raise ValueError(f"softmax: expected a 2-d tensor, got {x.shape}")
    m, n = x.shape
    k1 = T.reduce_axis(n, "k")
    row_max = T.compute((m,), lambda i: T.max_reduce(x[i, k1], axis=k1), name=name + "_max", tag="reduce")
    k2 = T.reduce_axis(n, "k")
    row_sum = T.compute(
        (m,), lambda i: T.sum(T.exp(x[i, k2] - row_max[i]), axis=k2), name=name + "_expsum", tag="reduce"
    )
    return T.compute(
        (m, n), lambda i, j: T.exp(x[i, j] - row_max[i]) / row_sum[i], name=name, tag="elementwise"
    )


def layernorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5, name: str = "layernorm") -> Tensor:
    """``(x - mean) * rsqrt(var + eps) * gamma + beta`` over the last axis (biased variance)."""
    if x.ndim != 2:
        raise ValueError(f"layernorm: expected a 2-d tensor, got {x.shape}")
    m, n = x.shape
    if gamma.shape != (n,) or beta.shape != (n,):
        raise ValueError(f"layernorm: gamma {gamma.shape} / beta {beta.shape} do not match {n} columns")
    inv_n = 1.0 / n
    k1 = T.reduce_axis(n, "k")
    mean = T.compute((m,), lambda i: T.sum(x[i, k1] * inv_n, axis=k1), name=name + "_mean", tag="reduce")
    k2 = T.reduce_axis(n, "k")

    def var_body(i):  # noqa: ANN001, ANN202
        d = x[i, k2] - mean[i]
        return T.sum(d * d * inv_n, axis=k2)

    var = T.compute((m,), var_body, name=name + "_var", tag="reduce")
    return T.compute(
        (m, n),
        lambda i, j: (x[i, j] - mean[i]) * T.rsqrt(var[i] + eps) * gamma[j] + beta[j],
        name=name,
        tag="elementwise",
    )
