"""A numpy interpreter of the graph IR: the reference the passes are checked against."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .ir import Graph, GraphError
from .ops import evaluate


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``graph`` node by node on ``feeds`` (input name -> array); returns its outputs."""
    values: dict[str, np.ndarray] = dict(graph.consts)
    for name in graph.inputs:
        if name not in feeds:
            raise GraphError(f"missing input {name!r}")
        values[name] = np.asarray(feeds[name])
    for n in graph.nodes:
        outs = evaluate(n, [values[i] if i else None for i in n.inputs])
        for o, v in zip(n.outputs, outs):
            if o:
                values[o] = v
    return [values[o] for o in graph.outputs]
