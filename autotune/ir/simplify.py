"""Integer simplifier: linear canonical forms, constant folding, range-aware div/mod/compare.

Index expressions are put in the form ``sum(coeff * atom) + const`` where an atom is a variable or a
non-linear sub-expression (a div, a mod, a load ...). With the ranges of loop variables known, floor
division and modulo by constants fold away when the bounds allow, and guards that always hold vanish.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..te.expr import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Binary,
    Compare,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    TensorRead,
    Var,
    children,
    rebuild,
)
from .nodes import Load

Ranges = Dict[Var, Tuple[int, int]]  # inclusive bounds
Bounds = Optional[Tuple[int, int]]
TRUE = IntImm(1, "bool")
FALSE = IntImm(0, "bool")


def expr_key(e: Expr) -> tuple:
    """A structural key of an expression (variables by identity)."""
    if isinstance(e, Var):
        return ("v", e.uid)
    if isinstance(e, IntImm):
        return ("i", e.value)
    if isinstance(e, FloatImm):
        return ("f", e.value)
    if isinstance(e, Load):
        return ("ld", id(e.buffer), expr_key(e.index))
    if isinstance(e, TensorRead):
        return ("rd", id(e.tensor)) + tuple(expr_key(i) for i in e.indices)
    head = (type(e).__name__, getattr(e, "op", None), getattr(e, "name", None))
    return head + tuple(expr_key(c) for c in children(e))


class Linear:
    """``sum(coeff * atom) + const`` over integer atoms."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0) -> None:
        self.terms: dict[tuple, tuple[Expr, int]] = dict(terms or {})
        self.const = const

    def add(self, other: Linear, scale: int = 1) -> Linear:
        out = Linear(self.terms, self.const + scale * other.const)
        for k, (atom, c) in other.terms.items():
            prev = out.terms.get(k, (atom, 0))[1]
            if prev + scale * c:
                out.terms[k] = (atom, prev + scale * c)
            else:
                out.terms.pop(k, None)
        return out

    def scale(self, s: int) -> Linear:
        if s == 0:
            return Linear()
        return Linear({k: (a, c * s) for k, (a, c) in self.terms.items()}, self.const * s)

    def is_const(self) -> bool:
        return not self.terms

    def merge_divmod(self) -> Linear:
        """Rewrite ``c*d*(x // d) + c*(x % d)`` as ``c*x`` (undoes a fuse followed by a split)."""
        out = Linear(self.terms, self.const)
        for key, (atom, k) in list(self.terms.items()):
            if key not in out.terms or not (isinstance(atom, Binary) and atom.op == "floordiv"):
                continue
            if not isinstance(atom.b, IntImm) or k % atom.b.value:
                continue
            d = atom.b.value
            mod_key = expr_key(Binary("mod", atom.a, atom.b))
            if mod_key in out.terms and out.terms[mod_key][1] * d == k:
                c = k // d
                del out.terms[key], out.terms[mod_key]
                out = out.add(linear(atom.a, {}).scale(c))
        return out

    def to_expr(self) -> Expr:
        pos = [(a, c) for a, c in self.terms.values() if c > 0]
        neg = [(a, -c) for a, c in self.terms.values() if c < 0]
        out: Expr | None = None
        for a, c in pos:
            t = a if c == 1 else Binary("mul", a, IntImm(c))
            out = t if out is None else Binary("add", out, t)
        for a, c in neg:
            t = a if c == 1 else Binary("mul", a, IntImm(c))
            out = Binary("sub", IntImm(0) if out is None else out, t)
        if out is None:
            return IntImm(self.const)
        if self.const > 0:
            out = Binary("add", out, IntImm(self.const))
        elif self.const < 0:
            out = Binary("sub", out, IntImm(-self.const))
        return out


def _atom(e: Expr) -> Linear:
    return Linear({expr_key(e): (e, 1)})


