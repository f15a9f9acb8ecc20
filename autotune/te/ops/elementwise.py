"""Elementwise (injective) operators, written as functions of a tensor so they can be fused."""

from __future__ import annotations

import math

from .. import tensor as T
from ..expr import Expr
from ..tensor import Tensor


def relu_expr(x: Expr) -> Expr:
    return T.max(x, 0.0)


def gelu_expr(x: Expr) -> Expr:
    """Exact (erf) GELU."""
    return 0.5 * x * (1.0 + T.erf(x * (1.0 / math.sqrt(2.0))))


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


def sigmoid(x: Tensor, name: str = "sigmoid") -> Tensor:
    return map_tensor(x, T.sigmoid, name)


def tanh(x: Tensor, name: str = "tanh") -> Tensor:
    return map_tensor(x, T.tanh, name)


def _binary(a: Tensor, b: Tensor, op, name: str) -> Tensor:  # noqa: ANN001
    if a.shape != b.shape:
        raise ValueError(f"{name}: shapes differ {a.shape} vs {b.shape}")
    names = [f"i{d}" for d in range(a.ndim)]
    idx = ", ".join(names)
    fcompute = eval(f"lambda {idx}: op(a[{idx}], b[{idx}])", {"op": op, "a": a, "b": b})  # noqa: S307
    return T.compute(a.shape, fcompute, name=name, tag="elementwise")


def add(a: Tensor, b: Tensor, name: str = "add") -> Tensor:
    return _binary(a, b, lambda x, y: x + y, name)


def mul(a: Tensor, b: Tensor, name: str = "mul") -> Tensor:
    return _binary(a, b, lambda x, y: x * y, name)


def bias_add(x: Tensor, bias: Tensor, axis: int = -1, name: str = "bias_add") -> Tensor:
    """``x + bias`` with ``bias`` broadcast along ``axis``."""
    axis = axis % x.ndim
    if bias.shape != (x.shape[axis],):
        raise ValueError(f"bias_add: bias shape {bias.shape} does not match axis {axis} of {x.shape}")
    names = [f"i{d}" for d in range(x.ndim)]
    idx = ", ".join(names)
    fcompute = eval(f"lambda {idx}: x[{idx}] + b[{names[axis]}]", {"x": x, "b": bias})  # noqa: S307
    return T.compute(x.shape, fcompute, name=name, tag="elementwise")


def bias_add_relu(x: Tensor, bias: Tensor, axis: int = -1) -> Tensor:
    """``relu(x + bias)``: two fusable stages."""
    return relu(bias_add(x, bias, axis))


def add_relu_mul(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``relu(a + b) * c``: a chain of three fusable stages."""
    return mul(relu(add(a, b)), c, name="add_relu_mul")
