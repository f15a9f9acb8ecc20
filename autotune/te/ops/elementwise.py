"""Elementwise expressions shared by every workload that uses them: the GELU (and its erf) that both
the graph's Gelu operator and the fused dense + GELU workload compute, bias add and ReLU stages."""

from __future__ import annotations

import math
from typing import Sequence

from .. import tensor as T
from ..expr import Expr, as_expr
from ..tensor import Tensor

# erf(x) ~= x * P(x^2) / Q(x^2) on x clamped to +-3.92 (where erf is 1 to float32 precision):
# a rational fit made for this compiler (iteratively reweighted least squares against math.erf),
# max abs error 3.2e-7 evaluated in float32. Unlike the libm call it is plain arithmetic (add, mul,
# div, min, max), so the vectorizer turns a GELU epilogue into vector code.
ERF_CLAMP = 3.92
ERF_P = (
    1.1283791505652283,
    0.18524740107618864,
    0.05215095024488755,
    0.003568581127612459,
    0.0002846817420582848,
    2.144723905778134e-06,
)
ERF_Q = (
    1.0,
    0.49750425950635646,
    0.11205386523138361,
    0.014569769532586905,
    0.0011227262393114796,
    3.9062595769322195e-05,
)


def horner(t: Expr, coeffs: Sequence[float]) -> Expr:
    out: Expr = as_expr(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * t + c
    return out


def erf_expr(v: Expr) -> Expr:
    """erf as a clamped rational function (see ERF_P / ERF_Q)."""
    x = T.min(T.max(v, -ERF_CLAMP), ERF_CLAMP)
    t = x * x
    return x * horner(t, ERF_P) / horner(t, ERF_Q)


def gelu_expr(v: Expr, approximate: str = "none") -> Expr:
    """GELU: exact (erf, through :func:`erf_expr`) or the tanh approximation."""
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * v * (1.0 + T.tanh(c * (v + 0.044715 * (v * v * v))))
    return 0.5 * v * (1.0 + erf_expr(v * (1.0 / math.sqrt(2.0))))


def relu_expr(x: Expr) -> Expr:
    return T.max(x, 0.0)


def map_tensor(x: Tensor, fn, name: str) -> Tensor:  # noqa: ANN001 - fn: Expr -> Expr
    """Apply an elementwise function to every element of ``x``."""
    return T.compute(x.shape, _indexer(x, fn), name=name, tag="elementwise")


def _indexer(x: Tensor, fn):  # noqa: ANN001, ANN202
    # compute() reads the parameter names of fcompute, so build one with the right arity
    names = [f"i{d}" for d in range(x.ndim)]
    src = f"lambda {', '.join(names)}: fn(x[{', '.join(names)}])"
    return eval(src, {"fn": fn, "x": x})  # noqa: S307 - generated from integers only


def relu(x: Tensor, name: str = "relu") -> Tensor:
    return map_tensor(x, relu_expr, name)


def gelu(x: Tensor, name: str = "gelu") -> Tensor:
    return map_tensor(x, gelu_expr, name)


def bias_add(x: Tensor, bias: Tensor, axis: int = -1, name: str = "bias_add") -> Tensor:
    """``x + bias`` with ``bias`` broadcast along ``axis``."""
    axis = axis % x.ndim
    if bias.shape != (x.shape[axis],):
        raise ValueError(f"bias_add: bias shape {bias.shape} does not match axis {axis} of {x.shape}")
    names = [f"i{d}" for d in range(x.ndim)]
    idx = ", ".join(names)
    fcompute = eval(f"lambda {idx}: x[{idx}] + b[{names[axis]}]", {"x": x, "b": bias})  # noqa: S307
    return T.compute(x.shape, fcompute, name=name, tag="elementwise")
