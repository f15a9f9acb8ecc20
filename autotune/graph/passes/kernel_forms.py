"""Nodes rewritten into the forms kernels compute: CastLike, Split, several outputs, scatters,
Einsum, 1-d MatMul operands, constant operands as attributes, 0-d results."""


from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, GraphError, Node, TensorType
from ..ops import (
    ALIAS,
    FOLD,
    REWRITE,
    op_def,
)
from .infer import _scalar_form, eliminate_dead_code, infer_types
from .lowering import _onnx_code
from .rewrite import _add_const, _new_value, remove_identities


def castlike_to_cast(graph: Graph) -> Graph:
    """CastLike -> Cast to the element type of its second operand (only the type is read), so a
    CastLike of a constant folds even where its second operand is computed at run time."""
    g = graph.copy()
    for n in g.nodes:
        if n.op == "CastLike" and len(n.inputs) > 1 and g.types.get(n.inputs[1]) is not None:
            code = _onnx_code(g.types[n.inputs[1]].dtype)
            n.op, n.inputs, n.attrs = "Cast", n.inputs[:1], {"to": code, **n.attrs}
    return infer_types(g)


def split_to_slices(graph: Graph) -> Graph:
    """Split -> one Slice per output (each a view-free copy that fuses into its consumers)."""
    from ..ops.movement import split_sizes

    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op != "Split":
            out.append(n)
            continue
        x = g.types[n.inputs[0]]
        consts = [g.consts.get(i) if i else None for i in n.inputs]
        axis, sizes = split_sizes(n, x.shape, consts)
        start = 0
        for k, (o, size) in enumerate(zip(n.outputs, sizes)):
            if o:
                attrs = {"_starts": [start], "_ends": [start + size], "_axes": [axis], "_steps": [1]}
                out.append(Node("Slice", n.inputs[:1], [o], attrs, f"{n.name}_{k}"))
            start += size
    g.nodes = out
    return infer_types(g)


def one_output_per_node(graph: Graph) -> Graph:
    """A node of an operator with several outputs (``OpDef.output_operands``: LayerNormalization's
    Mean and InvStdDev) -> one node per output it has, attribute ``_output`` its position, reading
    only the operands that output needs; each becomes its own kernel (a fused group has one output)."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        reads = op_def(n.op).output_operands
        present = [k for k, o in enumerate(n.outputs) if o]
        if not reads or "_output" in n.attrs or present == [0]:
            out.append(n)
            continue
        for k in present:
            name = n.name if k == present[0] else g.fresh_name(f"{n.name}_{k}")
            ins = n.inputs[: reads.get(k, len(n.inputs))]
            out.append(Node(n.op, ins, [n.outputs[k]], dict(n.attrs, _output=k), name))
    g.nodes = out
    return infer_types(g)


def scatter_to_table(graph: Graph) -> Graph:
    """ScatterND / ScatterElements (constant indices) -> ScatterByTable(data, flat updates, table):
    each output element reads, through a table computed here, the updates that land on it."""
    from ..ops.scatter import scatter_table

    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op not in ("ScatterND", "ScatterElements"):
            out.append(n)
            continue
        data, ind, upd = n.inputs[:3]
        table = _add_const(g, n.name + "_table", scatter_table(n, g.types[data].shape, g.consts[ind]))
        t = g.types[upd]
        flat = _new_value(g, upd + "_flat", TensorType((t.size,), t.dtype))
        spec = _add_const(g, n.name + "_flat_shape", np.asarray([t.size], np.int64))
        out.append(Node("Reshape", [upd, spec], [flat], {}, g.fresh_name(n.name + "_flat")))
        attrs = {"reduction": n.attrs.get("reduction", "none")}
        out.append(Node("ScatterByTable", [data, flat, table], n.outputs[:1], attrs, n.name))
    g.nodes = out
    return eliminate_dead_code(infer_types(g))


def lower_einsum(graph: Graph) -> Graph:
    """Einsum -> (ReduceSum of indices only one operand has) -> Transpose / Reshape -> MatMul over the
    contracted indices (batch indices kept as broadcast dims) -> Reshape / Transpose to the output."""
    from ..ops.nn import einsum_terms

    g = graph.copy()
    out: list[Node] = []

    def emit(op: str, ins: list[str], t: TensorType, attrs: dict, base: str) -> str:
        v = _new_value(g, base, t)
        out.append(Node(op, ins, [v], attrs, g.fresh_name(base)))
        return v

    def permute(v: str, term: str, order: str, base: str) -> str:
        if term == order:
            return v
        perm = [term.index(c) for c in order]
        t = g.types[v]
        shape = tuple(t.shape[p] for p in perm)
        return emit("Transpose", [v], TensorType(shape, t.dtype), {"perm": perm}, base)

    def reshape(v: str, shape: tuple[int, ...], base: str) -> str:
        if g.types[v].shape == shape:
            return v
        spec = _add_const(g, base + "_shape", np.asarray(shape, dtype=np.int64))
        return emit("Reshape", [v, spec], TensorType(shape, g.types[v].dtype), {}, base)

    for n in g.nodes:
        if n.op != "Einsum":
            out.append(n)
            continue
        ins = list(n.inputs)
        terms, res = einsum_terms(n, [len(g.types[v].shape) for v in ins])
        size = {c: d for v, t in zip(ins, terms) for c, d in zip(t, g.types[v].shape) if d != 1}
        for k, (v, t) in enumerate(zip(ins, terms)):
            others = "".join(terms[:k] + terms[k + 1 :]) + res
            alone = [d for d, c in enumerate(t) if c not in others]
            if alone:
                shape = tuple(s for d, s in enumerate(g.types[v].shape) if d not in alone)
                ins[k] = emit("ReduceSum", [v], TensorType(shape, g.types[v].dtype),
                              {"_axes": alone, "keepdims": 0}, f"{n.name}_sum{k}")
                terms[k] = "".join(c for d, c in enumerate(t) if d not in alone)
        if len(ins) == 1:
            y = permute(ins[0], terms[0], res, n.name + "_perm")
        else:
            (a, b), (ta, tb) = ins, terms
            batch = "".join(c for c in res if c in ta and c in tb)
            contracted = "".join(c for c in ta if c in tb and c not in res)
            af, bf = "".join(c for c in ta if c not in tb), "".join(c for c in tb if c not in ta)
            sa, sb = dict(zip(ta, g.types[a].shape)), dict(zip(tb, g.types[b].shape))
            m, kk, nn = (math.prod(size.get(c, 1) for c in part) for part in (af, contracted, bf))
            a2 = reshape(permute(a, ta, batch + af + contracted, n.name + "_a"),
                         (*[sa[c] for c in batch], m, kk), n.name + "_a2")
            b2 = reshape(permute(b, tb, batch + contracted + bf, n.name + "_b"),
                         (*[sb[c] for c in batch], kk, nn), n.name + "_b2")
            bshape = tuple(max(sa[c], sb[c]) for c in batch)
            mm = emit("MatMul", [a2, b2], TensorType((*bshape, m, nn), g.types[a].dtype), {}, n.name + "_mm")
            full = batch + af + bf
            y = reshape(mm, (*bshape, *[size.get(c, 1) for c in af + bf]), n.name + "_out")
            y = permute(y, full, res, n.name + "_perm")
        out.append(Node("Identity", [y], [n.outputs[0]], {}, n.name))
    g.nodes = out
    return eliminate_dead_code(infer_types(remove_identities(g)))


def matmul_vectors_to_matrices(graph: Graph) -> Graph:
    """MatMul with a 1-d operand -> the same product of a one-row / one-column matrix, reshaped."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        shapes = [g.types[v].shape for v in n.inputs[:2]] if n.op == "MatMul" else []
        if not shapes or min(len(s) for s in shapes) > 1:
            out.append(n)
            continue
        ins = []
        for k, (v, s) in enumerate(zip(n.inputs, shapes)):
            if len(s) == 1:
                shape = (1, s[0]) if k == 0 else (s[0], 1)
                spec = _add_const(g, f"{n.name}_mat{k}_shape", np.asarray(shape, dtype=np.int64))
                m = _new_value(g, f"{n.name}_mat{k}", TensorType(shape, g.types[v].dtype))
                out.append(Node("Reshape", [v, spec], [m], {}, g.fresh_name(f"{n.name}_mat{k}")))
                v = m
            ins.append(v)
        y = n.outputs[0]
        mm = _new_value(g, y + "_mat", TensorType((1,), g.types[y].dtype))
        out.append(Node("MatMul", ins, [mm], {}, n.name))
        spec = _add_const(g, f"{n.name}_out_shape", np.asarray(g.types[y].shape, dtype=np.int64))
        out.append(Node("Reshape", [mm, spec], [y], {}, g.fresh_name(n.name + "_out")))
    g.nodes = out
    return infer_types(g)


