"""Small graphs for tests: nodes, input shapes and constants in, a typed Graph out."""

from __future__ import annotations

import numpy as np

from autotune.graph import passes
from autotune.graph.ir import Graph, Node, TensorType


def build_graph(nodes: list[Node], inputs: dict[str, tuple], outputs: list[str], consts: dict,
                name: str = "g") -> Graph:
    """The graph of ``nodes`` with float32 inputs of the given shapes and these constants (arrays
    or anything numpy makes one of), its value types inferred."""
    consts = {k: np.asarray(v) for k, v in consts.items()}
    types = {k: TensorType(tuple(s)) for k, s in inputs.items()}
    types.update({k: TensorType(tuple(v.shape), str(v.dtype)) for k, v in consts.items()})
    return passes.infer_types(Graph(name, list(inputs), outputs, nodes, types, consts))
