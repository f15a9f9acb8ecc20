"""Type inference, constant folding and dead-code elimination of a Graph."""


from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphError, Node, TensorType, contiguous
from ..ops import (
    ALIAS,
    ELEMWISE,
    FOLD,
    FOLD_LIMIT_BYTES,
    REWRITE,
    evaluate,
    op_def,
)


# --- inference and folding ------------------------------------------------------------------------
def infer_types(graph: Graph, fold: bool = False, problems: list[str] | None = None) -> Graph:
    """Recompute the type of every value. Shape computations (``fold``-kind ops) are always
    evaluated; with ``fold`` every node whose inputs are all constants is evaluated too.

    With a ``problems`` list, a node that cannot be typed adds its error there and inference goes on
    (nodes reading its outputs are skipped), so every problem of a model is found in one run; the
    returned graph is then incomplete and only good for reporting."""
    g = graph.copy()
    types = {v: g.types[v] for v in g.inputs if v in g.types}
    for k, arr in g.consts.items():
        types[k] = TensorType(tuple(arr.shape), str(arr.dtype))
    nodes: list[Node] = []
    poisoned = {v for v in g.inputs if v not in g.types}
    empty = {v for v in g.inputs if v in g.consts and g.consts[v].size == 0}  # 0-sized model inputs
    for n in g.nodes:
        if problems is not None:
            if any(i in poisoned or i not in types for i in n.inputs if i):
                poisoned.update(o for o in n.outputs if o)
                continue
            try:
                _infer_node(g, n, types, nodes, fold, empty)
            except GraphError as err:
                problems.append(str(err))
                poisoned.update(o for o in n.outputs if o)
            continue
        _infer_node(g, n, types, nodes, fold, empty)
    g.nodes = nodes
    g.types = types
    if problems is None:
        g.validate()
    return g


def _stand_ins(in_types: list, in_consts: list) -> list[np.ndarray | None]:
    """A node's operands for evaluating what depends only on shapes: constants as they are, run-time
    values as read-only zero views of their type (no memory)."""
    out: list[np.ndarray | None] = []
    for t, c in zip(in_types, in_consts):
        if c is not None:
            out.append(np.asarray(c))
        else:
            out.append(None if t is None else np.broadcast_to(np.zeros((), t.dtype), t.shape))
    return out


