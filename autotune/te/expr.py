"""Expression nodes of the tensor-expression language.

Expressions are immutable trees. Arithmetic operators build new nodes; ``==`` keeps Python's identity
semantics so nodes stay hashable (use :func:`equal` for an equality expression).
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# storage-only float types: computed on as float32 (te.cast), never as themselves
LOW_PRECISION_DTYPES = ("float16", "bfloat16")
INT_DTYPES = ("int32", "int64")  # index arithmetic (the simplifier's linear forms) and tensor values
# the other integer tensor values (never index arithmetic); C computes the 8- and 16-bit ones in int,
# so the code generators wrap each result back to its type, as numpy's arithmetic does
NARROW_INT_DTYPES = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
# ONNX's sub-byte integers, one byte per element (ml_dtypes' layout: the value's low 2 or 4 bits of
# two's complement, upper bits zero); storage-only: read and written through te.cast, never computed on
SUB_BYTE_DTYPES = ("int4", "uint4", "int2", "uint2")


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer (or bool) dtype."""
    if dtype == "bool":
        return 0, 1
    bits = int(dtype.removeprefix("u").removeprefix("int"))
    return (0, (1 << bits) - 1) if dtype.startswith("u") else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


_counter = itertools.count()


class Expr:
    """Base class of every expression node."""

    __slots__ = ()
    dtype: str

    # --- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        return binary("add", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary("add", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary("sub", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary("sub", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary("mul", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary("mul", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary("div", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary("div", other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binary("mod", self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binary("mod", other, self)

    def __neg__(self) -> Expr:
        return binary("sub", const(0, self.dtype), self)

    # --- comparisons (return boolean expressions) --------------------------------------------
    def __lt__(self, other: ExprLike) -> Expr:
        return compare("lt", self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return compare("le", self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return compare("lt", other, self)

    def __ge__(self, other: ExprLike) -> Expr:
        return compare("le", other, self)

    def __bool__(self) -> bool:
        raise TypeError("a symbolic expression has no truth value; use te.select / te.all_of")

    __hash__ = object.__hash__


ExprLike = "Expr | int | float"


class IntImm(Expr):
    __slots__ = ("value", "dtype")

    def __init__(self, value: int, dtype: str = "int32") -> None:
        self.value = int(value)
        self.dtype = dtype

    def __repr__(self) -> str:
        return str(self.value)


class FloatImm(Expr):
    __slots__ = ("value", "dtype")

    def __init__(self, value: float, dtype: str = "float32") -> None:
        self.value = float(value)
        self.dtype = dtype

    def __repr__(self) -> str:
        return repr(self.value)


class Var(Expr):
    """A scalar integer variable (loop index or axis)."""

    __slots__ = ("name", "dtype", "uid")

    def __init__(self, name: str, dtype: str = "int32") -> None:
        self.name = name
        self.dtype = dtype
        self.uid = next(_counter)

    def __repr__(self) -> str:
        return self.name


BIT_OPS = ("bitand", "bitor", "bitxor", "shl", "shr")  # on integers only


class Binary(Expr):
    """Arithmetic: add sub mul div floordiv mod min max pow; bitwise (``BIT_OPS``)."""

    __slots__ = ("op", "a", "b", "dtype")

    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        self.op, self.a, self.b = op, a, b
        self.dtype = a.dtype

    def __repr__(self) -> str:
        sym = _SYMBOLS.get(self.op)
        if sym:
            return f"({self.a!r} {sym} {self.b!r})"
        return f"{self.op}({self.a!r}, {self.b!r})"


class Compare(Expr):
    """Comparison or logic: lt le eq ne and or."""

    __slots__ = ("op", "a", "b", "dtype")

    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        self.op, self.a, self.b = op, a, b
        self.dtype = "bool"

    def __repr__(self) -> str:
        return f"({self.a!r} {_SYMBOLS[self.op]} {self.b!r})"


class Not(Expr):
    __slots__ = ("a", "dtype")

    def __init__(self, a: Expr) -> None:
        self.a = a
        self.dtype = "bool"

    def __repr__(self) -> str:
        return f"!{self.a!r}"


class Call(Expr):
    """A pure math function applied elementwise: exp, log, sqrt, rsqrt, tanh, sigmoid, erf, abs."""

    __slots__ = ("name", "args", "dtype")

    def __init__(self, name: str, args: Sequence[Expr], dtype: str) -> None:
        self.name, self.args, self.dtype = name, tuple(args), dtype

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.args))})"


