"""Fused subgraphs as workloads, built from a JSON description so the records database can rebuild
them (``autotune.te.workload_from_description``) without the model they came from.

A description::

    {"op": "graph_subgraph", "name": "conv2d_bias_add_relu",
     "params": {"out": "1x56x56x64", ...},            # for labels only (or [name, value] pairs)
     "inputs": [{"shape": [1, 56, 56, 64], "dtype": "float32", "range": [-1, 1]},
                {"shape": [3, 3, 64, 64], "dtype": "float32", "range": [-1, 1], "const": true}, ...],
     "nodes": [{"op": "Conv", "attrs": {...}, "args": [["in", 0], ["in", 1], ["in", 2]]},
               {"op": "Add", "attrs": {}, "args": [["node", 0], ["in", 3]]},
               {"op": "Relu", "attrs": {}, "args": [["node", 1]]}]}

A node may carry a ``name`` for its stage (default: the op and its position) and an input a
``name`` (the named workloads' A, B, data, weight...); names are not part of the key. An input
marked ``const`` is a weight of the model (a CPU schedule may pre-tile it at compile time).
An arg is ``["in", i]`` (a workload input), ``["node", j]`` (an earlier node's output),
``["scalar", v]`` (a constant folded into the expression; a non-finite float by its
name, "-inf") or ``null`` (an omitted optional input).
The last node's output is the workload's one output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune import te
from autotune.te.registry import register_description
from autotune.te.workload import Workload

from .ir import GraphError, Node
from .ops import build_te, evaluate

OP_NAME = "graph_subgraph"


@dataclass(repr=False)
class SubgraphWorkload(Workload):
    """A Workload whose description is the subgraph itself."""

    spec: dict = field(default_factory=dict)

    def description(self) -> dict:
        return self.spec

    def __repr__(self) -> str:
        return f"SubgraphWorkload({self.name}, {self.params}, key={self.key})"


def _resolve(arg: Any, inputs: list, values: list) -> Any:
    if arg is None:
        return None
    kind, v = arg[0], arg[1]
    if kind == "in":
        return inputs[int(v)]
    if kind == "node":
        return values[int(v)]
    if kind == "scalar":
        # a folded constant: ["scalar", v] is float32, ["scalar", v, dtype] any other type; a
        # non-finite float is stored by name ("-inf")
        v = float(v) if isinstance(v, str) else v
        return v if len(arg) == 2 else np.asarray(v, dtype=arg[2])
    raise GraphError(f"bad subgraph argument {arg!r}")


def reference(spec: dict, *arrays: np.ndarray) -> list[np.ndarray]:
    """Evaluate a subgraph description with numpy (the dtype of ``arrays``)."""
    values: list[np.ndarray] = []
    dtype = next((a.dtype for a in arrays if a.dtype.kind == "f"), np.dtype(np.float64))
    for j, nd in enumerate(spec["nodes"]):
        args = []
        for a in nd["args"]:
            r = _resolve(a, list(arrays), values)
            args.append(np.asarray(r, dtype=dtype) if isinstance(r, float) else r)
        node = Node(nd["op"], [f"a{i}" for i in range(len(args))], [f"n{j}"], dict(nd["attrs"]), f"n{j}")
        values.append(evaluate(node, args)[0])
    return [values[-1]]


def build_workload(spec: dict) -> SubgraphWorkload:
    """The workload of a subgraph description (tensor names are canonical, so rebuilding gives the
    same structural key)."""
    if spec.get("op") != OP_NAME or not spec.get("nodes"):
        raise GraphError(f"not a {OP_NAME} description")
    inputs = [
        te.placeholder(tuple(d["shape"]), d.get("dtype", "float32"), name=d.get("name", f"in{i}"))
        for i, d in enumerate(spec["inputs"])
    ]
    values: list[te.Tensor] = []
    for j, nd in enumerate(spec["nodes"]):
        args = [_resolve(a, inputs, values) for a in nd["args"]]
        values.append(build_te(nd["op"], nd["attrs"], args, nd.get("name") or f"{nd['op'].lower()}{j}"))
    ranges = [tuple(d.get("range", (-1.0, 1.0))) for d in spec["inputs"]]
    return SubgraphWorkload(
        name=spec.get("name", "subgraph"),
        inputs=inputs,
        outputs=[values[-1]],
        reference=lambda *arrays: reference(spec, *arrays),
        params=dict(spec.get("params", {})),
        input_ranges=ranges,
        const_inputs=tuple(i for i, d in enumerate(spec["inputs"]) if d.get("const")),
        spec=spec,
    )


register_description(OP_NAME, build_workload)
