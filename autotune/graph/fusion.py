"""Operator fusion: partition the kernel nodes of a graph into fused groups, one kernel each.

Every node that moves data (not an alias) starts in its own group; then a producer group A is
merged into a consumer group B while the rules allow it, until nothing changes. A may merge into B
only when every consumer of A's output is in B (so a group always has exactly one output, and the
merged group stays convex), and the merged group has at most one anchor or reduction. Then:

- epilogue: A holds an anchor / reduction and B is purely elementwise with A's output shape
  (conv + bias + add + relu, matmul + bias + gelu, softmax * mask ...);
- side input: A is elementwise / injective only and feeds only elementwise nodes of B (computed
  inline in B's output stage, e.g. one branch of a residual add);
- prologue: A is Transpose, Slice and constant-index Gather nodes only (reads at affine positions),
  feeding anything (the read is inlined into the consumer's index expressions, e.g. attention's
  head transposes into the batched matmul, ShuffleNet's channel half into its convolution);
- chain: A elementwise / injective only feeding an injective node of B (one copy kernel).

Then a group of index maps only that several groups read, each as a prologue it may take, is
copied into every one of them (no kernel writes its value).

Aliases (Reshape, Flatten, ...) are views: never kernels of their own. A producer read through
views merges by the same rules, the views going into the merged kernel as index maps, when nothing
else reads them: not into an anchor's epilogue (``passes.sink_views`` moves those views below the
epilogue), and into an anchor or reduction only when the view splits dims and merges none (no
division in its reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Graph, GraphError, Node
from .ops import ALIAS, ANCHOR, ELEMWISE, INJECTIVE, REDUCE, op_def
from .ops.shape import view_splits_only

# operators an anchor reads as a prologue formed tile by tile where it needs them (its schedule
# space offers that: schedules/sketch.py, TILE_PROLOGUE_TAGS), each element a few reads of one input
TILE_PROLOGUES = {"StrassenInput"}


@dataclass
class Group:
    """A fused subgraph: nodes in graph order and the one value it produces for others."""

    nodes: list[Node]
    output: str
    index: dict[int, int] = field(default_factory=dict, repr=False)  # id(node) -> graph position

    def kinds(self) -> set[str]:
        return {op_def(n.op).kind for n in self.nodes}

    @property
    def kind(self) -> str:
        k = self.kinds()
        for kind in (ANCHOR, REDUCE, ELEMWISE, INJECTIVE):
            if kind in k:
                return kind
        return INJECTIVE

    @property
    def complex(self) -> int:
        """Number of anchor / reduction nodes."""
        return sum(op_def(n.op).kind in (ANCHOR, REDUCE) for n in self.nodes)

    def external_inputs(self) -> list[str]:
        """Values read by the group and produced outside it, in first-use order."""
        inside = {o for n in self.nodes for o in n.outputs}
        out: list[str] = []
        for n in self.nodes:
            for i in n.inputs:
                if i and i not in inside and i not in out:
                    out.append(i)
        return out

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    def __repr__(self) -> str:
        return f"Group({'+'.join(self.ops)} -> {self.output})"


def is_kernel_node(n: Node) -> bool:
    kind = op_def(n.op).kind
    if kind not in (ANCHOR, ELEMWISE, INJECTIVE, REDUCE, ALIAS):
        raise GraphError(f"{n.op} node {n.name!r} must be removed by the passes before fusion")
    return kind != ALIAS


def _view_chain(v: str, producer: dict[str, Node]) -> tuple[list[Node], str]:
    """The views ``v`` is reached through (last first) and the value they start from."""
    chain: list[Node] = []
    while v in producer and op_def(producer[v].op).kind == ALIAS:
        chain.append(producer[v])
        v = producer[v].inputs[0]
    return chain, v


def _index_map(n: Node, g: Graph) -> bool:
    """Whether a node only reads its input at affine positions: a transpose, a slice, a view, or
    a gather of one constant index."""
    if n.op == "Gather":
        return n.inputs[1] in g.consts and g.consts[n.inputs[1]].size == 1
    return n.op in ("Transpose", "Slice") or op_def(n.op).kind == ALIAS


def _can_merge(a: Group, b: Group, g: Graph, consumers: dict[str, list[Node]], chain: list[Node],
               copy: bool = False) -> bool:
    """Whether ``a`` may merge into ``b``, reading ``a``'s output through the views ``chain``;
    ``copy``: ``a`` goes into ``b`` as a copy, other groups reading it too."""
    inside = {id(n) for n in b.nodes} | {id(n) for n in chain}
    for v in [a.output] + [n.outputs[0] for n in chain]:
        users = consumers.get(v, [])
        if v in g.outputs or not users or not copy and any(id(u) not in inside for u in users):
            return False
    if a.complex + b.complex > 1:
        return False
    users = consumers[chain[0].outputs[0] if chain else a.output]
    user_kinds = {INJECTIVE if op_def(u.op).kind == ALIAS else op_def(u.op).kind for u in users}
    # a view read inside an anchor / reduction must not divide its indices
    if b.complex and not all(
        view_splits_only(g.types[n.inputs[0]].shape, g.types[n.outputs[0]].shape)
        for n in chain + a.nodes if op_def(n.op).kind == ALIAS
    ):
        return False
    if chain:
        if a.complex:  # an anchor's epilogue behind a view: the view is sunk below it (sink_views)
            return False
    elif a.complex:
        return b.kinds() == {ELEMWISE} and g.types[b.output].shape == g.types[a.output].shape
    if user_kinds == {ELEMWISE}:
        return True
    if all(_index_map(n, g) for n in a.nodes):
        return True
    if b.complex and all(n.op in TILE_PROLOGUES for n in a.nodes):
        return True
    return user_kinds == {INJECTIVE} and not b.complex


def fuse(graph: Graph) -> list[Group]:
    """The fused groups of ``graph`` in execution order (by the position of their output)."""
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    groups = [Group([n], n.outputs[0], pos) for n in graph.nodes if is_kernel_node(n)]
    for grp in groups:
        if len([o for o in grp.nodes[0].outputs if o]) != 1:
            raise GraphError(f"{grp.nodes[0].op} node {grp.nodes[0].name!r}: only single-output kernels")
    consumers = graph.consumers()
    producer = graph.producer()
    changed = True
    while changed:
        changed = False
        owner = {o: grp for grp in groups for n in grp.nodes for o in n.outputs}
        for b in groups:
            for v in b.external_inputs():
                chain, root = _view_chain(v, producer)
                a = owner.get(root)
                if a is None or a is b or a.output != root or not _can_merge(a, b, graph, consumers, chain):
                    continue
                b.nodes = sorted(a.nodes + chain + b.nodes, key=lambda n: pos[id(n)])
                groups.remove(a)
                changed = True
                break
            if changed:
                break
    _copy_index_maps(groups, graph, consumers, producer, pos)
    groups.sort(key=lambda grp: pos[id(grp.nodes[-1])])
    return groups


def _copy_index_maps(groups: list[Group], g: Graph, consumers: dict[str, list[Node]],
                     producer: dict[str, Node], pos: dict[int, int]) -> None:
    """A group of index maps only (a transpose, slices, constant-index gathers) that several groups
    read, each as a prologue it may take: copied into every one of them, so no kernel writes its
    value (torch's packed attention projection: the Q, K, V split's transpose, read by the scores'
    and the context's products)."""
    for a in [grp for grp in groups if all(_index_map(n, g) for n in grp.nodes)]:
        readers: list[tuple[Group, list[Node]]] = []
        covered: set[int] = set()
        for b in groups:
            if b is a:
                continue
            for v in b.external_inputs():
                chain, root = _view_chain(v, producer)
                if root == a.output:
                    readers.append((b, chain))
                    covered |= {id(n) for n in b.nodes} | {id(n) for n in chain}
        views = {n.outputs[0] for _, chain in readers for n in chain}
        if len({id(b) for b, _ in readers}) < 2 or any(
                id(u) not in covered for v in {a.output} | views for u in consumers.get(v, [])):
            continue
        if not all(_can_merge(a, b, g, consumers, chain, copy=True) for b, chain in readers):
            continue
        for b, chain in readers:
            merged = {id(n): n for n in a.nodes + chain + b.nodes}
            b.nodes = sorted(merged.values(), key=lambda n: pos[id(n)])
        groups.remove(a)