class Select(Expr):
    __slots__ = ("cond", "t", "f", "dtype")

    def __init__(self, cond: Expr, t: Expr, f: Expr) -> None:
        self.cond, self.t, self.f = cond, t, f
        self.dtype = t.dtype

    def __repr__(self) -> str:
        return f"select({self.cond!r}, {self.t!r}, {self.f!r})"


class Cast(Expr):
    __slots__ = ("value", "dtype")

    def __init__(self, dtype: str, value: Expr) -> None:
        self.value, self.dtype = value, dtype

    def __repr__(self) -> str:
        return f"{self.dtype}({self.value!r})"


class TensorRead(Expr):
    """Reading one element of a tensor (``A[i, j]``)."""

    __slots__ = ("tensor", "indices", "dtype")

    def __init__(self, tensor, indices: Sequence[Expr]) -> None:  # noqa: ANN001 - Tensor (cycle)
        self.tensor = tensor
        self.indices = tuple(indices)
        self.dtype = tensor.dtype

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


class IterVar:
    """An axis of a computation: a variable ranging over ``[0, extent)``."""

    __slots__ = ("var", "extent", "kind")

    def __init__(self, name: str, extent: int, kind: str = "spatial") -> None:
        if extent <= 0:
            raise ValueError(f"axis {name} must have a positive extent, got {extent}")
        self.var = Var(name)
        self.extent = int(extent)
        self.kind = kind  # "spatial" or "reduce"

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}, {self.kind})"

    # let an IterVar be used directly inside index arithmetic
    def __add__(self, o: ExprLike) -> Expr:
        return self.var + o

    def __radd__(self, o: ExprLike) -> Expr:
        return o + self.var

    def __sub__(self, o: ExprLike) -> Expr:
        return self.var - o

    def __rsub__(self, o: ExprLike) -> Expr:
        return o - self.var

    def __mul__(self, o: ExprLike) -> Expr:
        return self.var * o

    def __rmul__(self, o: ExprLike) -> Expr:
        return o * self.var

    def __floordiv__(self, o: ExprLike) -> Expr:
        return self.var // o

    def __mod__(self, o: ExprLike) -> Expr:
        return self.var % o

    def __lt__(self, o: ExprLike) -> Expr:
        return self.var < o

    def __le__(self, o: ExprLike) -> Expr:
        return self.var <= o

    def __gt__(self, o: ExprLike) -> Expr:
        return self.var > o

    def __ge__(self, o: ExprLike) -> Expr:
        return self.var >= o


class Reduce(Expr):
    """A commutative reduction (sum / max / min) of ``body`` over reduce axes."""

    __slots__ = ("combiner", "body", "axes", "dtype")

    def __init__(self, combiner: str, body: Expr, axes: Sequence[IterVar]) -> None:
        self.combiner, self.body, self.axes = combiner, body, tuple(axes)
        self.dtype = body.dtype

    def __repr__(self) -> str:
        return f"{self.combiner}({self.body!r}, axis=[{', '.join(a.name for a in self.axes)}])"


_SYMBOLS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "shl": "<<",
    "shr": ">>",
    "lt": "<",
    "le": "<=",
    "eq": "==",
    "ne": "!=",
    "and": "&&",
    "or": "||",
}


