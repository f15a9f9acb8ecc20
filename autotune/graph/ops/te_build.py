"""Helpers the operator definitions build tensor expressions with: n-d computes, broadcast reads,
typed scalar operands and reductions over a set of axes."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, FloatImm, as_expr, const

from ..ir import GraphError
from .base import Arg


def nd_compute(
    shape: Sequence[int], fn: Callable[[list[Expr]], Expr], name: str, tag: str = "", axes: Sequence[str] = ()
) -> te.Tensor:
    """``te.compute`` over an n-d shape with the body written against a list of index variables
    (named ``axes``, default ``i0, i1, ...``: the schedule's knobs are named after them)."""
    names = list(axes) or [f"i{d}" for d in range(len(shape))]
    lam = eval(f"lambda {', '.join(names)}: fn([{', '.join(names)}])", {"fn": fn})  # noqa: S307
    return T.compute(tuple(shape), lam, name=name, tag=tag)


def tensor_arg(x: Arg, what: str = "operand") -> te.Tensor:
    """``x`` as a te tensor (GraphError for a scalar or a missing operand)."""
    if not isinstance(x, te.Tensor):
        raise GraphError(f"{what} must be a tensor computed at run time")
    return x


def arg_dtype(x: Arg, default: str = "float32") -> str:
    """The element type of an operand (a scalar folded from a typed constant keeps its type)."""
    if isinstance(x, te.Tensor):
        return x.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return str(x.dtype)
    return default


def scalar_expr(x: Any, dtype: str) -> Expr:
    """A folded scalar operand as an expression of ``dtype``."""
    v = np.asarray(x).reshape(-1)[0].item()
    if dtype == "bool":
        return as_expr(bool(v))
    return const(v, dtype)


def read(x: Arg, idx: Sequence[Expr], out_shape: Sequence[int], dtype: str = "float32") -> Expr:
    """Element of ``x`` at output index ``idx`` under numpy broadcasting (right-aligned); a scalar
    operand becomes a constant of its own type, or of ``dtype`` when it has none."""
    if x is None:
        raise GraphError("missing operand")
    if not isinstance(x, te.Tensor):
        return scalar_expr(x, arg_dtype(x, dtype))
    off = len(out_shape) - x.ndim
    return x[tuple(0 if x.shape[d] == 1 else idx[off + d] for d in range(x.ndim))]


def shape_of(x: Arg) -> tuple[int, ...]:
    return x.shape if isinstance(x, te.Tensor) else ()


def reduce_over(
    x: te.Tensor,
    axes: Sequence[int],
    combiner: Callable,
    body: Callable[[list[Expr]], Expr],
    name: str,
    keepdims: bool = False,
) -> te.Tensor:
    """A reduction over ``axes`` of ``body(full index)``; the reduced dims are dropped (or kept as 1)."""
    keep = [d for d in range(x.ndim) if d not in axes]
    raxes = [T.reduce_axis(x.shape[d], f"r{d}") for d in axes]

    def fn(idx: list[Expr]) -> Expr:
        full: list[Any] = [None] * x.ndim
        if keepdims:
            for d in keep:
                full[d] = idx[d]
        else:
            for d, v in zip(keep, idx):
                full[d] = v
        for d, r in zip(axes, raxes):
            full[d] = r.var
        return combiner(body(full), axis=raxes)

    shape = (
        tuple(1 if d in axes else x.shape[d] for d in range(x.ndim))
        if keepdims
        else tuple(x.shape[d] for d in keep)
    )
    return nd_compute(shape, fn, name, "reduce")


def drop(idx: Sequence[Expr], axes: Sequence[int]) -> tuple:
    """The index of a reduced value (``axes`` dropped) at a full index."""
    return tuple(v for d, v in enumerate(idx) if d not in axes)


def pow_expr(a: Expr, b: Expr) -> Expr:
    """``a ** b``, as multiplications / a square root for the common constant exponents."""
    if isinstance(b, FloatImm):
        e = b.value
        if e == 1.0:
            return a
        if e == 2.0:
            return a * a
        if e == 3.0:
            return a * a * a
        if e == 0.5:
            return T.sqrt(a)
    return T.power(a, b)
