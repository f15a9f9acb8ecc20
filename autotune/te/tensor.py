"""Tensors, placeholders, ``compute`` and reductions."""

from __future__ import annotations

import inspect
import math
from typing import Callable, Sequence

from .expr import (
    FLOAT_DTYPES,
    Binary,
    Call,
    Cast,
    Expr,
    IterVar,
    Reduce,
    Select,
    TensorRead,
    as_expr,
    binary,
    const,
    int_range,
)


class Tensor:
    """A multi-dimensional array: a placeholder (input) or the result of ``compute``."""

    def __init__(
        self,
        shape: Sequence[int],
        dtype: str,
        name: str,
        axes: Sequence[IterVar] = (),
        body: Expr | None = None,
        tag: str = "",
    ) -> None:
        self.shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in self.shape):
            raise ValueError(f"tensor {name} has a non-positive dimension: {self.shape}")
        self.dtype = dtype
        self.name = name
        self.axes = tuple(axes)
        self.body = body
        self.tag = tag

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def inputs(self) -> list[Tensor]:
        """Tensors read by this tensor's body, in first-use order."""
        from .expr import distinct_nodes

        seen: list[Tensor] = []
        if self.body is not None:
            for node in distinct_nodes(self.body):
                if isinstance(node, TensorRead) and node.tensor not in seen:
                    seen.append(node.tensor)
        return seen

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __getitem__(self, indices: object) -> Expr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise IndexError(f"{self.name} has {len(self.shape)} dims, indexed with {len(indices)}")
        return TensorRead(self, [as_expr(i) for i in indices])

    def __repr__(self) -> str:
        kind = "placeholder" if self.is_placeholder else "compute"
        return f"Tensor({self.name}, {self.shape}, {self.dtype}, {kind})"

    __hash__ = object.__hash__


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "input") -> Tensor:
    """An input tensor."""
    return Tensor(shape, dtype, name)


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., object],
    name: str = "compute",
    tag: str = "",
) -> Tensor:
    """A tensor whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``."""
    params = list(inspect.signature(fcompute).parameters)
    if len(params) != len(shape):
        raise ValueError(f"{name}: fcompute takes {len(params)} indices for a {len(shape)}-d shape")
    axes = [IterVar(p, s) for p, s in zip(params, shape)]
    body = as_expr(fcompute(*[a.var for a in axes]))
    if isinstance(body, Reduce):
        _check_reduce_nesting(body.body)
    else:
        _check_reduce_nesting(body)
    return Tensor(shape, body.dtype, name, axes, body, tag)


def _check_reduce_nesting(e: Expr) -> None:
    from .expr import distinct_nodes

    for node in distinct_nodes(e):
        if isinstance(node, Reduce):
            raise ValueError("a reduction must be the whole body of a compute, not nested in it")


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    return IterVar(name, extent, "reduce")


def _reducer(combiner: str):
    def reduce(body: object, axis: IterVar | Sequence[IterVar]) -> Expr:
        axes = [axis] if isinstance(axis, IterVar) else list(axis)
        if not axes or any(a.kind != "reduce" for a in axes):
            raise ValueError(f"{combiner} needs reduce axes (te.reduce_axis)")
        return Reduce(combiner, as_expr(body), axes)

    reduce.__name__ = combiner
    reduce.__doc__ = f"``{combiner}`` reduction of ``body`` over the given reduce axes."
    return reduce


sum = _reducer("sum")  # noqa: A001 - the natural name in this language
max_reduce = _reducer("max")
min_reduce = _reducer("min")


def reduce_identity(combiner: str, dtype: str) -> Expr:
    if combiner == "sum":
        return const(0, dtype)
    if dtype in FLOAT_DTYPES:
        return const(-math.inf if combiner == "max" else math.inf, dtype)
    lo, hi = int_range(dtype)
    return const(lo if combiner == "max" else hi, dtype)


# --- elementwise math -------------------------------------------------------------------------
def _unary(name: str):
    def fn(x: object) -> Expr:
        e = as_expr(x)
        if e.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} needs a float operand")
        return Call(name, [e], e.dtype)

    fn.__name__ = name
    return fn


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
fabs = _unary("fabs")
floor = _unary("floor")
ceil = _unary("ceil")
nearbyint = _unary("nearbyint")  # round half to even (the default rounding mode)
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")
log1p = _unary("log1p")


def max(a: object, b: object) -> Expr:  # noqa: A001
    return binary("max", a, b)


def min(a: object, b: object) -> Expr:  # noqa: A001
    return binary("min", a, b)


def power(a: object, b: object) -> Expr:
    return binary("pow", a, b)


def select(cond: Expr, t: object, f: object) -> Expr:
    """``t`` where ``cond`` holds, else ``f``."""
    et = as_expr(t) if isinstance(t, Expr) or not isinstance(f, Expr) else as_expr(t, f.dtype)
    ef = as_expr(f, et.dtype)
    if et.dtype != ef.dtype:
        raise TypeError(f"select branches differ in dtype: {et.dtype} vs {ef.dtype}")
    return Select(as_expr(cond), et, ef)


where = select


def cast(dtype: str, x: object) -> Expr:
    e = as_expr(x)
    return e if e.dtype == dtype else Cast(dtype, e)


__all__ = [
    "Binary",
    "Tensor",
    "placeholder",
    "compute",
    "reduce_axis",
    "sum",
    "max_reduce",
    "min_reduce",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "fabs",
    "floor",
    "ceil",
    "nearbyint",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "log1p",
    "max",
    "min",
    "power",
    "select",
    "where",
    "cast",
    "Select",
]
