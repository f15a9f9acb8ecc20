"""Task extraction: each fused group becomes a workload (a subgraph description rebuilt into te);
structurally identical groups share one task whose weight is the number of occurrences."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .feeds import INDEXING_OPS, index_bound
from .fusion import Group
from .inplace import View
from .ir import Graph, GraphError, Node
from .ops import ALIAS, describe_attrs, op_def
from .subgraph import OP_NAME, SubgraphWorkload, build_workload

# operand positions that must stay positive in random tuning inputs (denominators, roots)
_POSITIVE = {"Div": (1,), "Mod": (1,), "Sqrt": (0,), "Reciprocal": (0,), "Pow": (0,), "Log": (0,)}
# ops whose result is positive when their computed operands are (a norm's mean of squares + eps
# before its square root); views too
_KEEP_POSITIVE = {"Add", "Mul", "Max", "Min", "Sqrt", "Exp", "Abs", "ReduceMean", "ReduceSum",
                  "ReduceMax", "ReduceMin"}


def _positive_inputs(group: Group, g: Graph) -> set[str]:
    """Values the group reads that random inputs must keep positive: the operands that must be
    positive, and the inputs they are computed from through ops that keep a positive sign."""
    producer = {o: n for n in group.nodes for o in n.outputs}
    stack = [n.inputs[p] for n in group.nodes for p in _POSITIVE.get(n.op, ()) if p < len(n.inputs)]
    need: set[str] = set()
    while stack:
        v = stack.pop()
        if not v or v in need or v in g.consts:
            continue
        need.add(v)
        n = producer.get(v)
        if n is not None and (n.op in _KEEP_POSITIVE or op_def(n.op).kind == ALIAS):
            stack.extend(n.inputs)
    return need

_SHORT = {
    "Conv": "conv2d",
    "MatMul": "matmul",
    "LayerNormalization": "layernorm",
    "GlobalAveragePool": "global_avg_pool",
    "MaxPool": "max_pool",
    "AveragePool": "avg_pool",
    "WinogradInput": "winograd_in",
    "WinogradOutput": "winograd_out",
    "StrassenInput": "strassen_in",
    "StrassenOutput": "strassen_out",
}


@dataclass
class Task:
    """One workload to tune; ``weight`` = how many fused groups of the model compute it."""

    workload: SubgraphWorkload
    weight: int = 1
    calls: list[int] = field(default_factory=list)  # indices of the KernelCalls using it

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def label(self) -> str:
        params = ",".join(str(v) for v in self.workload.params.values())
        return f"{self.workload.name}[{params}]"


@dataclass
class KernelCall:
    """One fused group of the model: which task computes it, on which graph values."""

    group: Group
    task: int
    args: list[str]  # graph values bound to the workload's inputs, then its output
    view: View | None = None  # the output written into a slice of another value's buffer


def _label(group: Group, g: Graph) -> str:
    parts: list[str] = []
    for n in group.nodes:
        if op_def(n.op).kind == ALIAS:
            continue
        s = _SHORT.get(n.op, n.op.lower())
        if n.op == "MatMul" and all(i not in g.consts for i in n.inputs):
            s = "batch_matmul"
        if n.op == "Conv" and len(n.inputs) > 2 and n.inputs[2]:
            s += "_bias"
        parts.append(s)
    name = re.sub(r"[^0-9a-zA-Z_]", "_", "_".join(parts))
    return name[:48].rstrip("_") or "subgraph"


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in shape) or "1"


def _json_number(x: Any) -> Any:
    """A folded scalar as the description stores it: a number, or a non-finite float as its name
    ("inf", "-inf", "nan"; strict JSON has no literal for them: an attention mask's -inf)."""
    return x if not isinstance(x, float) or math.isfinite(x) else repr(x)


def group_spec(group: Group, g: Graph) -> tuple[dict, list[str]]:
    """The canonical description of a group and the graph values bound to its inputs.

    Nodes are listed in depth-first post-order from the output and inputs numbered in first-visit
    order, so identical subgraphs give identical descriptions wherever they sit in the model."""
    producer = {o: n for n in group.nodes for o in n.outputs}
    positive = _positive_inputs(group, g)
    node_index: dict[int, int] = {}
    nodes: list[dict] = []
    inputs: list[str] = []
    ranges: dict[str, tuple[float, float]] = {}

    def arg(v: str, user: Node, pos: int) -> list | None:
        if not v:
            return None
        if v in producer:
            return ["node", visit(producer[v])]
        if (v in g.consts and g.consts[v].size == 1 and g.consts[v].dtype.kind in "fiub"
                and op_def(user.op).takes_literal(pos)):
            c = g.consts[v]
            if c.dtype == np.float32:
                return ["scalar", _json_number(float(c.reshape(-1)[0]))]
            return ["scalar", _json_number(c.reshape(-1)[0].item()), str(c.dtype)]
        if v not in inputs:
            inputs.append(v)
        if v in positive:
            ranges[v] = (1, 4) if g.types[v].dtype.startswith(("int", "uint")) else (0.5, 1.5)
        if user.op in INDEXING_OPS and pos == 1 and user.inputs[0] in g.types:
            ranges[v] = (0, index_bound(user, g.types[user.inputs[0]].shape))
        return ["in", inputs.index(v)]

    def visit(n: Node) -> int:
        if id(n) in node_index:
            return node_index[id(n)]
        if op_def(n.op).kind == ALIAS:  # a view inside the kernel: Reshape to its result shape
            shape = [int(d) for d in g.types[n.outputs[0]].shape]
            nodes.append({"op": "Reshape", "attrs": {"_shape": shape}, "args": [arg(n.inputs[0], n, 0)]})
            node_index[id(n)] = len(nodes) - 1
            return node_index[id(n)]
        args = [arg(v, n, p) for p, v in enumerate(n.inputs)]
        while args and args[-1] is None:
            args.pop()
        nodes.append({"op": n.op, "attrs": describe_attrs(_kernel_attrs(n)), "args": args})
        node_index[id(n)] = len(nodes) - 1
        return node_index[id(n)]

    visit(producer[group.output])
    if len(nodes) != len(group.nodes):
        raise GraphError(f"group {group} is not connected to its output")
    # keys in sorted order: the records DB stores descriptions with sorted keys, labels stay the same
    params = {}
    anchor = next((n for n in group.nodes if n.op in ("Conv", "MatMul")), None)
    if anchor is not None:
        params["a"] = _dims(g.types[anchor.inputs[0]].shape)
        params["b"] = _dims(g.types[anchor.inputs[1]].shape)
    params["out"] = _dims(g.types[group.output].shape)
    spec = {
        "op": OP_NAME,
        "name": _label(group, g),
        "params": params,
        "inputs": [
            {
                "shape": list(g.types[v].shape),
                "dtype": g.types[v].dtype,
                "range": list(ranges.get(v, (-1.0, 1.0))),
                **({"const": True} if v in g.consts else {}),
            }
            for v in inputs
        ],
        "nodes": nodes,
    }
    return spec, inputs


def _kernel_attrs(n: Node) -> dict:
    """Attributes that shape the computation (names and doc strings dropped)."""
    return {k: v for k, v in n.attrs.items() if k not in ("name", "doc_string")}


def extract_tasks(groups: list[Group], g: Graph,
                  views: dict[str, View] | None = None) -> tuple[list[Task], list[KernelCall]]:
    """Tasks (deduplicated by description, so by structural key) and one call per group, in order;
    a group whose output has a view in ``views`` writes through it (``graph.inplace``)."""
    views = views or {}
    tasks: list[Task] = []
    by_spec: dict[str, int] = {}
    calls: list[KernelCall] = []
    for grp in groups:
        spec, inputs = group_spec(grp, g)
        blob = json.dumps(spec, sort_keys=True)
        if blob not in by_spec:
            by_spec[blob] = len(tasks)
            tasks.append(Task(build_workload(spec), 0))
        t = by_spec[blob]
        tasks[t].weight += 1
        tasks[t].calls.append(len(calls))
        calls.append(KernelCall(grp, t, inputs + [grp.output], views.get(grp.output)))
    return tasks, calls