def linear(e: Expr, ranges: Ranges) -> Linear:
    """Canonical linear form of an integer expression (sub-expressions simplified)."""
    if isinstance(e, IntImm):
        return Linear(const=e.value)
    if isinstance(e, Binary) and e.dtype in INT_DTYPES:
        if e.op in ("add", "sub"):
            return linear(e.a, ranges).add(linear(e.b, ranges), 1 if e.op == "add" else -1)
        if e.op == "mul":
            la, lb = linear(e.a, ranges), linear(e.b, ranges)
            if la.is_const():
                return lb.scale(la.const)
            if lb.is_const():
                return la.scale(lb.const)
            return _atom(Binary("mul", la.to_expr(), lb.to_expr()))
        if e.op in ("floordiv", "mod"):
            return _divmod(e.op, linear(e.a, ranges), linear(e.b, ranges), ranges)
        if e.op in ("min", "max"):
            a, b = simplify(e.a, ranges), simplify(e.b, ranges)
            ba, bb = bounds(a, ranges), bounds(b, ranges)
            if ba and bb:
                if (e.op == "min" and ba[1] <= bb[0]) or (e.op == "max" and ba[0] >= bb[1]):
                    return linear(a, ranges)
                if (e.op == "min" and bb[1] <= ba[0]) or (e.op == "max" and bb[0] >= ba[1]):
                    return linear(b, ranges)
            if isinstance(a, IntImm) and isinstance(b, IntImm):
                return Linear(const=min(a.value, b.value) if e.op == "min" else max(a.value, b.value))
            return _atom(Binary(e.op, a, b))
    if isinstance(e, Var):
        return _atom(e)
    return _atom(_simplify_generic(e, ranges))


