"""Views moved out of the way of fusion.

A view (Reshape, Flatten, Squeeze, Unsqueeze) between a kernel and the elementwise op that follows
it splits them into two kernels: the epilogue of a product sits behind the reshape that exporters
write around it (GPT-2's ``addmm`` on a flattened view, then the residual add in the unflattened
shape; ViT's attention output). ``sink_views`` computes such an elementwise op in the view's source
shape and views its result instead, so the op becomes the kernel's epilogue:

    y = Add(Reshape(matmul_out), residual)
 -> y = Reshape(Add(matmul_out, Reshape(residual)))

The other operands are viewed in the source shape too: a full-size one by a Reshape (no copy), a
broadcast one (a bias) when the view keeps the dims it spans, a one-element one as it is.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorType
from ..ops import ALIAS, ELEMWISE, op_def
from .infer import eliminate_dead_code, infer_types
from .rewrite import _add_const, _bypass, _new_value

_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _view_root(g: Graph, view: Node, prod: dict[str, Node], cons: dict[str, list[Node]]) -> str | None:
    """The value a chain of views ending in ``view`` starts from, when a kernel computes it and
    nothing else reads it or the chain's intermediate values."""
    v = view.inputs[0]
    while v in prod and prod[v].op in _VIEWS:
        if len(cons.get(v, [])) != 1 or v in g.outputs:
            return None
        v = prod[v].inputs[0]
    if v not in prod or op_def(prod[v].op).kind == ALIAS or len(cons.get(v, [])) != 1 or v in g.outputs:
        return None
    return v


def _operand_in(
    shape_out: tuple[int, ...], shape_src: tuple[int, ...], y: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The shape an operand of shape ``y``, broadcast against ``shape_out``, takes against
    ``shape_src`` (the same elements of the flattened result), or None if no view gives it."""
    if int(np.prod(y, dtype=np.int64)) == 1:
        return (1,) * min(len(y), len(shape_src))
    if tuple(y) == tuple(shape_out):
        return tuple(shape_src)
    padded = (1,) * (len(shape_out) - len(y)) + tuple(y)
    first = next(i for i, d in enumerate(padded) if d != 1)
    k = len(shape_out) - first
    if k > len(shape_src) or tuple(shape_out[first:]) != tuple(shape_src[len(shape_src) - k:]):
        # an operand as large as the last dims it spans (no broadcast inside them): the same
        # elements in the source's last dims of that size (a bias over a row the view splits)
        span = int(np.prod(shape_out[first:], dtype=np.int64))
        if tuple(padded[first:]) != tuple(shape_out[first:]):
            return None
        for j in range(len(shape_src) - 1, -1, -1):
            if int(np.prod(shape_src[j:], dtype=np.int64)) == span:
                return tuple(shape_src[j:])
        return None
    if any(a != b for a, b in zip(padded[first:], shape_out[first:]) if a != 1):
        return None
    return tuple(padded[first:])


def _viewed(g: Graph, y: str, shape: tuple[int, ...], out: list[Node], base: str, keep: list[Node]) -> str:
    """``y`` as ``shape`` (same elements): itself, a reshaped constant or a new Reshape view (put in
    ``keep``: it is never sunk, or two operands' views could sink in turn for ever)."""
    t = g.types[y]
    if tuple(t.shape) == shape:
        return y
    if y in g.consts:
        return _add_const(g, f"{base}_viewed", g.consts[y].reshape(shape))
    spec = _add_const(g, f"{base}_shape", np.asarray(shape, dtype=np.int64))
    v = _new_value(g, f"{base}_viewed", TensorType(shape, t.dtype))
    out.append(Node("Reshape", [y, spec], [v], {}, g.fresh_name(f"{base}_view")))
    keep.append(out[-1])
    return v


def _collapse_one(g: Graph, stuck: set[str]) -> bool:
    """One view of a view read from the first one's source instead, or one view that changes no
    shape removed; False when there is none."""
    prod = g.producer()
    for n in g.nodes:
        if n.op not in _VIEWS or n.name in stuck:
            continue
        x, y = n.inputs[0], n.outputs[0]
        if tuple(g.types[x].shape) == tuple(g.types[y].shape):
            if not _bypass(g, n):
                stuck.add(n.name)
            return True
        first = prod.get(x)
        if first is not None and first.op in _VIEWS:
            spec = _add_const(g, f"{n.name}_shape", np.asarray(g.types[y].shape, dtype=np.int64))
            n.op, n.inputs, n.attrs = "Reshape", [first.inputs[0], spec], {}
            if x not in g.outputs and not any(x in m.inputs for m in g.nodes):
                g.nodes.remove(first)
            return True
    return False


def _sink_one(g: Graph, keep: list[Node]) -> bool:
    """One view whose readers are all elementwise ops sunk below them; False when there is none."""
    prod, cons = g.producer(), g.consumers()
    kept = {id(n) for n in keep}
    for view in g.nodes:
        v = view.outputs[0]
        users = cons.get(v, [])
        if view.op not in _VIEWS or id(view) in kept or v in g.outputs or not users:
            continue
        shape = tuple(g.types[v].shape)
        if any(op_def(u.op).kind != ELEMWISE or tuple(g.types[u.outputs[0]].shape) != shape for u in users):
            continue
        root = _view_root(g, view, prod, cons)
        if root is None:
            continue
        src = tuple(g.types[root].shape)
        plans = [{i: _operand_in(shape, src, tuple(g.types[i].shape)) for i in u.inputs if i and i != v}
                 for u in users]
        if any(s is None for p in plans for s in p.values()):
            continue
        for u, plan in zip(users, plans):
            before: list[Node] = []
            ins = [
                root if i == v else (_viewed(g, i, plan[i], before, f"{u.name}_in{k}", keep) if i else i)
                for k, i in enumerate(u.inputs)
            ]
            y = u.outputs[0]
            computed = _new_value(g, f"{y}_unviewed", TensorType(src, g.types[y].dtype))
            spec = _add_const(g, f"{u.name}_out_shape", np.asarray(shape, dtype=np.int64))
            moved = Node(u.op, ins, [computed], dict(u.attrs), u.name)
            back = Node("Reshape", [computed, spec], [y], {}, g.fresh_name(f"{u.name}_result_view"))
            pos = g.nodes.index(u)
            g.nodes[pos: pos + 1] = before + [moved, back]
        g.nodes.remove(view)
        return True
    return False


def sink_views(graph: Graph) -> Graph:
    """Elementwise ops that read a kernel's result through views (each of the chain's values read
    by the next view alone, the last one by elementwise ops of its shape alone) are computed in
    the kernel's shape, their results viewed in the shape they had (see the module docstring)."""
    g = graph.copy()
    stuck: set[str] = set()
    keep: list[Node] = []  # operands' views (held, so their ids are not reused)
    changed = False
    # each sink moves elementwise ops above a view for good, so this ends; the bound only makes
    # sure of it (every step leaves a correct graph, so stopping early is safe)
    for _ in range(4 * len(g.nodes) + 16):
        while _collapse_one(g, stuck):
            changed = True
        if not _sink_one(g, keep):
            break
        changed = True
    return eliminate_dead_code(infer_types(g)) if changed else g