def as_expr(value: object, dtype: str | None = None) -> Expr:
    """Turn a Python number, IterVar or Expr into an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        if dtype in FLOAT_DTYPES:
            return FloatImm(value, dtype)
        return IntImm(value, dtype or "int32")
    if isinstance(value, float):
        return FloatImm(value, dtype if dtype in FLOAT_DTYPES else "float32")
    raise TypeError(f"cannot use {type(value).__name__} as an expression")


def const(value: float | int, dtype: str) -> Expr:
    return FloatImm(value, dtype) if dtype in FLOAT_DTYPES else IntImm(int(value), dtype)


def _coerce_pair(a: object, b: object) -> tuple[Expr, Expr]:
    if isinstance(a, (Expr, IterVar)):
        ea = as_expr(a)
        eb = as_expr(b, ea.dtype)
    else:
        eb = as_expr(b)
        ea = as_expr(a, eb.dtype)
    if ea.dtype != eb.dtype:
        if "bool" in (ea.dtype, eb.dtype):
            return ea, eb
        raise TypeError(f"dtype mismatch: {ea!r} is {ea.dtype}, {eb!r} is {eb.dtype}; use te.cast")
    return ea, eb


def binary(op: str, a: object, b: object) -> Expr:
    ea, eb = _coerce_pair(a, b)
    if ea.dtype in SUB_BYTE_DTYPES:
        raise TypeError(f"{ea.dtype} is storage-only: te.cast it before {op}")
    if op in ("floordiv", "mod", *BIT_OPS) and ea.dtype in FLOAT_DTYPES:
        raise TypeError(f"{op} needs integer operands")
    if op == "div" and ea.dtype in INT_DTYPES + NARROW_INT_DTYPES:
        raise TypeError("'/' on integers is ambiguous; use '//' for floor division")
    return Binary(op, ea, eb)


def compare(op: str, a: object, b: object) -> Expr:
    ea, eb = _coerce_pair(a, b)
    return Compare(op, ea, eb)


def equal(a: object, b: object) -> Expr:
    return compare("eq", a, b)


def not_equal(a: object, b: object) -> Expr:
    return compare("ne", a, b)


def all_of(*conds: Expr) -> Expr:
    """Logical and of boolean expressions."""
    out = conds[0]
    for c in conds[1:]:
        out = Compare("and", out, c)
    return out


def any_of(*conds: Expr) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Compare("or", out, c)
    return out


def children(e: Expr) -> Iterable[Expr]:
    """Direct sub-expressions of a node (reduce axes are not expressions)."""
    if isinstance(e, (Binary, Compare)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, TensorRead):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def walk(e: Expr) -> Iterable[Expr]:
    """All nodes of an expression tree, pre-order."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(tuple(children(node))))


def distinct_nodes(e: Expr) -> Iterable[Expr]:
    """The nodes of an expression, pre-order, each node object once: a subexpression that several
    parents share (an inlined epilogue reads its input many times) is not walked again."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            yield node
            stack.extend(reversed(tuple(children(node))))


def rebuild(e: Expr, kids: Sequence[Expr]) -> Expr:
    """A copy of ``e`` with new children (same order as :func:`children`)."""
    if isinstance(e, Binary):
        return Binary(e.op, kids[0], kids[1])
    if isinstance(e, Compare):
        return Compare(e.op, kids[0], kids[1])
    if isinstance(e, Not):
        return Not(kids[0])
    if isinstance(e, Call):
        return Call(e.name, kids, e.dtype)
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2])
    if isinstance(e, Cast):
        return Cast(e.dtype, kids[0])
    if isinstance(e, TensorRead):
        return TensorRead(e.tensor, kids)
    if isinstance(e, Reduce):
        return Reduce(e.combiner, kids[0], e.axes)
    return e


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions. A subexpression shared by several parents (an expanded
    epilogue reads its input many times) is rewritten once, and the result shares it too."""
    done: dict[int, Expr] = {}

    def visit(x: Expr) -> Expr:
        if isinstance(x, Var):
            return mapping.get(x, x)
        out = done.get(id(x))
        if out is None:
            kids = tuple(children(x))
            new = tuple(visit(k) for k in kids)
            out = x if all(n is k for n, k in zip(new, kids)) else rebuild(x, new)
            done[id(x)] = out
        return out

    return visit(e)


def free_vars(e: Expr) -> set[Var]:
    return {n for n in distinct_nodes(e) if isinstance(n, Var)}
