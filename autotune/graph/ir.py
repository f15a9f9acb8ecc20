"""The graph IR: values with static shapes and dtypes, operator nodes in topological order, and
constants (weights) held as numpy arrays."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np


class GraphError(ValueError):
    """A malformed graph or one this compiler cannot handle (bad input: reported, never a crash)."""


@dataclass(frozen=True)
class TensorType:
    """Static shape and element type of a value."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(str(s) for s in self.shape)}]"


@dataclass
class Node:
    """One operator application. ``inputs`` may hold ``""`` for an omitted optional input."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        return f"{self.name or self.op}: {self.op}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}"


@dataclass
class Graph:
    """A dataflow graph. Invariants (checked by :meth:`validate`): nodes are in topological order,
    every value is produced once (by a node, as a graph input or as a constant) and has a type."""

    name: str
    inputs: list[str]
    outputs: list[str]
    nodes: list[Node]
    types: dict[str, TensorType]
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    # what its matrix products compute in: fp32, tf32, fp16, bf16 (``graph.precision``; a compile
    # option the passes apply)
    precision: str = "fp32"
    # (position, "float16" | "bfloat16") of the inputs and outputs a 16-bit float model declares in
    # that type (it computes in float32, see ``half``): random inputs are of that type there,
    # ``CompiledModule.run`` returns those outputs in it
    declared_inputs: tuple[tuple[int, str], ...] = ()
    declared_outputs: tuple[tuple[int, str], ...] = ()

    # --- queries ----------------------------------------------------------------------------------
    def producer(self) -> dict[str, Node]:
        """Value name -> the node that produces it."""
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> nodes that read it (each node listed once per value)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for v in dict.fromkeys(i for i in n.inputs if i):
                out.setdefault(v, []).append(n)
        return out

    def is_const(self, value: str) -> bool:
        return value in self.consts

    def type_of(self, value: str) -> TensorType:
        return self.types[value]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def copy(self) -> Graph:
        """A copy that passes may rewrite freely (constant arrays are shared, never mutated)."""
        return Graph(
            self.name,
            list(self.inputs),
            list(self.outputs),
            [Node(n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.name) for n in self.nodes],
            dict(self.types),
            dict(self.consts),
            self.precision,
            self.declared_inputs,
            self.declared_outputs,
        )

    def fresh_name(self, base: str) -> str:
        """A value or node name not used yet."""
        used = set(self.types) | {n.name for n in self.nodes}
        if base not in used:
            return base
        i = 1
        while f"{base}_{i}" in used:
            i += 1
        return f"{base}_{i}"

    def validate(self) -> None:
        """Raise GraphError if an invariant does not hold."""
        defined = set(self.inputs) | set(self.consts)
        for v in defined:
            if v not in self.types:
                raise GraphError(f"value {v!r} has no type")
        for n in self.nodes:
            for i in n.inputs:
                if i and i not in defined:
                    raise GraphError(f"node {n.name!r} ({n.op}) reads {i!r}, which is not defined before it")
            for o in filter(None, n.outputs):  # "" is an omitted optional output
                if o in defined:
                    raise GraphError(f"value {o!r} is produced twice")
                if o not in self.types:
                    raise GraphError(f"value {o!r} of node {n.name!r} has no type")
                defined.add(o)
        for o in self.outputs:
            if o not in defined:
                raise GraphError(f"graph output {o!r} is never produced")

    def summary(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_counts().items()))
        return f"{self.name}: {len(self.nodes)} nodes ({ops}), {len(self.consts)} constants"

    def __str__(self) -> str:
        lines = [f"graph {self.name}("]
        lines += [f"  {i}: {self.types[i]}" for i in self.inputs]
        lines.append(") {")
        for n in self.nodes:
            attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items() if not isinstance(v, np.ndarray))
            outs = ", ".join(f"{o}: {self.types.get(o, '?')}" for o in n.outputs)
            lines.append(f"  {outs} = {n.op}({', '.join(n.inputs)}){' {' + attrs + '}' if attrs else ''}")
        lines.append(f"  return {', '.join(self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def contiguous(value: object) -> np.ndarray:
    """A C-contiguous array of ``value`` that keeps its rank (unlike np.ascontiguousarray, 0-d stays 0-d)."""
    arr = np.asarray(value)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def topo_sort(nodes: Iterable[Node], available: Iterable[str]) -> list[Node]:
    """Nodes ordered so every input is available before use (stable for an already sorted list)."""
    ready = set(available)
    pending = list(nodes)
    order: list[Node] = []
    while pending:
        rest = []
        for n in pending:
            if all(not i or i in ready for i in n.inputs):
                order.append(n)
                ready.update(n.outputs)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            missing = sorted({i for n in rest for i in n.inputs if i and i not in ready})
            raise GraphError(f"graph has a cycle or undefined values: {', '.join(missing[:5])}")
        pending = rest
    return order
