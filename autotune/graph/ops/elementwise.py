"""Elementwise operators: each defined once by its numpy form and its expression form; inputs
broadcast numpy-style. Kernels compute float32, the 8- to 64-bit integers (wrapping as numpy's
arithmetic does) and bool values; Cast also converts to and from the sub-byte integers."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.evaluate import int_power
from autotune.te.expr import Call, Expr, IntImm, Not, any_of, as_expr, binary, compare, const, int_range
from autotune.te.ops.elementwise import erf_expr, gelu_expr

from ..ir import GraphError, Node, TensorType
from .base import (
    ELEMWISE,
    INT_KERNEL_DTYPES,
    KERNEL_DTYPES,
    Arg,
    Consts,
    Types,
    broadcast_shapes,
    register,
    same,
)
from .te_build import arg_dtype, nd_compute, pow_expr, read, shape_of

FLOAT = ("float32",)
NUMERIC = ("float32", *INT_KERNEL_DTYPES)
BOOL = ("bool",)
ANY = (*NUMERIC, "bool")


def erf_np(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype, copy=False)


def gelu_np(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return (0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))).astype(x.dtype, copy=False)
    return (0.5 * x * (1.0 + erf_np(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def _kernel_types(node: Node, types: Types, consts: Consts, allowed: Sequence[str]) -> None:
    """Operands of a node that becomes a kernel must have element types its expression handles."""
    if all(c is not None for c, i in zip(consts, node.inputs) if i):
        return  # folded at import: numpy handles every type
    for i, t in zip(node.inputs, types):
        if i and t is not None and t.dtype not in allowed:
            raise GraphError(
                f"{node.op} node {node.name!r}: input {i!r} is {t.dtype}; "
                f"{node.op} is compiled for {', '.join(allowed)}"
            )


def _a(attrs: dict, key: str, default: float) -> float:
    return float(attrs.get(key, default))


class _Elementwise:
    """Shared behaviour; each registered op is a subclass carrying its own definitions."""

    arity: tuple[int, int] = (1, 1)  # min, max operand count
    dtypes: Sequence[str] = FLOAT  # operand types compiled
    out_dtype: str | None = None  # None: the operands' type
    same_dtype = True  # every operand of one type

    @staticmethod
    def np_fn(attrs: dict, *xs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def expr(attrs: dict, dtype: str, *vs: Expr) -> Expr:
        raise NotImplementedError

    @classmethod
    def infer(cls, node: Node, types: Types, consts: Consts) -> list[TensorType]:
        given = [same(t) for t, i in zip(types, node.inputs) if i]
        lo, hi = cls.arity
        if not lo <= len(given) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi < 1 << 30 else 'any number of'}"
            raise GraphError(f"{node.op} node {node.name!r}: {len(given)} inputs, expected {want}")
        if cls.same_dtype and len({t.dtype for t in given}) > 1:
            raise GraphError(
                f"{node.op} node {node.name!r}: input types differ ({', '.join(t.dtype for t in given)})"
            )
        _kernel_types(node, types, consts, cls.dtypes)
        shape = broadcast_shapes(*[t.shape for t in given])
        return [TensorType(shape, cls.out_dtype or given[0].dtype)]

    @classmethod
    def numpy(cls, node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        given = [np.asarray(x) for x, i in zip(xs, node.inputs) if i]
        out = np.asarray(cls.np_fn(node.attrs, *given))
        dtype = np.dtype(cls.out_dtype) if cls.out_dtype else given[0].dtype
        return [out.astype(dtype, copy=False)]

    @classmethod
    def te(cls, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        ops = [a for a in args if a is not None]
        tensors = [a for a in ops if isinstance(a, te.Tensor)]
        if not tensors:
            raise GraphError(f"{name}: an elementwise op of constants should have been folded")
        shape = broadcast_shapes(*[shape_of(a) for a in ops])
        dtype = next(arg_dtype(a) for a in ops if isinstance(a, te.Tensor))

        def body(idx: list[Expr]) -> Expr:
            out = cls.expr(attrs, dtype, *[read(a, idx, shape, dtype) for a in ops])
            want = cls.out_dtype or dtype
            return out if out.dtype == want else T.cast(want, out)

        return nd_compute(shape, body, name, "elementwise")


def _define(
    name: str, base: type = _Elementwise, check: Callable[[Node], str | None] | None = None, **members: Any
) -> None:
    """Register ``name`` as a subclass of ``base`` with the given class members."""
    for key in ("np_fn", "expr"):
        if key in members:
            members[key] = staticmethod(members[key])
    register(name, ELEMWISE, check)(type(f"_{name}", (base,), members))


def _unary(name: str, np_fn: Callable, expr: Callable, dtypes: Sequence[str] = FLOAT,
           aten: Sequence[str] = (), **kw: Any) -> None:
    """A one-operand operator; ``aten``: the ATen overloads that are it (``OpDef.aten``)."""
    _define(name, np_fn=np_fn, expr=expr, dtypes=dtypes, aten=dict.fromkeys(aten, "unary"), **kw)


def _binary(name: str, np_fn: Callable, expr: Callable, dtypes: Sequence[str] = NUMERIC,
            aten: Sequence[str] | dict[str, str] = (), **kw: Any) -> None:
    """A two-operand operator; ``aten``: the ATen overloads that are it (``OpDef.aten``; forms other
    than ``binary`` given by a dict)."""
    forms = aten if isinstance(aten, dict) else dict.fromkeys(aten, "binary")
    _define(name, arity=(2, 2), np_fn=np_fn, expr=expr, dtypes=dtypes, aten=forms, **kw)


# --- unary math -------------------------------------------------------------------------------------
def _softplus_np(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _softplus(v: Expr) -> Expr:
    return T.max(v, 0.0) + T.log1p(T.exp(-T.fabs(v)))


def _isinf_np(attrs: dict, x: np.ndarray) -> np.ndarray:
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    return (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def _isinf(attrs: dict, dtype: str, v: Expr) -> Expr:
    conds = []
    if attrs.get("detect_positive", 1):
        conds.append(compare("eq", v, math.inf))
    if attrs.get("detect_negative", 1):
        conds.append(compare("eq", v, -math.inf))
    return any_of(*conds) if conds else as_expr(False)


def _sign(attrs: dict, dtype: str, v: Expr) -> Expr:
    one, zero = const(1, dtype), const(0, dtype)
    return T.select(compare("lt", zero, v), one, T.select(compare("lt", v, zero), const(-1, dtype), zero))


def _selu_np(a: dict, x: np.ndarray) -> np.ndarray:
    alpha, gamma = _a(a, "alpha", 1.67326319217681884765625), _a(a, "gamma", 1.05070102214813232421875)
    return gamma * np.where(x > 0, x, alpha * (np.exp(x) - 1))


def _selu(a: dict, d: str, v: Expr) -> Expr:
    alpha, gamma = _a(a, "alpha", 1.67326319217681884765625), _a(a, "gamma", 1.05070102214813232421875)
    return gamma * T.select(compare("lt", 0.0, v), v, alpha * (T.exp(v) - 1.0))


_UNARY_FLOAT: dict[str, tuple[Callable, Callable, tuple[str, ...]]] = {
    # name: (numpy of x, expression of v, the ATen overloads that are it)
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), T.sigmoid, ("sigmoid.default",)),
    "Tanh": (np.tanh, T.tanh, ("tanh.default",)),
    "Erf": (erf_np, erf_expr, ("erf.default",)),
    "Sqrt": (np.sqrt, T.sqrt, ("sqrt.default",)),
    "Exp": (np.exp, T.exp, ("exp.default",)),
    "Log": (np.log, T.log, ("log.default",)),
    "Reciprocal": (lambda x: 1 / x, lambda v: 1.0 / v, ("reciprocal.default",)),
    "Floor": (np.floor, T.floor, ("floor.default",)),
    "Ceil": (np.ceil, T.ceil, ("ceil.default",)),
    "Round": (np.rint, T.nearbyint, ()),
    "Sin": (np.sin, T.sin, ("sin.default",)),
    "Cos": (np.cos, T.cos, ("cos.default",)),
    "Tan": (np.tan, T.tan, ()),
    "Asin": (np.arcsin, T.asin, ()),
    "Acos": (np.arccos, T.acos, ()),
    "Atan": (np.arctan, T.atan, ()),
    "Sinh": (np.sinh, T.sinh, ()),
    "Cosh": (np.cosh, T.cosh, ()),
    "Asinh": (np.arcsinh, T.asinh, ()),
    "Acosh": (np.arccosh, T.acosh, ()),
    "Atanh": (np.arctanh, T.atanh, ()),
    "Softplus": (_softplus_np, _softplus, ()),
    "Softsign": (lambda x: x / (1 + np.abs(x)), lambda v: v / (1.0 + T.fabs(v)), ()),
    "Mish": (lambda x: x * np.tanh(_softplus_np(x)), lambda v: v * T.tanh(_softplus(v)), ()),
    "HardSwish": (
        lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
        lambda v: v * T.max(T.min(v * (1.0 / 6.0) + 0.5, 1.0), 0.0),
        (),
    ),
}
for _name, (_np, _ex, _aten) in _UNARY_FLOAT.items():
    _unary(_name, lambda a, x, f=_np: f(x), lambda a, d, v, f=_ex: f(v), aten=_aten)

_unary("Relu", lambda a, x: np.maximum(x, 0), lambda a, d, v: T.max(v, const(0, d)), NUMERIC,
       aten=("relu.default",))
_unary("Neg", lambda a, x: np.negative(x), lambda a, d, v: const(0, d) - v, NUMERIC, aten=("neg.default",))
_unary(
    "Abs",
    lambda a, x: np.abs(x),
    lambda a, d, v: T.fabs(v) if d == "float32" else T.select(compare("lt", v, const(0, d)), -v, v),
    NUMERIC,
    aten=("abs.default",),
)
_unary("Sign", lambda a, x: np.sign(x), _sign, NUMERIC, aten=("sign.default",))
_unary("IsNaN", lambda a, x: np.isnan(x), lambda a, d, v: compare("ne", v, v), out_dtype="bool",
       aten=("isnan.default",))
_unary("IsInf", _isinf_np, _isinf, out_dtype="bool", aten=("isinf.default",))
_unary("Not", lambda a, x: np.logical_not(x), lambda a, d, v: Not(v), BOOL,
       aten=("logical_not.default", "bitwise_not.default"))
_unary(
    "LeakyRelu",
    lambda a, x: np.where(x < 0, _a(a, "alpha", 0.01) * x, x),
    lambda a, d, v: T.select(compare("lt", v, 0.0), _a(a, "alpha", 0.01) * v, v),
)
_unary(
    "Elu",
    lambda a, x: np.where(x > 0, x, _a(a, "alpha", 1.0) * (np.exp(x) - 1)),
    lambda a, d, v: T.select(compare("lt", 0.0, v), v, _a(a, "alpha", 1.0) * (T.exp(v) - 1.0)),
)
_unary("Selu", _selu_np, _selu)
_unary(
    "Celu",
    lambda a, x: (
        np.maximum(x, 0) + np.minimum(0, _a(a, "alpha", 1.0) * (np.exp(x / _a(a, "alpha", 1.0)) - 1))
    ),
    lambda a, d, v: (
        T.max(v, 0.0) + T.min(_a(a, "alpha", 1.0) * (T.exp(v * (1.0 / _a(a, "alpha", 1.0))) - 1.0), 0.0)
    ),
)
_unary(
    "ThresholdedRelu",
    lambda a, x: np.where(x > _a(a, "alpha", 1.0), x, 0),
    lambda a, d, v: T.select(compare("lt", _a(a, "alpha", 1.0), v), v, 0.0),
)
_unary(
    "HardSigmoid",
    lambda a, x: np.clip(_a(a, "alpha", 0.2) * x + _a(a, "beta", 0.5), 0, 1),
    lambda a, d, v: T.max(T.min(_a(a, "alpha", 0.2) * v + _a(a, "beta", 0.5), 1.0), 0.0),
)
_unary(
    "Shrink",
    lambda a, x: np.where(
        x < -_a(a, "lambd", 0.5),
        x + _a(a, "bias", 0.0),
        np.where(x > _a(a, "lambd", 0.5), x - _a(a, "bias", 0.0), 0),
    ),
    lambda a, d, v: T.select(
        compare("lt", v, -_a(a, "lambd", 0.5)),
        v + _a(a, "bias", 0.0),
        T.select(compare("lt", _a(a, "lambd", 0.5), v), v - _a(a, "bias", 0.0), 0.0),
    ),
)


def _check_gelu(node: Node) -> str | None:
    approx = node.attrs.get("approximate", "none")
    return None if approx in ("none", "tanh") else f"approximate={approx!r}"


_define(
    "Gelu",
    check=_check_gelu,
    np_fn=lambda a, x: gelu_np(x, a.get("approximate", "none")),
    expr=lambda a, d, v: gelu_expr(v, a.get("approximate", "none")),
)


# --- binary -----------------------------------------------------------------------------------------
def _div_np(a: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        # truncating, as C (and ONNX); a zero divisor gives 0 (numpy's value, which the kernels keep)
        with np.errstate(divide="ignore"):
            q = np.floor_divide(x, y)
            late = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
        return q + late.astype(q.dtype)
    return x / y


def _nonzero_divisor(d: str, y: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """``fn(y)`` for an integer divisor ``y``, 0 where ``y`` is 0 (C's integer division by zero traps;
    numpy gives 0)."""
    zero = const(0, d)
    return T.select(compare("eq", y, zero), zero, fn(T.select(compare("eq", y, zero), const(1, d), y)))


def _div(a: dict, d: str, x: Expr, y: Expr) -> Expr:
    if d == "float32":
        return x / y
    # C's integer division truncates, as ONNX's does
    return _nonzero_divisor(d, y, lambda y: x // y)


def _mod_np(a: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(x, y) if a.get("fmod", 0) else np.mod(x, y)


def _mod(a: dict, d: str, x: Expr, y: Expr) -> Expr:
    zero = const(0, d)
    if d == "float32":
        r = Call("fmod", [x, y], d)
        if a.get("fmod", 0):
            return r
        # the divisor's sign (numpy's and Python's mod): a remainder of the other sign moves by y, a
        # zero one takes y's sign; NaN and infinite operands follow from fmod
        differ = compare("ne", compare("lt", r, zero), compare("lt", y, zero))
        moved = T.select(differ, r + y, r)
        return T.select(compare("ne", r, zero), moved, Call("copysign", [zero, y], d))

    def rem(y: Expr) -> Expr:
        r = x % y  # C's remainder takes the dividend's sign
        if a.get("fmod", 0):
            return r
        differ = compare("ne", compare("lt", r, zero), compare("lt", y, zero))
        return T.select(compare("and", compare("ne", r, zero), differ), r + y, r)

    return _nonzero_divisor(d, y, rem)


class _Mod(_Elementwise):
    arity = (2, 2)
    dtypes = NUMERIC
    aten = {"remainder.Scalar": "binary", "remainder.Tensor": "binary"}  # (Python's floored modulo)
    np_fn = staticmethod(_mod_np)
    expr = staticmethod(_mod)


register("Mod", ELEMWISE)(_Mod)

_binary("Add", lambda a, x, y: x + y, lambda a, d, x, y: x + y, aten=("add.Tensor", "add.Scalar"))
_binary("Sub", lambda a, x, y: x - y, lambda a, d, x, y: x - y,
        aten=("sub.Tensor", "sub.Scalar", "rsub.Scalar", "rsub.Tensor"))
_binary("Mul", lambda a, x, y: x * y, lambda a, d, x, y: x * y, aten=("mul.Tensor", "mul.Scalar"))
_binary("Div", _div_np, _div, aten=("div.Tensor", "div.Scalar"))


_POW_BASES = ("float32", "int32", "int64")


class _Pow(_Elementwise):
    """``x ** y``, of x's type (float32, int32 or int64) for an exponent of any numeric type: float32
    to a float32 power in float32, a float32 or integer to a power of the other kind in float64 (as
    numpy), an integer to an integer power exactly (wrapping; a negative power truncates to 0 but
    for a base of 1 or -1)."""

    arity = (2, 2)
    dtypes = NUMERIC
    same_dtype = False
    aten = {"pow.Tensor_Scalar": "binary", "pow.Tensor_Tensor": "binary"}

    @classmethod
    def infer(cls, node: Node, types: Types, consts: Consts) -> list[TensorType]:
        out = super().infer(node, types, consts)
        base = same(types[0]).dtype
        if base not in _POW_BASES and not all(c is not None for c in consts[:2]):
            bases = ", ".join(_POW_BASES)
            raise GraphError(f"Pow node {node.name!r}: base is {base}; Pow is compiled for {bases}")
        return [TensorType(out[0].shape, base)]

    @staticmethod
    def np_fn(a: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "iu" and y.dtype.kind in "iu":
            return int_power(x.astype(np.int64), y.astype(np.int64))
        if x.dtype.kind in "iu" or y.dtype.kind in "iu":
            return np.power(x.astype(np.float64), y.astype(np.float64))
        return np.power(x, y)

    @classmethod
    def te(cls, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x, y = args[:2]
        shape = broadcast_shapes(shape_of(x), shape_of(y))
        dx, dy = arg_dtype(x), arg_dtype(y)

        def body(idx: list[Expr]) -> Expr:
            b, e = read(x, idx, shape, dx), read(y, idx, shape, dy)
            if dx == "float32" and (dy == "float32" or isinstance(e, IntImm)):
                return pow_expr(b, e if dy == "float32" else const(e.value, "float32"))
            if dx != "float32" and dy != "float32":
                return T.cast(dx, Call("ipow", [T.cast("int64", b), T.cast("int64", e)], "int64"))
            return T.cast(dx, T.power(T.cast("float64", b), T.cast("float64", e)))

        if not any(isinstance(a, te.Tensor) for a in (x, y)):
            raise GraphError(f"{name}: an elementwise op of constants should have been folded")
        return nd_compute(shape, body, name, "elementwise")


register("Pow", ELEMWISE)(_Pow)
_binary(
    "PRelu",
    lambda a, x, s: np.where(x < 0, s * x, x),
    lambda a, d, x, s: T.select(compare("lt", x, const(0, d)), s * x, x),
)
for _name, _cmp, _npc in (
    ("Equal", "eq", np.equal),
    ("Less", "lt", np.less),
    ("LessOrEqual", "le", np.less_equal),
    ("Greater", "gt", np.greater),
    ("GreaterOrEqual", "ge", np.greater_equal),
):
    # ATen's eq/lt/le/gt/ge (Tensor and Scalar); ne as the negation of Equal
    _forms = {f"{_cmp}.{k}": "compare" for k in ("Tensor", "Scalar")}
    if _cmp == "eq":
        _forms.update({"ne.Tensor": "!compare", "ne.Scalar": "!compare"})
    _op = {"gt": ("lt", True), "ge": ("le", True)}.get(_cmp, (_cmp, False))
    _binary(
        _name,
        lambda a, x, y, f=_npc: f(x, y),
        lambda a, d, x, y, o=_op: compare(o[0], y, x) if o[1] else compare(o[0], x, y),
        ANY if _name == "Equal" else NUMERIC,
        aten=_forms,
        out_dtype="bool",
    )
_binary("And", lambda a, x, y: np.logical_and(x, y), lambda a, d, x, y: compare("and", x, y), BOOL,
        aten=("logical_and.default", "bitwise_and.Tensor"))
_binary("Or", lambda a, x, y: np.logical_or(x, y), lambda a, d, x, y: compare("or", x, y), BOOL,
        aten=("logical_or.default", "bitwise_or.Tensor"))
_binary("Xor", lambda a, x, y: np.logical_xor(x, y), lambda a, d, x, y: compare("ne", x, y), BOOL,
        aten=("logical_xor.default",))
for _name, _bop, _npb in (
    ("BitwiseAnd", "bitand", np.bitwise_and),
    ("BitwiseOr", "bitor", np.bitwise_or),
    ("BitwiseXor", "bitxor", np.bitwise_xor),
):
    _binary(
        _name, lambda a, x, y, f=_npb: f(x, y), lambda a, d, x, y, o=_bop: binary(o, x, y), INT_KERNEL_DTYPES
    )
_unary(
    "BitwiseNot",
    lambda a, x: np.invert(x),
    lambda a, d, v: binary("bitxor", v, const(-1 if int_range(d)[0] else int_range(d)[1], d)),  # all ones
    INT_KERNEL_DTYPES,
)


def _check_shift(node: Node) -> str | None:
    direction = node.attrs.get("direction")
    return None if direction in ("LEFT", "RIGHT") else f"direction={direction!r}"


def _shift(a: dict, d: str, x: Expr, y: Expr) -> Expr:
    """``x << y`` (bits past the top discarded) / ``x >> y`` (arithmetic for a signed x); a shift by a
    negative amount or by the type's width or more gives what the sign fill alone gives: -1 for a
    right shift of a negative x, else 0 (ONNX's rule; numpy's too, C's is undefined)."""
    bits, zero = 8 * np.dtype(d).itemsize, const(0, d)
    inside = compare("and", compare("le", zero, y), compare("lt", y, const(bits, d)))
    if a.get("direction") == "LEFT":
        return T.select(inside, binary("shl", x, y), zero)
    fill = zero if d.startswith("u") else T.select(compare("lt", x, zero), const(-1, d), zero)
    return T.select(inside, binary("shr", x, y), fill)


_binary(
    "BitShift",
    lambda a, x, y: (np.left_shift if a.get("direction") == "LEFT" else np.right_shift)(x, y),
    _shift,
    INT_KERNEL_DTYPES,
    check=_check_shift,
)


# --- variadic ---------------------------------------------------------------------------------------
def _fold(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def go(attrs: dict, *xs: Any) -> Any:
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return go


def _fold_expr(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    inner = _fold(fn)
    return lambda attrs, dtype, *vs: inner(attrs, *vs)


_MANY = (1, 1 << 30)
_define("Sum", arity=_MANY, dtypes=NUMERIC, np_fn=_fold(np.add), expr=_fold_expr(lambda x, y: x + y))
_define("Max", arity=_MANY, dtypes=NUMERIC, np_fn=_fold(np.maximum), expr=_fold_expr(T.max),
        aten={"maximum.default": "binary"})
_define("Min", arity=_MANY, dtypes=NUMERIC, np_fn=_fold(np.minimum), expr=_fold_expr(T.min),
        aten={"minimum.default": "binary"})
_define(
    "Mean",
    arity=_MANY,
    np_fn=lambda a, *xs: _fold(np.add)(a, *xs) / len(xs),
    expr=lambda a, d, *vs: _fold_expr(lambda x, y: x + y)(a, d, *vs) * (1.0 / len(vs)),
)


# --- selection and clipping -------------------------------------------------------------------------
class _Where(_Elementwise):
    arity = (3, 3)
    dtypes = ANY
    same_dtype = False

    @classmethod
    def infer(cls, node: Node, types: Types, consts: Consts) -> list[TensorType]:
        c, x, y = (same(t) for t in types[:3])
        if c.dtype != "bool":
            raise GraphError(f"Where node {node.name!r}: condition is {c.dtype}, not bool")
        if x.dtype != y.dtype:
            raise GraphError(f"Where node {node.name!r}: branches differ in type ({x.dtype}, {y.dtype})")
        _kernel_types(node, types, consts, ANY)
        return [TensorType(broadcast_shapes(c.shape, x.shape, y.shape), x.dtype)]

    @classmethod
    def numpy(cls, node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.where(xs[0], xs[1], xs[2]).astype(np.asarray(xs[1]).dtype, copy=False)]

    @classmethod
    def te(cls, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        c, x, y = args[:3]
        shape = broadcast_shapes(shape_of(c), shape_of(x), shape_of(y))
        dtype = arg_dtype(x) if isinstance(x, te.Tensor) else arg_dtype(y)
        return nd_compute(
            shape,
            lambda i: T.select(read(c, i, shape, "bool"), read(x, i, shape, dtype), read(y, i, shape, dtype)),
            name,
            "elementwise",
        )


register("Where", ELEMWISE)(_Where)


def _clip_bounds(node_inputs: Sequence[str], attrs: dict, xs: Sequence[Any]) -> tuple[Any, Any]:
    """Clip's lower and upper bound: operands 1 and 2 (opset >= 11) or attributes (before)."""
    lo = xs[1] if len(xs) > 1 and len(node_inputs) > 1 and node_inputs[1] else attrs.get("min")
    hi = xs[2] if len(xs) > 2 and len(node_inputs) > 2 and node_inputs[2] else attrs.get("max")
    return lo, hi


class _Clip(_Elementwise):
    arity = (1, 3)
    dtypes = NUMERIC

    @classmethod
    def infer(cls, node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        for t in types[1:3]:
            if t is not None and t.size != 1:
                raise GraphError(f"Clip node {node.name!r}: bounds must be scalars, got shape {t.shape}")
        _kernel_types(node, types, consts, NUMERIC)
        return [x]

    @classmethod
    def numpy(cls, node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        lo, hi = _clip_bounds(node.inputs, node.attrs, xs)
        out = x
        if lo is not None:
            out = np.maximum(out, np.asarray(lo, x.dtype))
        if hi is not None:
            out = np.minimum(out, np.asarray(hi, x.dtype))
        return [out.astype(x.dtype, copy=False)]

    @classmethod
    def te(cls, attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = args[0]
        assert isinstance(x, te.Tensor)
        names = ["x"] + ["b" if i < len(args) and args[i] is not None else "" for i in (1, 2)]
        lo, hi = _clip_bounds(names, attrs, list(args) + [None] * 2)

        def body(i: list[Expr]) -> Expr:
            v = x[tuple(i)]
            if lo is not None:
                v = T.max(v, read(lo, [0] * len(shape_of(lo)), shape_of(lo), x.dtype))
            if hi is not None:
                v = T.min(v, read(hi, [0] * len(shape_of(hi)), shape_of(hi), x.dtype))
            return v

        return nd_compute(x.shape, body, name, "elementwise")


register("Clip", ELEMWISE)(_Clip)


# --- casts ------------------------------------------------------------------------------------------
def onnx_dtype(code: int) -> np.dtype:
    """The numpy type of an ONNX TensorProto element type code."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))
    except (KeyError, TypeError, ValueError):
        raise GraphError(f"element type {code} has no numpy equivalent") from None


def _cast_to(node: Node, types: Types) -> np.dtype:
    if node.op == "CastLike":
        return np.dtype(same(types[1]).dtype)
    return onnx_dtype(node.attrs.get("to", 1))


def _cast_np(x: np.ndarray, to: np.dtype, saturate: bool = True) -> np.ndarray:
    if to.name.startswith("float8_e8m0"):
        raise GraphError(f"a cast to {to.name} (a scale-only type) is not folded")
    if x.dtype.kind == "f" and to.kind in "iu":
        with np.errstate(invalid="ignore"):  # out of range: undefined in ONNX; numpy's value
            return np.trunc(x).astype(to)
    if saturate and to.name.startswith("float8") and x.dtype.kind == "f":
        import ml_dtypes

        top = float(ml_dtypes.finfo(to).max)
        x = np.where(np.isnan(x), x, np.clip(x, -top, top))  # ONNX's saturate=1, infinities included
    with np.errstate(invalid="ignore"):  # a float out of a sub-byte type's range: 0, as ml_dtypes has it
        return x.astype(to)


class _Cast:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x = same(types[0])
        to = _cast_to(node, types)
        if consts and consts[0] is not None:
            return [TensorType(x.shape, str(to))]
        for what, dt in (("input", x.dtype), ("target type", str(to))):
            if dt not in KERNEL_DTYPES:
                raise GraphError(
                    f"{node.op} node {node.name!r}: {what} {dt} is not compiled (kernels compute "
                    f"{', '.join(KERNEL_DTYPES)})"
                )
        return [TensorType(x.shape, str(to))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        sat = bool(node.attrs.get("saturate", 1))
        if node.op == "CastLike":
            return [_cast_np(x, np.asarray(xs[1]).dtype, sat)]
        return [_cast_np(x, onnx_dtype(node.attrs.get("to", 1)), sat)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        x = args[0]
        assert isinstance(x, te.Tensor)
        if len(args) > 1 and args[1] is not None:
            to = arg_dtype(args[1])
        else:
            to = str(onnx_dtype(attrs.get("to", 1)))

        def body(i: list[Expr]) -> Expr:
            v = x[tuple(i)]
            if to == "bool":
                return compare("ne", v, const(0, x.dtype) if x.dtype != "bool" else as_expr(False))
            return T.cast(to, v)

        return nd_compute(x.shape, body, name, "elementwise")


register("Cast", ELEMWISE)(_Cast)
register("CastLike", ELEMWISE)(_Cast)