def _divmod(op: str, num: Linear, den: Linear, ranges: Ranges) -> Linear:
    if not den.is_const() or den.const <= 0:
        return _atom(Binary(op, num.to_expr(), den.to_expr()))
    d = den.const
    if d == 1:
        return num if op == "floordiv" else Linear()
    # split num into a part divisible by d and a remainder
    whole = Linear(const=(num.const // d) * d)
    rest = Linear(const=num.const - whole.const)
    for k, (a, c) in num.terms.items():
        target = whole if c % d == 0 else rest
        target.terms[k] = (a, c)
    rb = bounds(rest.to_expr(), ranges)
    if rb is not None and rb[0] >= 0 and rb[1] < d:
        if op == "mod":
            return rest
        return Linear({k: (a, c // d) for k, (a, c) in whole.terms.items()}, whole.const // d)
    # (A*g + r) // d == (A*g) // d and (A*g + r) % d == (A*g) % d + r when g | d and 0 <= r < g
    for g in sorted((x for x in range(2, d) if d % x == 0), reverse=True):
        big = Linear(const=(rest.const // g) * g)
        small = Linear(const=rest.const - big.const)
        for k, (a, c) in rest.terms.items():
            (big if c % g == 0 else small).terms[k] = (a, c)
        if not big.terms or not small.terms and small.const == 0:
            continue
        sb = bounds(small.to_expr(), ranges)
        if sb is None or sb[0] < 0 or sb[1] >= g:
            continue
        inner = _divmod(op, big, den, ranges)
        if op == "mod":
            return inner.add(small)
        return Linear({k: (a, c // d) for k, (a, c) in whole.terms.items()}, whole.const // d).add(inner)
    nb = bounds(num.to_expr(), ranges)
    if nb is not None and nb[0] >= 0 and nb[1] < d:
        return Linear() if op == "floordiv" else num
    from math import gcd

    common = d
    for _, c in num.terms.values():
        common = gcd(common, c)
    common = gcd(common, num.const)
    if common > 1 and op == "floordiv":
        reduced = Linear({k: (a, c // common) for k, (a, c) in num.terms.items()}, num.const // common)
        return _atom(Binary(op, reduced.to_expr(), IntImm(d // common)))
    return _atom(Binary(op, num.to_expr(), IntImm(d)))


def bounds(e: Expr, ranges: Ranges) -> Bounds:
    """Inclusive integer bounds of ``e`` given variable ranges, or None when unknown."""
    if isinstance(e, IntImm):
        return (e.value, e.value)
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Binary) and e.dtype in INT_DTYPES:
        ba, bb = bounds(e.a, ranges), bounds(e.b, ranges)
        if e.op == "mod" and isinstance(e.b, IntImm) and e.b.value > 0:
            if ba is not None and ba[0] >= 0 and ba[1] < e.b.value:
                return ba
            # x % d for x a multiple of g is a multiple of gcd(g, d): at most d - gcd(g, d)
            from math import gcd

            lin = linear(e.a, {})
            g = lin.const
            for _, c in lin.terms.values():
                g = gcd(g, c)
            step = gcd(g, e.b.value) or 1
            return (0, e.b.value - step)
        if ba is None or bb is None:
            return None
        if e.op == "add":
            return (ba[0] + bb[0], ba[1] + bb[1])
        if e.op == "sub":
            return (ba[0] - bb[1], ba[1] - bb[0])
        if e.op == "mul":
            prods = [x * y for x in ba for y in bb]
            return (min(prods), max(prods))
        if e.op == "floordiv" and bb[0] > 0 and bb[0] == bb[1]:
            return (ba[0] // bb[0], ba[1] // bb[0])
        if e.op == "min":
            return (min(ba[0], bb[0]), min(ba[1], bb[1]))
        if e.op == "max":
            return (max(ba[0], bb[0]), max(ba[1], bb[1]))
    return None


_FOLD = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": max,
    "min": min,
}


def _simplify_generic(e: Expr, ranges: Ranges) -> Expr:
    if isinstance(e, Load):
        return Load(e.buffer, simplify(e.index, ranges))
    kids = tuple(children(e))
    if not kids:
        return e
    new = tuple(simplify(k, ranges) for k in kids)
    out = e if all(n is k for n, k in zip(new, kids)) else rebuild(e, new)
    if isinstance(out, Binary) and isinstance(out.a, FloatImm) and isinstance(out.b, FloatImm):
        if out.op in _FOLD and not (out.op == "div" and out.b.value == 0):
            return FloatImm(_FOLD[out.op](out.a.value, out.b.value), out.dtype)
    if isinstance(out, Select) and isinstance(out.cond, IntImm):
        return out.t if out.cond.value else out.f
    if isinstance(out, Binary) and out.dtype in FLOAT_DTYPES:
        return _float_identity(out)
    return out


def _float_identity(e: Binary) -> Expr:
    """``x * 0 -> 0``, ``x * 1 -> x``, ``x + 0 -> x``, ``x - 0 -> x`` on floats: literal
    coefficients of an unrolled loop (a Winograd transform) drop out. (``x * 0`` is 0 for every
    finite x; an infinite or NaN x would have given NaN.)"""
    a, b = e.a, e.b
    za, zb = (isinstance(v, FloatImm) and v.value == 0.0 for v in (a, b))
    if e.op == "mul":
        if za or zb:
            return FloatImm(0.0, e.dtype)
        if isinstance(a, FloatImm) and a.value == 1.0:
            return b
        if isinstance(b, FloatImm) and b.value == 1.0:
            return a
    if e.op == "add" and (za or zb):
        return b if za else a
    if e.op == "sub" and zb:
        return a
    return e


def _simplify_compare(e: Compare, ranges: Ranges) -> Expr:
    a, b = simplify(e.a, ranges), simplify(e.b, ranges)
    if e.op in ("and", "or"):
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                if e.op == "and":
                    return y if x.value else FALSE
                return TRUE if x.value else y
        return Compare(e.op, a, b)
    if a.dtype in INT_DTYPES:
        diff = linear(Binary("sub", a, b), ranges)
        db = bounds(diff.to_expr(), ranges)
        if db is not None:
            lo, hi = db
            verdict = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[e.op]
            if verdict[0]:
                return TRUE
            if verdict[1]:
                return FALSE
    return Compare(e.op, a, b)


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Simplify an expression; ``ranges`` maps loop variables to inclusive bounds."""
    ranges = ranges or {}
    if isinstance(e, (IntImm, FloatImm, Var)):
        return e
    if isinstance(e, Binary) and e.dtype in INT_DTYPES:
        return linear(e, ranges).merge_divmod().to_expr()
    if isinstance(e, Compare):
        return _simplify_compare(e, ranges)
    if isinstance(e, Not):
        a = simplify(e.a, ranges)
        if isinstance(a, IntImm):
            return FALSE if a.value else TRUE
        return Not(a)
    return _simplify_generic(e, ranges)


def multiple_of(e: Expr, n: int) -> bool:
    """Is the integer expression provably a multiple of ``n`` (for any values of its variables)?"""
    if isinstance(e, IntImm):
        return e.value % n == 0
    if isinstance(e, Binary):
        if e.op in ("add", "sub"):
            return multiple_of(e.a, n) and multiple_of(e.b, n)
        if e.op == "mul":
            return multiple_of(e.a, n) or multiple_of(e.b, n)
        if e.op == "mod" and isinstance(e.b, IntImm):
            return e.b.value % n == 0 and multiple_of(e.a, n)
    return False


def aligned(index: Expr, lanes: int) -> bool:
    """True when ``index`` is provably a multiple of ``lanes``."""
    lin = linear(index, {})
    return lin.const % lanes == 0 and all(
        c % lanes == 0 or multiple_of(a, lanes) for a, c in lin.terms.values()
    )
