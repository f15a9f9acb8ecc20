"""Valid random values for a graph's inputs: what a test or a benchmark feeds a model.

Integer inputs are mostly indices (token ids into an embedding, positions) or masks; random values
must stay within what they index, or the model reads out of bounds."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from autotune.te.workload import numpy_dtype

from .ir import Graph, Node

# ops whose operand 1 holds indices into operand 0 (along ``axis``, or its leading dims for GatherND)
INDEXING_OPS = ("Gather", "GatherElements", "GatherND")
# ops a value passes through unchanged as an index (views and casts)
_PASS_THROUGH = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Expand", "Transpose")


def index_bound(node: Node, data_shape: tuple[int, ...]) -> int:
    if node.op == "GatherND":
        b = int(node.attrs.get("batch_dims", 0))
        return min(data_shape[b:] or (1,))
    return data_shape[int(node.attrs.get("axis", 0)) % max(len(data_shape), 1)]


def index_bounds(graph: Graph) -> dict[str, int]:
    """Value -> exclusive upper bound of the indices it holds, for every value (and the values it
    flows from through views and casts) that a Gather reads as indices."""
    producer = graph.producer()
    bounds: dict[str, int] = {}
    for n in graph.nodes:
        if n.op not in INDEXING_OPS or len(n.inputs) < 2 or n.inputs[0] not in graph.types:
            continue
        b = index_bound(n, graph.types[n.inputs[0]].shape)
        v = n.inputs[1]
        while v:
            bounds[v] = min(bounds.get(v, b), b)
            p = producer.get(v)
            v = p.inputs[0] if p is not None and p.op in _PASS_THROUGH and p.inputs else ""
    return bounds


def random_inputs(graph: Graph, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Random inputs of the graph's types: floats standard normal (16-bit where a 16-bit model
    declares it), indices within their bound, other integers 0 or 1 (masks, flags), bools either way."""
    rng = rng or np.random.default_rng(0)
    bounds = index_bounds(graph)
    out: dict[str, np.ndarray] = {}
    for j, name in enumerate(graph.inputs):
        t = graph.types[name]
        if t.dtype == "bool":
            out[name] = rng.integers(0, 2, size=t.shape).astype(bool)
        elif t.dtype.startswith(("int", "uint")):
            out[name] = rng.integers(0, bounds.get(name, 2), size=t.shape).astype(numpy_dtype(t.dtype))
        else:
            dtype = dict(graph.declared_inputs).get(j, t.dtype)
            out[name] = rng.standard_normal(t.shape).astype(numpy_dtype(dtype))
    return out


def describe(feeds: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{k}: {v.dtype}[{'x'.join(map(str, v.shape))}]" for k, v in feeds.items())
