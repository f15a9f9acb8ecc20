"""Convolutions and pools in NHWC."""


from __future__ import annotations

import numpy as np

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


def _nhwc_axis(axis: int) -> int:
    """The NHWC position of NCHW axis ``axis`` (negative counts from the end)."""
    return TO_NHWC.index(axis % 4)


def _shuffles(g: Graph) -> dict[int, tuple[Node, Node]]:
    """Channel shuffles: Reshape [N,C,H,W] -> [N,g,C/g,H,W], Transpose (0,2,1,3,4), Reshape back to
    [N,C,H,W], each value read by the next node only; id(first reshape) -> (transpose, last reshape)."""
    consumers = g.consumers()

    def only(v: str) -> Node | None:
        users = consumers.get(v, [])
        return users[0] if len(users) == 1 and v not in g.outputs else None

    found = {}
    for r1 in g.nodes:
        if r1.op != "Reshape" or r1.inputs[0] not in g.types or r1.outputs[0] not in g.types:
            continue
        x, y = g.types[r1.inputs[0]].shape, g.types[r1.outputs[0]].shape
        t = only(r1.outputs[0])
        r2 = only(t.outputs[0]) if t is not None and t.op == "Transpose" else None
        if (
            t is not None and r2 is not None
            and len(x) == 4 and len(y) == 5 and y[0] == x[0] and y[1] * y[2] == x[1] and y[3:] == x[2:]
            and list(t.attrs.get("perm", [])) == [0, 2, 1, 3, 4]
            and r2.op == "Reshape" and g.types[r2.outputs[0]].shape == x
        ):
            found[id(r1)] = (t, r2)
    return found


def convert_layout(graph: Graph, layout: str = "NHWC") -> Graph:
    """Run convolutions and pools in NHWC (HWIO weights, transposed once at compile time); an
    elementwise op whose 4-d operand is already NHWC stays NHWC, and so do concatenations and
    constant slices of NHWC values and channel shuffles (ShuffleNet's Reshape, Transpose, Reshape);
    transposes are inserted where an NHWC value meets an op that needs NCHW (and at graph outputs)."""
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
        if scalar(v):
            return v
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

    def scalar(v: str) -> bool:  # one value (a run-time scale, a zero point cast): any layout
        return len(g.types[v].shape) <= 1 and g.types[v].size == 1

    def shape_const(base: str, shape: tuple[int, ...]) -> str:
        return _add_const(g, base, np.asarray(shape, dtype=np.int64))

    shuffles = _shuffles(g)
    shuffled: set[int] = set()  # the transposes and reshapes of shuffles rewritten already
    for n in g.nodes:
        if id(n) in shuffled:
            continue
        n.inputs = [rename.get(i, i) for i in n.inputs]
        ins = [i for i in n.inputs if i]
        if id(n) in shuffles and n.inputs[0] in nhwc:
            # in NHWC the shuffle moves channels within each pixel: [N,H,W,g,C/g] -> [N,H,W,C/g,g]
            t, r2 = shuffles[id(n)]
            shuffled.update((id(t), id(r2)))
            nb, hh, ww, cc = g.types[n.inputs[0]].shape
            groups = g.types[n.outputs[0]].shape[1]
            split, moved = n.outputs[0], t.outputs[0]
            n.inputs = [n.inputs[0], shape_const(n.name + "_nhwc_shape", (nb, hh, ww, groups, cc // groups))]
            g.types[split] = TensorType((nb, hh, ww, groups, cc // groups), g.types[split].dtype)
            t.attrs = dict(t.attrs, perm=[0, 1, 2, 4, 3])
            g.types[moved] = TensorType((nb, hh, ww, cc // groups, groups), g.types[moved].dtype)
            r2.inputs = [moved, shape_const(r2.name + "_nhwc_shape", (nb, hh, ww, cc))]
            out += [n, t]
            n = r2
        elif n.op == "Concat" and all(four_d(i) for i in ins) and any(i in nhwc for i in ins):
            n.inputs = [as_nhwc(i) for i in n.inputs]
            n.attrs = dict(n.attrs, axis=_nhwc_axis(int(n.attrs.get("axis", 0))))
        elif n.op == "Slice" and n.inputs[0] in nhwc and "_axes" in n.attrs:
            # a piece of a Split (split_to_slices): its bounds are attributes already
            n.attrs = dict(n.attrs, _axes=[_nhwc_axis(int(a)) for a in n.attrs["_axes"]])
        elif (
            n.op == "Slice" and n.inputs[0] in nhwc and len(n.inputs) >= 3
            and all(i in g.consts for i in n.inputs[1:] if i)
        ):
            starts = g.consts[n.inputs[1]]
            axes = g.consts[n.inputs[3]] if len(n.inputs) > 3 and n.inputs[3] else np.arange(len(starts))
            new_axes = np.asarray([_nhwc_axis(int(a)) for a in axes], dtype=np.int64)
            n.inputs = [n.inputs[0], n.inputs[1], n.inputs[2], _add_const(g, n.name + "_nhwc_axes", new_axes),
                        *n.inputs[4:]]
        elif n.op in _LAYOUT_OPS and four_d(n.inputs[0]):
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
            and all(four_d(i) or (i in g.consts and g.consts[i].ndim <= 4) or scalar(i) for i in ins)
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


