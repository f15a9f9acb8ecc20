"""Named workloads of the te layer: the dense family (``X @ W^T`` with fused bias and activation),
which has no one-node form in the graph IR. Every other named workload is a graph operator, built
through its definition (:mod:`autotune.graph.named`), so it shares its records with models."""

from __future__ import annotations

import numpy as np

from .ops import nn
from .registry import register
from .tensor import placeholder
from .workload import Workload


def _np_gelu(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    verf = np.vectorize(erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + verf(x / sqrt(2.0)))


@register("dense", ["m", "n", "k"], "Y[m,n] = X[m,k] @ W[n,k]^T")
def dense(m: int, n: int, k: int) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    fn = lambda x, w: [x @ w.T]  # noqa: E731
    return Workload("dense", [x, w], [nn.dense(x, w)], fn, baseline=fn)


@register("dense_bias", ["m", "n", "k"], "X @ W^T + bias, fused")
def dense_bias(m: int, n: int, k: int) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    bias = placeholder((n,), name="bias")
    out = nn.dense_epilogue(x, w, bias, None)
    fn = lambda x, w, b: [x @ w.T + b]  # noqa: E731
    return Workload("dense_bias", [x, w, bias], [out], fn, baseline=fn)


def _dense_act(m: int, n: int, k: int, act: str, name: str) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    bias = placeholder((n,), name="bias")
    out = nn.dense_epilogue(x, w, bias, act)

    def ref(x, w, b):  # noqa: ANN001, ANN202
        y = x @ w.T + b
        return [np.maximum(y, 0.0) if act == "relu" else _np_gelu(y)]

    fast = (lambda x, w, b: [np.maximum(x @ w.T + b, 0)]) if act == "relu" else None
    return Workload(name, [x, w, bias], [out], ref, baseline=fast)


@register("dense_bias_relu", ["m", "n", "k"], "relu(X @ W^T + bias), fused")
def dense_bias_relu(m: int, n: int, k: int) -> Workload:
    return _dense_act(m, n, k, "relu", "dense_bias_relu")


@register("dense_bias_gelu", ["m", "n", "k"], "gelu(X @ W^T + bias), fused")
def dense_bias_gelu(m: int, n: int, k: int) -> Workload:
    return _dense_act(m, n, k, "gelu", "dense_bias_gelu")