def _type_node(
    g: Graph, n: Node, types: dict[str, TensorType], nodes: list[Node], fold: bool, empty: set[str]
) -> None:
    """Type (or fold) one node: its outputs' types go into ``types``, the node into ``nodes`` unless
    folded into constants of ``g``. An output known without running the model becomes a constant:
    one with a 0-sized dim (it holds nothing) or one the operator computes from its operands' shapes
    alone (``OpDef.shape_only_outputs``: Shape, EyeLike, Dropout's mask). ``empty`` holds the values
    emptied by the data flow (0-sized model inputs, empty results and what folds from them); a kernel
    may not read one."""
    if (n.op in ("ScatterND", "ScatterElements") and len(n.inputs) == 3
            and all(i in types and 0 in types[i].shape for i in n.inputs[1:])):
        # no index and no update (an assignment to an empty slice: Swin3D's window mask): the data
        n.op, n.inputs, n.attrs = "Identity", n.inputs[:1], {}
    d = op_def(n.op)
    in_types = [types.get(i) if i else None for i in n.inputs]
    for i, t in zip(n.inputs, in_types):
        if i and t is None:
            raise GraphError(f"node {n.name!r} ({n.op}) reads {i!r}, which is not defined before it")
    in_consts = [g.consts.get(i) if i else None for i in n.inputs]
    live_consts = [c for i, c in zip(n.inputs, in_consts) if i]
    all_const = all(c is not None for c in live_consts)
    present = [k for k, o in enumerate(n.outputs) if o]
    shape_only = bool(present) and set(present) <= set(d.shape_only_outputs)
    if shape_only or (all_const and (d.kind == FOLD or (fold and live_consts))):
        out_types = d.infer(n, in_types, in_consts)
        size = sum(t.nbytes for o, t in zip(n.outputs, out_types) if o)
        if size > FOLD_LIMIT_BYTES:
            raise GraphError(
                f"{n.op} node {n.name!r}: folding it at import would make a {size >> 20} MiB constant"
            )
        vals = evaluate(n, _stand_ins(in_types, in_consts))
        for o, v in zip(n.outputs, vals):
            if o:
                arr = contiguous(v)
                g.consts[o] = arr
                types[o] = TensorType(tuple(arr.shape), str(arr.dtype))
                if arr.size == 0 and any(i in empty for i in n.inputs):  # emptiness flows on
                    empty.add(o)
        return
    outs = d.infer(n, in_types, in_consts)
    if any(0 in t.shape for o, t in zip(n.outputs, outs) if o):
        for o, t in zip(n.outputs, outs):  # empty results: constants, whatever the operands hold
            if o and 0 in t.shape:
                g.consts[o] = np.zeros(t.shape, t.dtype)
                types[o] = t
                empty.add(o)
        n.outputs = [o if o not in g.consts else "" for o in n.outputs]
        if not any(n.outputs):
            return
    if n.op == "Concat":  # an empty piece adds nothing (a decoder's past of length 0)
        n.inputs = [i for i in n.inputs if i not in empty]
    if d.kind not in (ALIAS, FOLD, REWRITE) and any(o and t.shape == () for o, t in zip(n.outputs, outs)):
        if _scalar_form(n, d.kind, len(in_types[0].shape) if in_types and in_types[0] else 0) is None:
            raise GraphError(f"{n.op} node {n.name!r}: a 0-d result computed at run time is not compiled")
    params = set(d.const_operands)
    for k, i in enumerate(n.inputs):
        if i in empty and k not in params and d.kind != ALIAS:
            raise GraphError(f"{n.op} node {n.name!r}: operand {i!r} is empty (a 0-sized dim): not compiled")
    static = [k for k in d.shape_only_outputs if k < len(n.outputs) and n.outputs[k]]
    if static:
        vals = evaluate(n, _stand_ins(in_types, in_consts))
        for k in static:
            g.consts[n.outputs[k]] = contiguous(vals[k])
            types[n.outputs[k]] = outs[k]
        n.outputs = ["" if k in static else o for k, o in enumerate(n.outputs)]
    for o, t in zip(n.outputs, outs):
        if o:
            types[o] = t
    nodes.append(n)


_MALFORMED = (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, OverflowError)


def _infer_node(
    g: Graph, n: Node, types: dict[str, TensorType], nodes: list[Node], fold: bool, empty: set[str]
) -> None:
    """:func:`_type_node`, with malformed attribute or operand values reported as a GraphError."""
    try:
        _type_node(g, n, types, nodes, fold, empty)
    except GraphError:
        raise
    except _MALFORMED as err:
        raise GraphError(f"{n.op} node {n.name!r}: malformed attributes or operands ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else 'no detail'})") from None


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node whose inputs are all constants; its outputs become constants."""
    return eliminate_dead_code(infer_types(graph, fold=True))


def eliminate_dead_code(graph: Graph) -> Graph:
    """Keep only the nodes and constants some graph output depends on (inputs are kept)."""
    g = graph.copy()
    needed = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if any(o in needed for o in n.outputs if o):
            kept.append(n)
            needed.update(i for i in n.inputs if i)
    g.nodes = kept[::-1]
    g.consts = {k: v for k, v in g.consts.items() if k in needed}
    live = set(g.inputs) | set(g.consts) | {o for n in g.nodes for o in n.outputs if o}
    g.types = {k: t for k, t in g.types.items() if k in live}
    return g


def _scalar_form(n: Node, kind: str, rank: int) -> str | None:
    """How a kernel with a 0-d result computes it as shape (1, ...): ``keepdims`` (a reduction of an
    operand of ``rank`` > 0 keeps its reduced dims), ``operands`` (an elementwise op reads its 0-d
    operands as (1,)), ``indices`` (a Gather of a 0-d index reads it as (1,)), ``vectors`` (a product
    of two vectors: ``matmul_vectors_to_matrices``); None: not compiled."""
    if n.op == "MatMul":
        return "vectors"
    if n.op.startswith("Reduce") or n.op in ("ArgMax", "ArgMin"):
        return "keepdims" if rank else None
    if kind == ELEMWISE:
        return "operands"
    return "indices" if n.op == "Gather" else None
