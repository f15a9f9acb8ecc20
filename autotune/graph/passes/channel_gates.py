"""A per-channel gate on a convolution's input (squeeze-and-excite: ``conv(x * s)``, ``s`` one value
per input channel) applied to the convolution's weights instead: ``conv(x, W * s)``, the same sum,
with one multiply per weight instead of a pass over the whole input. Done where the weights are
smaller than the input (the early, wide-activation blocks); elsewhere the gate stays a Mul."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorType
from .infer import eliminate_dead_code, infer_types
from .rewrite import _add_const, _new_value


def _channel_axes(conv: Node) -> tuple[int, int]:
    """(channel axis of the data, input-channel axis of the weight) for the conv's layout."""
    return (3, 2) if conv.attrs.get("layout") == "NHWC" else (1, 1)  # NHWC/HWIO, NCHW/OIHW


def _gate(g: Graph, mul: Node) -> tuple[str, str] | None:
    """(x, s) when ``mul`` is x * s with s broadcast along everything but channels (or a scalar)."""
    if len(mul.inputs) != 2:
        return None
    out = g.types[mul.outputs[0]]
    for x, s in (mul.inputs, mul.inputs[::-1]):
        tx, ts = g.types[x], g.types[s]
        if tx.shape == out.shape and ts.size < tx.size and len(ts.shape) <= len(tx.shape):
            return x, s
    return None


def gates_into_weights(graph: Graph) -> Graph:
    """Every ``Conv(x * s, W)`` (group 1, the product read by such convolutions only, ``s`` one
    value per channel shared by the batch) whose weights are smaller than ``x`` becomes
    ``Conv(x, W * s)``."""
    g = graph.copy()
    consumers = g.consumers()
    out: list[Node] = []
    rewrites: dict[int, list[Node]] = {}  # id(conv) -> the nodes that scale its weights
    dropped: set[int] = set()
    for mul in g.nodes:
        if mul.op != "Mul" or mul.outputs[0] in g.outputs:
            continue
        y = mul.outputs[0]
        convs = consumers.get(y, [])
        xs = _gate(g, mul)
        if not convs or xs is None or g.types[y].dtype not in ("float32", "float64"):
            continue
        x, s = xs
        if any(c.op != "Conv" or c.inputs[0] != y or y in c.inputs[1:] or int(c.attrs.get("group", 1)) != 1
               for c in convs):
            continue
        rank = len(g.types[y].shape)
        if rank != 4 or len({_channel_axes(c) for c in convs}) != 1:
            continue
        c_ax, w_ax = _channel_axes(convs[0])
        s_shape = (1,) * (rank - len(g.types[s].shape)) + g.types[s].shape
        channels = g.types[y].shape[c_ax]
        if any(d != 1 for i, d in enumerate(s_shape) if i != c_ax) or s_shape[c_ax] not in (1, channels):
            continue
        if sum(g.types[c.inputs[1]].size for c in convs) >= g.types[x].size:
            continue
        for conv in convs:
            w = conv.inputs[1]
            tw = g.types[w]
            shape = (s_shape[c_ax],) + (1,) * (len(tw.shape) - 1 - w_ax)  # lines s up with W's axis
            spec = _add_const(g, conv.name + "_gate_shape", np.asarray(shape, dtype=np.int64))
            s_w = _new_value(g, conv.name + "_gate", TensorType(shape, g.types[s].dtype))
            w_s = _new_value(g, conv.name + "_gated_weight", TensorType(tw.shape, tw.dtype))
            rewrites[id(conv)] = [
                Node("Reshape", [s, spec], [s_w], {}, g.fresh_name(conv.name + "_gate")),
                Node("Mul", [w, s_w], [w_s], {}, g.fresh_name(conv.name + "_gated_weight")),
            ]
            conv.inputs = [x, w_s, *conv.inputs[2:]]
        dropped.add(id(mul))
    if not dropped:
        return graph
    for n in g.nodes:
        if id(n) not in dropped:
            out.extend(rewrites.get(id(n), []))
            out.append(n)
    g.nodes = out
    return eliminate_dead_code(infer_types(g))
