"""What the rewriting passes share: reading scalars, adding constants and values, renaming uses,
bypassing a node (Identity and Dropout removed), and replacing nodes of some types by what a
function emits."""


from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir import Graph, Node, TensorType, contiguous
from .infer import eliminate_dead_code, infer_types


# --- helpers ----------------------------------------------------------------------------------------
def scalar(g: Graph, value: str) -> float | None:
    """The value of a one-element constant, else None."""
    arr = g.consts.get(value)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(-1)[0])


def _add_const(g: Graph, base: str, arr: np.ndarray) -> str:
    name = g.fresh_name(base)
    arr = contiguous(arr)
    g.consts[name] = arr
    g.types[name] = TensorType(tuple(arr.shape), str(arr.dtype))
    return name


def _new_value(g: Graph, base: str, t: TensorType) -> str:
    name = g.fresh_name(base)
    g.types[name] = t
    return name


def _rename_uses(g: Graph, old: str, new: str) -> None:
    for n in g.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
    g.outputs = [new if o == old else o for o in g.outputs]


def _bypass(g: Graph, node: Node) -> bool:
    """Remove a node whose output equals its first input; False if that cannot be expressed
    (both are graph-level names that must stay distinct)."""
    x, y = node.inputs[0], node.outputs[0]
    if y not in g.outputs:
        g.nodes.remove(node)
        _rename_uses(g, y, x)
        return True
    producer = g.producer().get(x)
    consumers = g.consumers().get(x, [])
    if producer is not None and x not in g.outputs and consumers == [node]:
        g.nodes.remove(node)
        producer.outputs = [y if o == x else o for o in producer.outputs]
        g.types[y] = g.types[x]
        return True
    return False


class _Emitter:
    """Writes the nodes a lowering replaces one node by: values and node names prefixed by its name."""

    def __init__(self, g: Graph, out: list[Node], prefix: str) -> None:
        self.g, self.out, self.prefix = g, out, prefix

    def node(self, op: str, ins: list[str], t: TensorType, base: str, attrs: dict | None = None,
             dst: str = "") -> str:
        v = dst or _new_value(self.g, f"{self.prefix}_{base}", t)
        self.out.append(Node(op, ins, [v], attrs or {}, self.g.fresh_name(f"{self.prefix}_{base}")))
        return v

    def const(self, base: str, arr: np.ndarray) -> str:
        return _add_const(self.g, f"{self.prefix}_{base}", arr)


def _lower_nodes(graph: Graph, ops: tuple[str, ...], lower: Callable[[Graph, Node, _Emitter], None],
                 where: Callable[[Graph, Node], bool] = lambda g, n: True) -> Graph:
    """Every node of ``ops`` (for which ``where`` holds) replaced by the nodes ``lower`` emits for it
    (the others kept, in order)."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op in ops and where(g, n):
            lower(g, n, _Emitter(g, out, n.name))
        else:
            out.append(n)
    g.nodes = out
    return infer_types(remove_identities(eliminate_dead_code(g)))


def remove_identities(graph: Graph) -> Graph:
    """Identity and inference Dropout nodes disappear (uses read their input)."""
    g = graph.copy()
    for n in [n for n in g.nodes if n.op in ("Identity", "Dropout")]:
        _bypass(g, n)
    return g
