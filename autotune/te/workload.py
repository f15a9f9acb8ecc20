"""A Workload: a fused subgraph of tensor expressions, with a structural hash, a FLOP count and a
numpy reference."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .expr import (
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
    walk,
)
from .tensor import Tensor


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a te dtype (bfloat16 and the sub-byte integers are ml_dtypes')."""
    if dtype in ("bfloat16", "int4", "uint4", "int2", "uint2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dtype))
    return np.dtype(dtype)


def topo_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    """All tensors reachable from ``outputs``, producers before consumers."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        for src in t.inputs:
            visit(src)
        order.append(t)

    for out in outputs:
        visit(out)
    return order


def _expr_key(e: Expr, names: dict[int, str], var_names: dict[Var, str]) -> object:
    if isinstance(e, IntImm):
        return ["i", e.dtype, e.value]
    if isinstance(e, FloatImm):
        return ["f", e.dtype, repr(e.value)]
    if isinstance(e, Var):
        return ["v", var_names[e]]
    if isinstance(e, (Binary, Compare)):
        return [e.op, _expr_key(e.a, names, var_names), _expr_key(e.b, names, var_names)]
    if isinstance(e, Not):
        return ["not", _expr_key(e.a, names, var_names)]
    if isinstance(e, Call):
        return ["call", e.name] + [_expr_key(a, names, var_names) for a in e.args]
    if isinstance(e, Select):
        return ["select"] + [_expr_key(x, names, var_names) for x in (e.cond, e.t, e.f)]
    if isinstance(e, Cast):
        return ["cast", e.dtype, _expr_key(e.value, names, var_names)]
    if isinstance(e, TensorRead):
        return ["read", names[id(e.tensor)]] + [_expr_key(i, names, var_names) for i in e.indices]
    if isinstance(e, Reduce):
        return ["reduce", e.combiner, [a.extent for a in e.axes], _expr_key(e.body, names, var_names)]
    raise TypeError(f"unknown expression node {type(e).__name__}")


def structural_key(outputs: Sequence[Tensor]) -> str:
    """A hash of the computation that ignores tensor and variable names."""
    order = topo_order(outputs)
    names: dict[int, str] = {}
    items: list[object] = []
    for idx, t in enumerate(order):
        names[id(t)] = f"t{idx}"
        if t.is_placeholder:
            items.append(["placeholder", list(t.shape), t.dtype])
            continue
        var_names: dict[Var, str] = {a.var: f"a{i}" for i, a in enumerate(t.axes)}
        for i, r in enumerate(t.reduce_axes):
            var_names[r.var] = f"r{i}"
        items.append(["compute", list(t.shape), t.dtype, _expr_key(t.body, names, var_names)])
    items.append(["outputs", [names[id(o)] for o in outputs]])
    blob = json.dumps(items, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


_FLOP_OPS = {"add", "sub", "mul", "div", "max", "min", "pow"}


def _expr_flops(e: Expr) -> int:
    n = 0
    for node in walk(e):
        if isinstance(node, Binary) and node.op in _FLOP_OPS and node.dtype.startswith("float"):
            n += 1
        elif isinstance(node, Call):
            n += 1
    return n


def count_flops(outputs: Sequence[Tensor]) -> float:
    """Floating-point operations of one evaluation (a reduction step counts its combine op)."""
    total = 0.0
    for t in topo_order(outputs):
        if t.is_placeholder:
            continue
        body = t.body
        per_point = _expr_flops(body)
        if isinstance(body, Reduce):
            per_point = _expr_flops(body.body) + 1
            red = 1
            for a in body.axes:
                red *= a.extent
            total += float(t.size) * red * per_point
        else:
            total += float(t.size) * per_point
    return total


@dataclass
class Workload:
    """A fused subgraph to tune: inputs, outputs, how to rebuild it and how to check it."""

    name: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    reference: Callable[..., list[np.ndarray]]
    params: dict = field(default_factory=dict)
    input_ranges: list[tuple[float, float]] | None = None
    # fast numpy composition on float32 inputs (for benchmarks); None: run ``reference`` instead
    baseline: Callable[..., list[np.ndarray]] | None = None
    # inputs that are constants of a model (weights): a CPU schedule may store them pre-tiled
    # (``autotune.prepack``), which changes what is timed, so they are part of the key
    const_inputs: tuple[int, ...] = ()
    # how float32 matrix products may round their inputs: "fp32" (exactly) or "tf32" (tensor
    # cores); 16-bit inputs are in the tensors' dtypes. Part of the key: the kernels differ
    precision: str = "fp32"

    @property
    def key(self) -> str:
        key = structural_key(self.outputs)
        if not self.const_inputs and self.precision == "fp32":
            return key
        extra: list = [key, sorted(self.const_inputs)]
        if self.precision != "fp32":
            extra.append(self.precision)
        blob = json.dumps(extra, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    @property
    def flops(self) -> float:
        return count_flops(self.outputs)

    @property
    def tensors(self) -> list[Tensor]:
        return topo_order(self.outputs)

    @property
    def args(self) -> list[Tensor]:
        """Kernel arguments: inputs then outputs."""
        return list(self.inputs) + list(self.outputs)

    def description(self) -> dict:
        """JSON description enough to rebuild the workload from the op registry."""
        return {"op": self.name, "params": self.params}

    def random_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Fresh random inputs (never zeros) in each input's valid range."""
        arrays = []
        for i, t in enumerate(self.inputs):
            lo, hi = self.input_ranges[i] if self.input_ranges else (-1.0, 1.0)
            if t.dtype == "bool":
                arrays.append(rng.integers(0, 2, size=t.shape).astype(bool))
            elif t.dtype.startswith(("int", "uint")):  # wrapped into unsigned / sub-byte types
                arrays.append(rng.integers(int(lo), int(hi), size=t.shape).astype(numpy_dtype(t.dtype)))
            else:  # 16-bit floats: rounded to the dtype, so the float64 reference sees those values
                arrays.append(rng.uniform(lo, hi, size=t.shape).astype(numpy_dtype(t.dtype)))
        return arrays

    def run_reference(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The numpy reference, computed in float64."""
        wide = [a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a
                for a in inputs]
        outs = self.reference(*wide)
        return [np.asarray(o, dtype=np.float64) for o in outs]

    def __repr__(self) -> str:
        return f"Workload({self.name}, {self.params}, key={self.key})"
