"""Concatenations computed in place: every producer of a Concat's inputs writes straight into its
slice of the concatenated buffer, and the Concat's copy kernel goes away.

A producer so placed keeps its task (the same computation, tuned as usual); only its compiled
program differs: its output is addressed through a ``View``, the concatenation's shape with the
slice's offset (``autotune.ir.lower``), so a channel slice of an NHWC concatenation is written at
the concatenation's row pitch. The memory plan gives the slice values the concatenation's storage.

A Concat is placed in place only when each of its inputs is the output of a kernel read by nothing
but this Concat (not a graph output, an alias, a constant, an input or a repeated operand) and its
fused group is the Concat alone; otherwise it stays a copy kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fusion import Group
from .ir import Graph
from .ops.base import norm_axis


@dataclass(frozen=True)
class View:
    """Where a kernel's output is written: into the buffer of value ``into`` (of ``shape``),
    starting at ``offset`` (one index per axis)."""

    into: str
    shape: tuple[int, ...]
    offset: tuple[int, ...]


def _slices(group: Group, graph: Graph, made_by_kernel: set[str],
            consumers: dict[str, list]) -> dict[str, View] | None:
    """The views of a lone Concat's inputs, or None when it cannot be computed in place."""
    if len(group.nodes) != 1 or group.nodes[0].op != "Concat":
        return None
    node, out = group.nodes[0], group.output
    inputs = list(node.inputs)
    if not inputs or len(set(inputs)) != len(inputs) or not all(inputs):
        return None
    out_t = graph.types[out]
    axis = norm_axis(int(node.attrs.get("axis", 0)), len(out_t.shape), "Concat")
    views: dict[str, View] = {}
    start = 0
    for v in inputs:
        t = graph.types[v]
        alone = [id(n) for n in consumers.get(v, [])] == [id(node)]
        if (v not in made_by_kernel or v in graph.outputs or not alone or t.dtype != out_t.dtype
                or math.prod(t.shape) == 0):
            return None
        offset = [0] * len(out_t.shape)
        offset[axis] = start
        views[v] = View(out, out_t.shape, tuple(offset))
        start += t.shape[axis]
    return views


def concats_in_place(groups: list[Group], graph: Graph) -> tuple[list[Group], dict[str, View]]:
    """The groups without the Concats computed in place, and the view each of their inputs'
    producers writes through (value -> View)."""
    made_by_kernel = {g.output for g in groups}
    consumers = graph.consumers()
    kept: list[Group] = []
    views: dict[str, View] = {}
    for g in groups:
        found = _slices(g, graph, made_by_kernel, consumers)
        if found is None:
            kept.append(g)
        else:
            views.update(found)
            made_by_kernel.discard(g.output)  # an enclosing Concat cannot take it in place too
    return kept, views
