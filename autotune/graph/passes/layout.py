"""Convolutions and pools in NHWC."""


from __future__ import annotations

from ..ir import Graph, GraphError, Node, TensorType
from ..ops import (
    ELEMWISE,
    op_def,
)
from .infer import eliminate_dead_code, infer_types
from .rewrite import _add_const, _new_value

# --- layout -----------------------------------------------------------------------------------------
TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
_LAYOUT_OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool")


def _permute(t: TensorType, perm: list[int]) -> TensorType:
    return TensorType(tuple(t.shape[p] for p in perm), t.dtype)


def convert_layout(graph: Graph, layout: str = "NHWC") -> Graph:
    """Run convolutions and pools in NHWC (HWIO weights, transposed once at compile time); an
    elementwise op whose 4-d operand is already NHWC stays NHWC; transposes are inserted where an
    NHWC value meets an op that needs NCHW (and at graph outputs)."""
    if layout == "NCHW":
        return graph
    if layout != "NHWC":
        raise GraphError(f"unknown layout {layout!r} (NCHW or NHWC)")
    if any(n.attrs.get("layout") == "NHWC" for n in graph.nodes):
        return graph  # converted already
    g = graph.copy()
    nhwc: set[str] = set()
    rename: dict[str, str] = {}  # graph output -> its NHWC internal value
    to_nhwc: dict[str, str] = {}
    to_nchw: dict[str, str] = {}
    out: list[Node] = []

    def as_nhwc(v: str) -> str:
        if v in nhwc:
            return v
        if v in to_nhwc:
            return to_nhwc[v]
        if v in g.consts:
            arr = g.consts[v]
            if arr.size == 1:
                return v
            arr4 = arr.reshape((1,) * (4 - arr.ndim) + arr.shape)
            to_nhwc[v] = _add_const(g, v + "_nhwc", arr4.transpose(TO_NHWC))
            return to_nhwc[v]
        t = _new_value(g, v + "_nhwc", _permute(g.types[v], TO_NHWC))
        out.append(Node("Transpose", [v], [t], {"perm": TO_NHWC}, g.fresh_name(v + "_to_nhwc")))
        to_nhwc[v] = t
        return t

    def as_nchw(v: str) -> str:
        if v not in nhwc:
            return v
        if v not in to_nchw:
            t = _new_value(g, v + "_nchw", _permute(g.types[v], TO_NCHW))
            out.append(Node("Transpose", [v], [t], {"perm": TO_NCHW}, g.fresh_name(v + "_to_nchw")))
            to_nchw[v] = t
        return to_nchw[v]

    def four_d(v: str) -> bool:
        return len(g.types[v].shape) == 4

    for n in g.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        ins = [i for i in n.inputs if i]
        if n.op in _LAYOUT_OPS and four_d(n.inputs[0]):
            new_inputs = [as_nhwc(n.inputs[0])]
            if n.op == "Conv":
                w = n.inputs[1]
                if w in g.consts:
                    new_inputs.append(_add_const(g, w + "_hwio", g.consts[w].transpose(2, 3, 1, 0)))
                else:
                    wt = _new_value(g, w + "_hwio", _permute(g.types[w], [2, 3, 1, 0]))
                    out.append(
                        Node("Transpose", [w], [wt], {"perm": [2, 3, 1, 0]}, g.fresh_name(w + "_to_hwio"))
                    )
                    new_inputs.append(wt)
                new_inputs += n.inputs[2:]
            n.inputs = new_inputs
            n.attrs = dict(n.attrs, layout="NHWC")
        elif (
            op_def(n.op).kind == ELEMWISE
            and any(i in nhwc for i in ins)
            and all(four_d(i) or (i in g.consts and g.consts[i].ndim <= 4) for i in ins)
        ):
            n.inputs = [as_nhwc(i) if i else i for i in n.inputs]
        else:
            n.inputs = [as_nchw(i) if i else i for i in n.inputs]
            out.append(n)
            continue
        y = n.outputs[0]
        if y in g.outputs:
            internal = _new_value(g, y + "_nhwc", g.types[y])
            rename[y] = internal
            n.outputs = [internal]
            y = internal
        g.types[y] = _permute(g.types[y], TO_NHWC)
        nhwc.add(y)
        out.append(n)
    for o, internal in rename.items():
        out.append(Node("Transpose", [internal], [o], {"perm": TO_NCHW}, g.fresh_name(o + "_to_nchw")))
        g.types[o] = _permute(g.types[internal], TO_NCHW)
    g.nodes = out
    return eliminate_dead_code(infer_types(g))


