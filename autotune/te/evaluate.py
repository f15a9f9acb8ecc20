"""A vectorised numpy interpreter of a compute DAG, used to check op definitions against references.

Each compute is evaluated at once over index grids: spatial axis ``d`` of an ``n``-d compute is an
integer array that varies along dim ``d``; reduce axes get trailing dims that the reduction folds
away. Reads outside a tensor raise ``IndexError`` only where the value is actually used: the
untaken branch of a ``select`` is evaluated with clipped indices and its values are discarded.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from .expr import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Binary,
    Call,
    Cast,
    Compare,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
)
from .tensor import Tensor
from .workload import Workload, numpy_dtype, topo_order

_erf = np.vectorize(math.erf, otypes=[np.float64])

_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "floordiv": np.floor_divide,
    "mod": np.mod,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "bitand": np.bitwise_and,
    "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor,
    "shl": np.left_shift,
    "shr": np.right_shift,
}

_COMPARE = {
    "lt": np.less,
    "le": np.less_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


def int_power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x ** y`` of int64 arrays, exactly modulo 2**64 (square and multiply, as the kernels' ``ipow``);
    a negative power is the truncated quotient: 1 for a base of 1, +-1 for -1, else 0."""
    b = np.asarray(x, np.int64).astype(np.uint64)
    e = np.asarray(y, np.int64)
    bits = e.astype(np.uint64)
    r = np.ones(np.broadcast_shapes(b.shape, e.shape), np.uint64)
    with np.errstate(over="ignore"):
        while np.any(bits):
            r = np.where(bits & np.uint64(1), r * b, r)
            b, bits = b * b, bits >> np.uint64(1)
    out = r.view(np.int64)
    x = np.asarray(x, np.int64)
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(e & 1, -1, 1), 0))
    return np.where(e < 0, neg, out)


_CALLS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf": lambda x: _erf(x).astype(x.dtype, copy=False),
    "fabs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "nearbyint": np.rint,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "log1p": np.log1p,
    "fmod": np.fmod,
    "copysign": np.copysign,
    "ipow": int_power,
}

_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}



def _int_dtype(dtype: str) -> type:
    """What an integer / bool te dtype is evaluated in: int32 and int64 (index arithmetic too) in
    int64, the other integer types in themselves (their arithmetic wraps as the kernels' does)."""
    if dtype == "bool":
        return np.bool_
    return np.int64 if dtype in INT_DTYPES else numpy_dtype(dtype).type


class _Evaluator:
    """Evaluates the body of one compute over its index grids."""

    def __init__(self, values: Mapping[int, np.ndarray], env: dict[Var, np.ndarray], fdtype: type) -> None:
        self.values = values
        self.env = env
        self.fdtype = fdtype

    def np_dtype(self, dtype: str) -> type:
        if dtype in FLOAT_DTYPES:
            return self.fdtype
        return _int_dtype(dtype)

    def eval(self, e: Expr, mask: np.ndarray | bool) -> np.ndarray:
        """Value of ``e``; ``mask`` marks the points where the value is actually needed."""
        if isinstance(e, IntImm):
            return np.asarray(e.value, dtype=self.np_dtype(e.dtype))
        if isinstance(e, FloatImm):
            return np.asarray(e.value, dtype=self.fdtype)
        if isinstance(e, Var):
            if e not in self.env:
                raise ValueError(f"free variable {e.name} in a compute body")
            return self.env[e]
        if isinstance(e, Binary):
            return _BINARY[e.op](self.eval(e.a, mask), self.eval(e.b, mask))
        if isinstance(e, Compare):
            return _COMPARE[e.op](self.eval(e.a, mask), self.eval(e.b, mask))
        if isinstance(e, Not):
            return np.logical_not(self.eval(e.a, mask))
        if isinstance(e, Call):
            return _CALLS[e.name](*(self.eval(a, mask) for a in e.args))
        if isinstance(e, Select):
            cond = self.eval(e.cond, mask).astype(bool)
            t = self.eval(e.t, np.logical_and(mask, cond))
            f = self.eval(e.f, np.logical_and(mask, np.logical_not(cond)))
            return np.where(cond, t, f)
        if isinstance(e, Cast):
            return self.eval(e.value, mask).astype(self.np_dtype(e.dtype))
        if isinstance(e, TensorRead):
            return self._read(e, mask)
        if isinstance(e, Reduce):
            raise ValueError("a reduction nested inside an expression")
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def _read(self, e: TensorRead, mask: np.ndarray | bool) -> np.ndarray:
        data = self.values[id(e.tensor)]
        idx = [self.eval(i, mask) for i in e.indices]
        grids = np.broadcast_arrays(mask, *idx)
        used = grids[0]
        clipped = []
        for d, (g, extent) in enumerate(zip(grids[1:], data.shape)):
            bad = np.logical_and(used, np.logical_or(g < 0, g >= extent))
            if bad.any():
                raise IndexError(
                    f"read of {e.tensor.name} out of bounds on dim {d} (extent {extent}): "
                    f"index range [{g[used].min()}, {g[used].max()}]"
                )
            clipped.append(np.clip(g, 0, extent - 1))
        return data[tuple(clipped)]


