"""A region of an ATen FX graph (a set of its ``call_function`` nodes) -> a typed graph of the IR.

Values that the region reads from outside become graph inputs, except ``get_attr`` nodes (weights,
buffers, lifted constants), which become constants; values that nodes outside the region read (or
the FX graph returns) become graph outputs. Typing runs the operator definitions' inference, so an
attribute an operator definition refuses is reported here, naming the FX node it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from autotune.graph.ir import Graph, GraphError
from autotune.graph.passes import eliminate_dead_code, infer_types

from .aten import CONVERTERS, Emitter, as_numpy, static_type


class RegionError(GraphError):
    """FX nodes of a region that the graph IR cannot take, by FX node name -> reason."""

    def __init__(self, problems: dict[str, str]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))


@dataclass
class Region:
    """An FX region as a graph: its inputs and outputs are these FX nodes, in graph order."""

    graph: Graph
    inputs: list[torch.fx.Node]
    outputs: list[torch.fx.Node]


def attr_value(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def frozen(t: torch.Tensor) -> np.ndarray:
    """A numpy copy of a weight (the compiled module keeps it; later changes to the tensor are not seen)."""
    return np.array(as_numpy(t), copy=True)


def region_graph(gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node], name: str) -> Region:
    """Convert ``nodes`` (in graph order) of ``gm`` to a typed, dead-code-free graph; RegionError names
    every node that failed."""
    inside = set(nodes)
    cx = Emitter()
    inputs: list[torch.fx.Node] = []
    problems: dict[str, str] = {}
    for node in nodes:
        for src in node.all_input_nodes:
            if src in inside or src in cx.names:
                continue
            vname = f"in_{src.name}"
            if src.op == "get_attr":
                value = attr_value(gm, str(src.target))
                if not isinstance(value, torch.Tensor):
                    problems[node.name] = f"attribute {src.target} is not a tensor"
                    continue
                arr = frozen(value)
                vname = f"w_{src.target}"
                cx.consts[vname] = arr if arr.dtype != np.float64 else arr.astype(np.float32)
            else:
                try:
                    cx.types[vname] = t = static_type(src.meta["val"])
                except (GraphError, KeyError) as err:
                    problems[node.name] = f"input {src.name}: {err}"
                    continue
                if 0 in t.shape:  # it holds nothing: known now, as an ONNX model's 0-sized input
                    cx.consts[vname] = np.zeros(t.shape, t.dtype)
                inputs.append(src)
            cx.names[src] = [vname]
    emitted: dict[str, str] = {}  # IR node name prefix -> FX node name
    for node in nodes:
        if node.name in problems or any(s not in cx.names for s in node.all_input_nodes):
            continue  # downstream of a problem already named: tried again once that node is outside
        cx.current = node.name
        try:
            out = CONVERTERS[node.target](cx, node)
        except (GraphError, KeyError, TypeError, ValueError, IndexError) as err:
            problems[node.name] = f"{node.target}: {err}"
            continue
        cx.names[node] = [out] if isinstance(out, str) else list(out)
        emitted[node.name] = node.name
    if problems:
        raise RegionError(problems)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    out_names: list[str] = []
    for n in outputs:
        v = cx.value(n)
        if v in out_names or v in cx.consts or v in cx.types:  # an output held elsewhere: its own copy
            cx.current = n.name
            v = cx.one("Identity", [v])
        out_names.append(v)
    graph = Graph(name, [cx.names[i][0] for i in inputs], out_names, cx.nodes, dict(cx.types), cx.consts)
    found: list[str] = []
    typed = infer_types(graph, fold=True, problems=found)
    if found:
        raise RegionError(_blame(found, emitted, nodes))
    typed.validate()
    _check_types(typed, outputs)
    return Region(eliminate_dead_code(typed), inputs, outputs)


def _blame(found: list[str], emitted: dict[str, str], nodes: Sequence[torch.fx.Node]) -> dict[str, str]:
    """Typing problems by the FX node whose IR nodes they name (IR node names start ``<fx name>:``)."""
    out: dict[str, str] = {}
    for msg in found:
        who = next((fx for fx in sorted(emitted, key=len, reverse=True) if f"'{fx}:" in msg), None)
        out[who or nodes[0].name] = msg
    return out


def _check_types(graph: Graph, outputs: Sequence[torch.fx.Node]) -> None:
    """The IR's inferred output types are the FX graph's (a wrong mapping is refused, never run)."""
    for v, n in zip(graph.outputs, outputs):
        want = static_type(n.meta["val"])
        if graph.types[v] != want:
            raise RegionError({n.name: f"converts to {graph.types[v]}, PyTorch computes {want}"})