def absorb_const_operands(graph: Graph) -> Graph:
    """Constant operands that parametrise a kernel (``OpDef.const_operands``: axes, pads, starts...)
    become attributes ``_<name>``, so the kernel's description carries them as values."""
    g = graph.copy()
    for n in g.nodes:
        for pos, key in op_def(n.op).const_operands.items():
            if pos < len(n.inputs) and n.inputs[pos] in g.consts:
                n.attrs[f"_{key}"] = np.asarray(g.consts[n.inputs[pos]]).tolist()
                n.inputs[pos] = ""
        while n.inputs and not n.inputs[-1]:
            n.inputs.pop()
    return eliminate_dead_code(g)


def scalar_results_as_views(graph: Graph) -> Graph:
    """A kernel whose result is 0-d computes it with shape (1, ...) (see :func:`_scalar_form`) and a
    Reshape views it as 0-d (kernels and their schedules need at least one axis)."""
    g = graph.copy()
    out: list[Node] = []

    def view(v: str, shape: tuple[int, ...], base: str, dst: str = "") -> str:
        spec = _add_const(g, base + "_shape", np.asarray(shape, dtype=np.int64))
        dst = dst or _new_value(g, base, TensorType(shape, g.types[v].dtype))
        out.append(Node("Reshape", [v, spec], [dst], {}, g.fresh_name(base)))
        return dst

    for n in g.nodes:
        kind = op_def(n.op).kind
        y = n.outputs[0] if n.outputs else ""
        if not y or kind in (ALIAS, FOLD, REWRITE) or g.types[y].shape != ():
            out.append(n)
            continue
        form = _scalar_form(n, kind, len(g.types[n.inputs[0]].shape))
        if form is None:
            raise GraphError(f"{n.op} node {n.name!r}: a 0-d result computed at run time is not compiled")
        if form == "keepdims":
            n.attrs = dict(n.attrs, keepdims=1)
            shape: tuple[int, ...] = (1,) * len(g.types[n.inputs[0]].shape)
        else:
            at = range(len(n.inputs)) if form == "operands" else [1]
            n.inputs = [
                view(v, (1,), f"{n.name}_in{k}")
                if k in at and v and v not in g.consts and g.types[v].shape == () else v
                for k, v in enumerate(n.inputs)
            ]
            shape = (1,)
        n.outputs = [_new_value(g, y + "_1", TensorType(shape, g.types[y].dtype))]
        out.append(n)
        view(n.outputs[0], (), n.name + "_scalar", dst=y)
    g.nodes = out
    return infer_types(g)