def _compute_tensor(t: Tensor, values: Mapping[int, np.ndarray], fdtype: type) -> np.ndarray:
    body = t.body
    assert body is not None
    raxes = body.axes if isinstance(body, Reduce) else ()
    ndim = len(t.axes) + len(raxes)
    env: dict[Var, np.ndarray] = {}
    for d, ax in enumerate(list(t.axes) + list(raxes)):
        shape = [1] * ndim
        shape[d] = ax.extent
        env[ax.var] = np.arange(ax.extent, dtype=np.int64).reshape(shape)
    full = tuple(a.extent for a in t.axes) + tuple(a.extent for a in raxes)
    ev = _Evaluator(values, env, fdtype)
    with np.errstate(all="ignore"):  # untaken select branches may divide by zero etc.
        if isinstance(body, Reduce):
            inner = np.broadcast_to(ev.eval(body.body, True), full)
            out = _REDUCE[body.combiner](inner, axis=tuple(range(len(t.axes), ndim)))
        else:
            out = np.broadcast_to(ev.eval(body, True), full)
    return np.array(out, dtype=ev.np_dtype(t.dtype))


def evaluate(
    outputs: Sequence[Tensor],
    inputs: Mapping[Tensor, np.ndarray] | Sequence[np.ndarray],
    dtype: type = np.float64,
    placeholders: Sequence[Tensor] | None = None,
) -> list[np.ndarray]:
    """Evaluate ``outputs`` in numpy; float tensors are computed in ``dtype``.

    ``inputs`` maps placeholders to arrays, or lists arrays in the order of ``placeholders``
    (default: the placeholders in topological order, which is ``Workload.inputs`` order for the
    built-in ops; use :func:`evaluate_workload` to be sure).
    """
    order = topo_order(outputs)
    phs = [t for t in order if t.is_placeholder]
    if isinstance(inputs, Mapping):
        feed = dict(inputs)
    else:
        names = list(placeholders) if placeholders is not None else phs
        if len(names) != len(inputs):
            raise ValueError(f"expected {len(names)} input arrays, got {len(inputs)}")
        feed = dict(zip(names, inputs))
    values: dict[int, np.ndarray] = {}
    for t in phs:
        if t not in feed:
            raise ValueError(f"no value given for placeholder {t.name}")
        arr = np.asarray(feed[t])
        if arr.shape != t.shape:
            raise ValueError(f"placeholder {t.name} has shape {t.shape}, got an array of shape {arr.shape}")
        want = dtype if t.dtype in FLOAT_DTYPES else _int_dtype(t.dtype)
        values[id(t)] = arr.astype(want)
    for t in order:
        if not t.is_placeholder:
            values[id(t)] = _compute_tensor(t, values, dtype)
    return [values[id(o)] for o in outputs]


def evaluate_workload(
    wl: Workload, inputs: Sequence[np.ndarray], dtype: type = np.float64
) -> list[np.ndarray]:
    """Evaluate a workload's outputs on arrays given in ``wl.inputs`` order."""
    return evaluate(wl.outputs, inputs, dtype, placeholders=wl.inputs)
