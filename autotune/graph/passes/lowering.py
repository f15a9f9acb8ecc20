"""Operators computed through others: batch normalization (folded into a convolution, or per
channel Mul + Add; training mode from the batch), 3-d convolutions, local response normalization,
OneHot, the losses, quantization, recurrent layers."""


from __future__ import annotations

import numpy as np

from autotune.te.workload import numpy_dtype

from ..ir import Graph, Node, TensorType
from ..ops import (
    broadcast_shapes,
)
from .infer import eliminate_dead_code, infer_types
from .rewrite import _add_const, _Emitter, _lower_nodes, _new_value, remove_identities


# --- batch norm -------------------------------------------------------------------------------------
def _bn_params(g: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    vals = [g.consts.get(v) for v in bn.inputs[1:5]]
    if any(v is None for v in vals):
        return None
    scale, bias, mean, var = (v.astype(np.float64) for v in vals)  # type: ignore[union-attr]
    k = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    return k, bias - mean * k


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold an inference BatchNormalization into the Conv that feeds it (the conv's output used
    by nothing else): ``W' = W * k`` per output channel, ``b' = (b - mean) * k + beta``."""
    g = graph.copy()
    for bn in [n for n in g.nodes if n.op == "BatchNormalization"]:
        x = bn.inputs[0]
        conv = g.producer().get(x)
        params = _bn_params(g, bn)
        if conv is None or conv.op != "Conv" or params is None or conv.attrs.get("layout", "NCHW") != "NCHW":
            continue
        if bn.attrs.get("training_mode", 0):
            continue
        if x in g.outputs or len(g.consumers().get(x, [])) != 1 or conv.inputs[1] not in g.consts:
            continue
        bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
        if bias_name is not None and bias_name not in g.consts:
            continue
        k, shift = params
        w = g.consts[conv.inputs[1]].astype(np.float64)
        b = g.consts[bias_name].astype(np.float64) if bias_name else np.zeros(w.shape[0])
        w_new = (w * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        b_new = (b * k + shift).astype(np.float32)
        conv.inputs = [
            conv.inputs[0],
            _add_const(g, conv.inputs[1] + "_bn", w_new),
            _add_const(g, conv.name + "_bias", b_new),
        ]
        conv.outputs = [bn.outputs[0]]
        g.nodes.remove(bn)
        del g.types[x]
    return eliminate_dead_code(g)


def lower_batch_norm(graph: Graph) -> Graph:
    """Every remaining BatchNormalization becomes ``x * k + shift`` (per channel, axis 1)."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op != "BatchNormalization":
            out.append(n)
            continue
        if n.attrs.get("training_mode", 0):
            _lower_training_batch_norm(g, n, out)
            continue
        params = _bn_params(g, n)
        if params is None:
            _lower_run_time_batch_norm(g, n, out)
            continue
        k, shift = params
        t = g.types[n.inputs[0]]
        shape = (-1,) + (1,) * (len(t.shape) - 2)
        kc = _add_const(g, n.name + "_scale", k.astype(np.float32).reshape(shape))
        sc = _add_const(g, n.name + "_shift", shift.astype(np.float32).reshape(shape))
        mid = _new_value(g, n.name + "_scaled", t)
        out.append(Node("Mul", [n.inputs[0], kc], [mid], {}, n.name + "_mul"))
        out.append(Node("Add", [mid, sc], [n.outputs[0]], {}, n.name + "_add"))
    g.nodes = out
    return eliminate_dead_code(g)


def _lower_run_time_batch_norm(g: Graph, n: Node, out: list[Node]) -> None:
    """An inference BatchNormalization whose parameters are not all constants:
    ``(x - mean) / sqrt(var + eps) * scale + bias``, each parameter viewed along the channel axis."""
    x = n.inputs[0]
    t = g.types[x]
    c = t.shape[1] if len(t.shape) > 1 else 1
    per_channel = TensorType((c,) + (1,) * (len(t.shape) - 2), t.dtype)
    em = _Emitter(g, out, n.name)
    shape = em.const("channel_shape", np.asarray(per_channel.shape, np.int64))

    def param(i: int, base: str) -> str:
        v = n.inputs[i]
        if v in g.consts:
            return em.const(base, g.consts[v].astype(np.float32).reshape(per_channel.shape))
        return em.node("Reshape", [v, shape], per_channel, base)

    scale, bias, mean, var = (param(i, b) for i, b in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")))
    _normalize(em, n, em.node("Sub", [x, mean], t, "centred"), var, scale, bias, per_channel)


def _normalize(em: _Emitter, n: Node, dev: str, var: str, scale: str, bias: str,
               per_channel: TensorType) -> None:
    """BatchNormalization's ``dev / sqrt(var + eps) * scale + bias`` into its first output (``dev``:
    x less the mean; the others along the channel axis)."""
    eps = em.const("eps", np.float32(n.attrs.get("epsilon", 1e-5)))
    std = em.node("Sqrt", [em.node("Add", [var, eps], per_channel, "var_eps")], per_channel, "std")
    k = em.node("Div", [scale, std], per_channel, "k")
    scaled = em.node("Mul", [dev, k], em.g.types[dev], "scaled")
    em.out.append(Node("Add", [scaled, bias], [n.outputs[0]], {}, n.name))


def _lower_training_batch_norm(g: Graph, n: Node, out: list[Node]) -> None:
    """A training-mode BatchNormalization: the batch's mean and (population) variance over every
    axis but the channels normalize x; running mean / variance outputs are
    ``input_mean * momentum + batch_mean * (1 - momentum)`` (and so for the variance)."""
    x = n.inputs[0]
    t = g.types[x]
    c = t.shape[1]
    axes = [d for d in range(len(t.shape)) if d != 1]
    per_channel = TensorType(tuple(1 if d != 1 else c for d in range(len(t.shape))), t.dtype)
    momentum = float(n.attrs.get("momentum", 0.9))
    em = _Emitter(g, out, n.name)
    emit = em.node

    def const(base: str, arr: np.ndarray) -> str:
        return em.const(base, arr.astype(np.float32))

    def channels(i: int) -> np.ndarray:
        return g.consts[n.inputs[i]].astype(np.float64).reshape(per_channel.shape)

    stats = {"_axes": axes, "keepdims": 1}
    mean = emit("ReduceMean", [x], per_channel, "mean", stats)
    dev = emit("Sub", [x, mean], t, "dev")
    var = emit("ReduceMean", [emit("Mul", [dev, dev], t, "sq")], per_channel, "var", stats)
    _normalize(em, n, dev, var, const("scale", channels(1)), const("bias", channels(2)), per_channel)
    flat = _add_const(g, f"{n.name}_channels", np.asarray([c], np.int64))
    for pos, stat, label in ((1, mean, "mean"), (2, var, "var")):
        if len(n.outputs) > pos and n.outputs[pos]:
            vec = emit("Reshape", [stat, flat], TensorType((c,), t.dtype), f"{label}_vec")
            part = emit("Mul", [vec, const("keep", np.float64(1.0 - momentum))], TensorType((c,), t.dtype),
                        f"{label}_part")
            running = g.consts[n.inputs[2 + pos]].astype(np.float64) * momentum
            out.append(Node("Add", [part, const("running", running)], [n.outputs[pos]], {},
                            g.fresh_name(f"{n.name}_running{pos}")))


def lower_conv3d(graph: Graph) -> Graph:
    """A 3-d Conv (NCDHW) -> one 2-d Conv over depth-stacked channels: the input, zero-padded along
    depth, is sliced once per kernel depth k (the planes ``o * stride + k * dilation`` for every
    output depth o) and the slices concatenated on the channels (per group, k-major); output depths
    move into the batch, the weight [F, Cg, Kd, Kh, Kw] becomes [F, Kd * Cg, Kh, Kw], and the
    result [N * Do, F, Ho, Wo] is viewed back as [N, F, Do, Ho, Wo]."""
    def five_d(g: Graph, n: Node) -> bool:
        return len(g.types[n.inputs[0]].shape) == 5

    return _lower_nodes(graph, ("Conv",), _lower_one_conv3d, five_d)


def _lower_one_conv3d(g: Graph, n: Node, em: _Emitter) -> None:
    from ..ops.nn import depth_and_plane, window_geometry

    x, w = n.inputs[0], n.inputs[1]
    (nb, c, d, h, wd), wt = g.types[x].shape, g.types[w]
    dtype = g.types[x].dtype
    f, cg, kd, kh, kw = wt.shape
    groups = int(n.attrs.get("group", 1))
    depth, plane = depth_and_plane(window_geometry(n.attrs, (d, h, wd), (kd, kh, kw)))
    (sd,), (dd,), (od,) = depth["strides"], depth["dilations"], depth["out"]
    oh, ow = plane["out"]

    def ints(v: list[int]) -> str:
        return em.const("ints", np.asarray(v, np.int64))

    def node(op: str, ins: list[str], shape: tuple[int, ...], base: str, attrs: dict | None = None) -> str:
        return em.node(op, ins, TensorType(shape, dtype), base, attrs)

    if any(depth["pads"]):
        lo, hi = depth["pads"]
        d += lo + hi
        x = node("Pad", [x, ints([0, 0, lo, 0, 0, 0, 0, hi, 0, 0])], (nb, c, d, h, wd), "depth_padded")
    slices = [
        node("Slice", [x, ints([k * dd]), ints([k * dd + (od - 1) * sd + 1]), ints([2]), ints([sd])],
             (nb, c, od, h, wd), f"depth{k}")
        for k in range(kd)
    ]
    stacked = slices[0]
    if kd > 1:
        stacked = node("Concat", slices, (nb, kd * c, od, h, wd), "stacked", {"axis": 1})
    if groups > 1 and kd > 1:  # each group's channels together, k-major inside it
        order = [k * c + grp * cg + i for grp in range(groups) for k in range(kd) for i in range(cg)]
        stacked = node("Gather", [stacked, ints(order)], (nb, kd * c, od, h, wd), "grouped", {"axis": 1})
    moved = node("Transpose", [stacked], (nb, od, kd * c, h, wd), "depth_first", {"perm": [0, 2, 1, 3, 4]})
    planes = node("Reshape", [moved, ints([nb * od, kd * c, h, wd])], (nb * od, kd * c, h, wd), "planes")
    if w in g.consts:
        w2 = em.const("weight", g.consts[w].transpose(0, 2, 1, 3, 4).reshape(f, kd * cg, kh, kw))
    else:
        wm = em.node("Transpose", [w], TensorType((f, kd, cg, kh, kw), wt.dtype), "weight_moved",
                     {"perm": [0, 2, 1, 3, 4]})
        w2 = em.node("Reshape", [wm, ints([f, kd * cg, kh, kw])], TensorType((f, kd * cg, kh, kw), wt.dtype),
                     "weight")
    attrs = {"kernel_shape": [kh, kw], "strides": list(plane["strides"]), "group": groups,
             "dilations": list(plane["dilations"]), "pads": list(plane["pads"])}
    y2 = node("Conv", [planes, w2, *n.inputs[2:3]], (nb * od, f, oh, ow), "conv2d", attrs)
    y5 = node("Reshape", [y2, ints([nb, od, f, oh, ow])], (nb, od, f, oh, ow), "depth_major")
    em.node("Transpose", [y5], g.types[n.outputs[0]], "result", {"perm": [0, 2, 1, 3, 4]}, dst=n.outputs[0])


def lower_one_hot(graph: Graph) -> Graph:
    """OneHot -> ``Where(Equal(Unsqueeze(index), positions), on, off)``: the index made whole (a float
    one truncated by a Cast) and counted from ``depth`` when negative, compared with the constant
    positions 0..depth-1 along the new axis."""
    from ..ops.movement import one_hot_axis, one_hot_depth

    def lower(g: Graph, n: Node, em: _Emitter) -> None:
        idx, values = n.inputs[0], n.inputs[2]
        depth = one_hot_depth(n, g.consts[n.inputs[1]])
        it, yt = g.types[idx], g.types[n.outputs[0]]
        if it.dtype.startswith("float"):
            it = TensorType(it.shape, "int64")
            idx = em.node("Cast", [idx], it, "whole", {"to": _onnx_code("int64")})
        axis = one_hot_axis(n, len(it.shape))
        flags = TensorType(it.shape, "bool")
        below = em.node("Less", [idx, em.const("zero", np.asarray(0, it.dtype))], flags, "negative")
        shifted = em.node("Add", [idx, em.const("depth", np.asarray(depth, it.dtype))], it, "from_end")
        wrapped = em.node("Where", [below, shifted, idx], it, "wrapped")
        at_t = TensorType(it.shape[:axis] + (1,) + it.shape[axis:], it.dtype)
        at = em.node("Unsqueeze", [wrapped, em.const("axis", np.asarray([axis], np.int64))], at_t, "at")
        along = [depth if d == axis else 1 for d in range(len(yt.shape))]
        positions = np.arange(depth, dtype=it.dtype).reshape(along)
        hit = em.node("Equal", [at, em.const("positions", positions)], TensorType(yt.shape, "bool"), "hit")

        def value(k: int) -> str:
            if values in g.consts:
                return em.const(f"value{k}", np.asarray(g.consts[values][k], yt.dtype))
            pick = em.const(f"at{k}", np.asarray(k, np.int64))
            return em.node("Gather", [values, pick], TensorType((), yt.dtype), f"value{k}", {"axis": 0})

        em.node("Where", [hit, value(1), value(0)], yt, "one_hot", dst=n.outputs[0])

    return _lower_nodes(graph, ("OneHot",), lower)


def lower_lrn(graph: Graph) -> Graph:
    """LRN -> ``x / (bias + alpha / size * S) ** beta``, with S the channel window's sum of squares: a
    1x1 convolution of ``x * x`` with the window's 0/1 matrix (``ops.nn.lrn_window``), so it runs
    in either layout. An input of another rank than 4 is viewed as [N, C, 1, rest] around it."""
    from ..ops.nn import lrn_params, lrn_window

    def lower(g: Graph, n: Node, em: _Emitter) -> None:
        x = n.inputs[0]
        t = g.types[x]
        size, a, b, k = lrn_params(n)
        c = t.shape[1]
        rest = int(np.prod(t.shape[2:], dtype=np.int64))
        as4 = t if len(t.shape) == 4 else TensorType((t.shape[0], c, 1, rest), t.dtype)

        def view(v: str, to: TensorType, base: str) -> str:
            if g.types[v].shape == to.shape:
                return v
            shape = em.const(f"{base}_shape", np.asarray(to.shape, np.int64))
            return em.node("Reshape", [v, shape], to, base)

        sq = view(em.node("Mul", [x, x], t, "square"), as4, "square_4d")
        w = em.const("window", lrn_window(c, size).reshape(c, c, 1, 1))
        total = em.node("Conv", [sq, w], as4, "window_sum", {"kernel_shape": [1, 1]})
        total = view(total, t, "window_sum_nd")
        scaled = em.node("Mul", [total, em.const("alpha", np.float32(a / size))], t, "scaled")
        base = em.node("Add", [scaled, em.const("bias", np.float32(k))], t, "base")
        denom = em.node("Pow", [base, em.const("beta", np.float32(b))], t, "denominator")
        em.node("Div", [x, denom], t, "normalized", dst=n.outputs[0])

    return _lower_nodes(graph, ("LRN",), lower)


def lower_losses(graph: Graph) -> Graph:
    """NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss -> the operators they are made of: the
    log-probabilities (LogSoftmax over the classes, for the cross entropy), the entry of each target
    (GatherElements), its class weight (Gather), ignored targets masked (Equal / Where), the negated
    product and the reduction (the mean divides by the weights counted)."""
    from ..ops.loss import ignore_index

    def lower(g: Graph, n: Node, em: _Emitter) -> None:
        x, t = n.inputs[0], n.inputs[1]
        w = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
        xt, tt = g.types[x], g.types[t]
        if n.op == "SoftmaxCrossEntropyLoss":
            lp = n.outputs[1] if len(n.outputs) > 1 and n.outputs[1] else ""
            x = em.node("LogSoftmax", [x], xt, "log_prob", {"axis": 1}, dst=lp)
        flags = TensorType(tt.shape, "bool")
        ii = ignore_index(n)
        valid = ""
        if ii is not None:
            same_ii = em.node("Equal", [t, em.const("ii", np.asarray(ii, tt.dtype))], flags, "ignored")
            valid = em.node("Not", [same_ii], flags, "valid")
            t = em.node("Where", [valid, t, em.const("zero", np.asarray(0, tt.dtype))], tt, "target")
        at = TensorType(tt.shape[:1] + (1,) + tt.shape[1:], tt.dtype)
        picked = em.node("GatherElements", [x, em.node("Unsqueeze", [t], at, "at", {"axes": [1]})],
                         TensorType(at.shape, xt.dtype), "picked", {"axis": 1})
        per = TensorType(tt.shape, xt.dtype)
        loss = em.node("Neg", [em.node("Squeeze", [picked], per, "entry", {"axes": [1]})], per, "neg")
        weight = em.node("Gather", [w, t], per, "weight") if w else ""
        if valid:
            zero = em.const("zero_weight", np.float32(0))
            weight = (em.node("Where", [valid, weight, zero], per, "kept") if weight
                      else em.node("Cast", [valid], per, "kept", {"to": 1}))
        if weight:
            loss = em.node("Mul", [loss, weight], per, "weighted")
        red = n.attrs.get("reduction", "mean")
        y = n.outputs[0]
        scalar = TensorType((), xt.dtype)
        if red == "none":
            em.node("Identity", [loss], per, "loss", dst=y)
        elif red == "sum" or not weight:
            reduce_op = "ReduceSum" if red == "sum" else "ReduceMean"
            em.node(reduce_op, [loss], scalar, "loss", {"keepdims": 0}, dst=y)
        else:
            total = em.node("ReduceSum", [loss], scalar, "total", {"keepdims": 0})
            em.node("Div", [total, em.node("ReduceSum", [weight], scalar, "count", {"keepdims": 0})], scalar,
                    "loss", dst=y)

    return _lower_nodes(graph, ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"), lower)


def lower_quantize(graph: Graph) -> Graph:
    """QuantizeLinear / DequantizeLinear -> the operators they are made of (see ops/quantize.py): the
    scale and zero point made to broadcast against x (a Reshape per axis, a Gather of each block's
    entry), then ``(float(x) - float(zp)) * scale``, or ``Cast(Clip(Round(x / scale) + float(zp)))``
    saturating to the quantized type's range. MatMulInteger / QLinearMatMul and ConvInteger /
    QLinearConv -> float32 MatMuls (Convs) of the operands less their zero points, exact in pieces
    of the summed axis (``exact_product``, ops/quantize.exact_pieces), their int32 value or
    requantized (``Requantize``, in float64). A MaxPool of 8-bit integers -> the MaxPool of their
    float32 values, cast back."""
    from ..ops.quantize import QUANT_RANGES, QUANTIZED_OPS, exact_pieces, granularity

    def lower(g: Graph, n: Node, em: _Emitter) -> None:
        x = n.inputs[0]
        xt = g.types[x]
        f32 = TensorType(xt.shape, "float32")

        def spread(v: str, base: str) -> str:
            t = g.types[v]
            kind, axis, block = granularity(n, xt.shape, t.shape)
            if kind == "blocked":
                blocks = em.const(f"{base}_blocks", np.arange(xt.shape[axis], dtype=np.int64) // block)
                shape = tuple(xt.shape[axis] if d == axis else s for d, s in enumerate(t.shape))
                return em.node("Gather", [v, blocks], TensorType(shape, t.dtype), base, {"axis": axis})
            shape = tuple(t.size if d == axis and kind == "axis" else 1 for d in range(len(xt.shape)))
            if t.shape in (shape, ()):
                return v
            return em.node("Reshape", [v, em.const(f"{base}_shape", np.asarray(shape, np.int64))],
                           TensorType(shape, t.dtype), base)

        def as_float(v: str, base: str) -> str:
            t = g.types[v]
            if t.dtype == "float32":
                return v
            if v in g.consts:  # a constant zero point: its float value now
                return em.const(f"{base}_float", g.consts[v].astype(np.float32))
            return em.node("Cast", [v], TensorType(t.shape, "float32"), base, {"to": 1})

        def given(i: int) -> str:
            return n.inputs[i] if len(n.inputs) > i and n.inputs[i] else ""

        def centred(v: str, zp: str, base: str) -> str:
            f = as_float(v, base)
            if not zp:
                return f
            t = TensorType(broadcast_shapes(g.types[v].shape, g.types[zp].shape), "float32")
            return em.node("Sub", [f, as_float(zp, f"{base}_zero")], t, f"{base}_centred")

        def on_channels(v: str, rank: int, base: str) -> str:
            """A per-channel vector (a convolution's, of more than one entry) shaped to broadcast
            over axis 0 of a weight (``rank`` dims) or axis 1 of an NCHW output (``rank - 1``)."""
            t = g.types[v]
            if t.size == 1:
                return v
            shape = (t.size,) + (1,) * (rank - 1)
            return em.node("Reshape", [v, em.const(f"{base}_shape", np.asarray(shape, np.int64))],
                           TensorType(shape, t.dtype), base)

        if n.op in ("MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"):
            # an exact integer product in float32 pieces, then its int32 value or requantized
            conv = n.op in ("ConvInteger", "QLinearConv")
            qlinear = n.op.startswith("QLinear")
            b, zb = (3, 5) if qlinear else (1, 3)
            y, yt = n.outputs[0], g.types[n.outputs[0]]
            wb = g.types[n.inputs[b]]
            zp_b = on_channels(given(zb), len(wb.shape), "b_zero") if conv and given(zb) else given(zb)
            ab = [centred(n.inputs[0], given(2), "a"), centred(n.inputs[b], zp_b, "b")]
            acc_t = TensorType(yt.shape, "int32")
            if conv:  # summed over input channels, each adding its window's terms
                window = int(np.prod(wb.shape[2:], dtype=np.int64))
                pieces, axes, attrs = exact_pieces(wb.shape[1], window), (1, 1), dict(n.attrs)
            else:
                k = wb.shape[-2] if len(wb.shape) > 1 else wb.shape[0]
                pieces, axes, attrs = exact_pieces(k, 1), (-1, -2 if len(wb.shape) > 1 else 0), {}
            dst = "" if qlinear else y
            acc = exact_product(em, "Conv" if conv else "MatMul", ab, acc_t, pieces, axes, attrs, dst)
            if not qlinear:
                return
            if given(8):  # QLinearConv's int32 bias, per output channel
                acc = em.node("Add", [acc, on_channels(given(8), len(yt.shape) - 1, "bias")], acc_t, "biased")
            scale_b = on_channels(n.inputs[4], len(yt.shape) - 1, "b_scale") if conv else n.inputs[4]
            sa, sb, sy = (g.types[v] for v in (n.inputs[1], scale_b, n.inputs[6]))
            both = TensorType(broadcast_shapes(sa.shape, sb.shape), "float32")
            m = em.node("Div", [em.node("Mul", [n.inputs[1], scale_b], both, "scales"), n.inputs[6]],
                        TensorType(broadcast_shapes(both.shape, sy.shape), "float32"), "multiplier")
            em.node("Requantize", [acc, m, *([given(7)] if given(7) else [])], yt, "requantized",
                    {"to": yt.dtype}, dst=y)
            return

        if n.op == "MaxPool":  # of 8-bit integers (a QOperator model's): exact in float32
            y, yt = n.outputs[0], g.types[n.outputs[0]]
            wide = em.node("MaxPool", [as_float(x, "wide")], TensorType(yt.shape, "float32"), "pool", n.attrs)
            em.node("Cast", [wide], yt, "narrow", {"to": _onnx_code(yt.dtype)}, dst=y)
            return

        zp = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
        scale = spread(n.inputs[1], "scale")
        y, yt = n.outputs[0], g.types[n.outputs[0]]
        if n.op == "DequantizeLinear":
            v = as_float(x, "values")
            if zp:
                v = em.node("Sub", [v, as_float(spread(zp, "zero"), "zero_f")], f32, "centred")
            em.node("Mul", [v, scale], f32, "scaled", dst=y)
            return
        v = em.node("Round", [em.node("Div", [x, scale], f32, "ratio")], f32, "rounded")
        if zp:
            v = em.node("Add", [v, as_float(spread(zp, "zero"), "zero_f")], f32, "shifted")
        lo, hi = QUANT_RANGES[yt.dtype]
        bounds = [em.const("lo", np.float32(lo)), em.const("hi", np.float32(hi))]
        v = em.node("Clip", [v, *bounds], f32, "saturated")
        em.node("Cast", [v], yt, "quantized", {"to": _onnx_code(yt.dtype)}, dst=y)

    def integer_pool(g: Graph, n: Node) -> bool:
        return n.op != "MaxPool" or (g.types[n.inputs[0]].dtype in ("int8", "uint8") and len(n.outputs) == 1)

    return _integer_round_trips(_lower_nodes(graph, (*QUANTIZED_OPS, "MaxPool"), lower, integer_pool))


def split_whole_reductions(graph: Graph, min_size: int = 4096) -> Graph:
    """ReduceMax / ReduceMin of every element of a float32 tensor (DynamicQuantizeLinear's range,
    for one) -> the reduction of each row of its last axis, then over the rows. The rows reduce in
    parallel and along vectors, where one value's reduction is a single chain; the maximum and
    minimum of the parts are the whole's, exactly."""
    from ..ops.reduce import reduce_axes

    def whole(g: Graph, n: Node) -> bool:
        t = g.types.get(n.inputs[0])
        consts = [g.consts.get(i) for i in n.inputs]
        return (t is not None and t.dtype == "float32" and len(t.shape) >= 2 and t.size >= min_size
                and t.shape[-1] >= 16 and all(c is not None for c in consts[1:])
                and reduce_axes(n, len(t.shape), consts) == list(range(len(t.shape))))

    def lower(g: Graph, n: Node, em: _Emitter) -> None:
        t, y = g.types[n.inputs[0]], n.outputs[0]
        cols = t.shape[-1]
        rows = t.size // cols

        def shape(base: str, dims: tuple[int, ...]) -> str:
            return em.const(base, np.asarray(dims, np.int64))

        flat = em.node("Reshape", [n.inputs[0], shape("rows_shape", (rows, cols))],
                       TensorType((rows, cols), "float32"), "rows")
        part = em.node(n.op, [flat, shape("axis1", (1,))], TensorType((rows,), "float32"), "per_row",
                       {"keepdims": 0})
        total = em.node(n.op, [part, shape("axis0", (0,))], TensorType((), "float32"), "total",
                        {"keepdims": 0})
        em.node("Reshape", [total, shape("out_shape", g.types[y].shape)], g.types[y], "out", dst=y)

    return _lower_nodes(graph, ("ReduceMax", "ReduceMin"), lower, whole)


def _integer_round_trips(graph: Graph) -> Graph:
    """A quantize-dequantize pair (what a QDQ model has around each operator) lowers to
    ``Cast(float32, Cast(int, Clip(Round(x) [+ zp], lo, hi)))``: the clipped value is already a
    whole number inside the integer type, so the casts return it unchanged and are dropped (they
    would keep the kernel's epilogue from vectorizing)."""
    from ..ops.quantize import QUANT_RANGES

    g = graph.copy()
    made = {o: n for n in g.nodes for o in n.outputs}

    def whole(v: str) -> bool:  # a float holding a whole number: rounded, an integer cast, their sums
        if v in g.consts:
            return bool(np.all(np.round(g.consts[v]) == g.consts[v]))
        n = made.get(v)
        if n is None:
            return False
        if n.op == "Cast":
            return g.types[n.inputs[0]].dtype in QUANT_RANGES
        return n.op == "Round" or (n.op == "Add" and all(whole(i) for i in n.inputs))

    changed = False
    for n in g.nodes:
        inner = made.get(n.inputs[0]) if n.op == "Cast" else None
        if inner is None or inner.op != "Cast" or g.types[n.outputs[0]].dtype != "float32":
            continue
        clip = made.get(inner.inputs[0])
        kind = g.types[inner.outputs[0]].dtype
        if clip is None or clip.op != "Clip" or kind not in QUANT_RANGES or len(clip.inputs) != 3:
            continue
        bounds = [g.consts.get(b) for b in clip.inputs[1:]]
        lo, hi = QUANT_RANGES[kind]
        if any(b is None for b in bounds) or not whole(clip.inputs[0]):
            continue
        if float(bounds[0]) >= lo and float(bounds[1]) <= hi and g.types[clip.outputs[0]].dtype == "float32":
            n.op, n.inputs, n.attrs = "Identity", [clip.outputs[0]], {}
            changed = True
    return infer_types(remove_identities(eliminate_dead_code(g))) if changed else graph


def exact_product(em: _Emitter, op: str, operands: list[str], t: TensorType, pieces: list[tuple[int, int]],
                  axes: tuple[int, int], attrs: dict, dst: str = "") -> str:
    """The int32 value of the float32 product ``op`` (MatMul or Conv) of two operands holding
    integers: one exact product per piece of the summed axis (``axes``: that axis in each operand),
    each cast to int32, added in int32. The products carry ``exact``: no rewrite that changes their
    arithmetic (Strassen, Winograd) takes them."""
    g = em.g
    parts = []
    for j, (lo, hi) in enumerate(pieces):
        ins = operands
        if len(pieces) > 1:
            ins = []
            for v, axis in zip(operands, axes):
                shape = list(g.types[v].shape)
                axis %= len(shape)
                shape[axis] = hi - lo
                bounds = [em.const(f"piece{j}_{k}", np.asarray([x], np.int64)) for k, x in
                          (("lo", lo), ("hi", hi), ("axis", axis))]
                ins.append(em.node("Slice", [v, *bounds], TensorType(tuple(shape), "float32"), f"piece{j}"))
        product = em.node(op, ins, TensorType(t.shape, "float32"), f"product{j}", {**attrs, "exact": 1})
        last = j == len(pieces) - 1
        parts.append(em.node("Cast", [product], t, f"integer{j}", {"to": _onnx_code("int32")},
                             dst=dst if last and len(pieces) == 1 else ""))
    total = parts[0]
    for j, part in enumerate(parts[1:], 1):
        total = em.node("Add", [total, part], t, f"sum{j}", dst=dst if j == len(parts) - 1 else "")
    return total


def _onnx_code(dtype: str) -> int:
    """ONNX's element type code of a dtype."""
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(numpy_dtype(dtype))


def lower_recurrent(graph: Graph) -> Graph:
    """RNN / GRU / LSTM -> their steps unrolled over the (static) sequence (see ops/recurrent.py)."""
    from ..ops.recurrent import GATES

    return _lower_nodes(graph, tuple(GATES), lambda g, n, em: _Recurrence(g, n, em).lower())


class _Recurrence:
    """The nodes of one unrolled RNN / GRU / LSTM node (ONNX's gate order: GRU z, r, h; LSTM i, o,
    f, c; peepholes i, o, f)."""

    def __init__(self, g: Graph, n: Node, em: _Emitter) -> None:
        from ..ops.recurrent import GATES, activations, directions, shapes

        self.g, self.n, self.em = g, n, em
        self.hidden, self.dirs = int(n.attrs["hidden_size"]), directions(n)
        self.gates, self.acts = GATES[n.op], activations(n)
        self.seq, self.batch, self.size = shapes(n, g.types[n.inputs[0]])
        self.clip = n.attrs.get("clip")

    def arg(self, k: int) -> str:
        return self.n.inputs[k] if len(self.n.inputs) > k and self.n.inputs[k] else ""

    def t(self, *shape: int, dtype: str = "float32") -> TensorType:
        return TensorType(tuple(shape), dtype)

    def pick(self, v: str, k: int, shape: tuple[int, ...], base: str, axis: int = 0) -> str:
        """Entry ``k`` of ``v`` along ``axis`` (that axis dropped)."""
        at = self.em.const(base + "_at", np.asarray(k, np.int64))
        return self.em.node("Gather", [v, at], self.t(*shape), base, {"axis": axis})

    def block(self, v: str, k: int, shape: tuple[int, ...], base: str) -> str:
        """The k-th block of ``hidden`` along the last axis of ``v`` (of ``shape`` once sliced)."""
        h = self.hidden
        attrs = {"_starts": [k * h], "_ends": [(k + 1) * h], "_axes": [-1], "_steps": [1]}
        return self.em.node("Slice", [v], self.t(*shape), base, attrs)

    def op(self, name: str, ins: list[str], base: str) -> str:
        return self.em.node(name, ins, self.t(self.batch, self.hidden), base)

    def activate(self, fn: str, v: str, base: str) -> str:
        if self.clip is not None:
            lo, hi = self.em.const("lo", np.float32(-self.clip)), self.em.const("hi", np.float32(self.clip))
            v = self.op("Clip", [v, lo, hi], base + "_clip")
        return self.op(fn, [v], base)

    def lower(self) -> None:
        n, em, h, gh = self.n, self.em, self.hidden, self.gates * self.hidden
        x = n.inputs[0]
        if n.attrs.get("layout", 0):
            x = em.node("Transpose", [x], self.t(self.seq, self.batch, self.size), "x", {"perm": [1, 0, 2]})
        ys, finals, cells = [], [], []
        per = len(self.acts) // self.dirs
        for d in range(self.dirs):
            rt = em.node("Transpose", [self.pick(n.inputs[2], d, (gh, h), f"r{d}")], self.t(h, gh), f"rt{d}",
                         {"perm": [1, 0]})
            wt = em.node("Transpose", [self.pick(n.inputs[1], d, (gh, self.size), f"w{d}")],
                         self.t(self.size, gh), f"wt{d}", {"perm": [1, 0]})
            xw = em.node("MatMul", [x, wt], self.t(self.seq, self.batch, gh), f"xw{d}")
            rb = ""
            if self.arg(3):
                b = self.pick(self.arg(3), d, (2 * gh,), f"b{d}")
                wb = em.node("Slice", [b], self.t(gh), f"wb{d}",
                             {"_starts": [0], "_ends": [gh], "_axes": [0], "_steps": [1]})
                rb = em.node("Slice", [b], self.t(gh), f"rb{d}",
                             {"_starts": [gh], "_ends": [2 * gh], "_axes": [0], "_steps": [1]})
                xw = em.node("Add", [xw, wb], self.t(self.seq, self.batch, gh), f"xwb{d}")
            zeros = em.const(f"zeros{d}", np.zeros((self.batch, h), np.float32))
            axis = 1 if n.attrs.get("layout", 0) else 0  # initial states: [batch, dirs, hidden] in layout 1
            state = self.pick(self.arg(5), d, (self.batch, h), f"h0_{d}", axis) if self.arg(5) else zeros
            cell = self.pick(self.arg(6), d, (self.batch, h), f"c0_{d}", axis) if self.arg(6) else zeros
            peep = []
            if self.arg(7):
                p = self.pick(self.arg(7), d, (3 * h,), f"p{d}")
                peep = [self.block(p, k, (h,), f"p{d}_{k}") for k in range(3)]
            forward = n.attrs.get("direction", "forward") == "forward" or (self.dirs == 2 and d == 0)
            steps: dict[int, str] = {}
            for t in range(self.seq) if forward else range(self.seq - 1, -1, -1):
                s = f"{d}_{t}"
                hr = em.node("MatMul", [state, rt], self.t(self.batch, gh), f"hr{s}")
                if rb:
                    hr = em.node("Add", [hr, rb], self.t(self.batch, gh), f"hrb{s}")
                xt = self.pick(xw, t, (self.batch, gh), f"x{s}")
                acts = self.acts[d * per : (d + 1) * per]
                new_state, new_cell = self.step(s, xt, hr, state, cell, rt, rb, acts, peep)
                steps[t] = new_state
                if self.arg(4):  # past its sequence's length a batch entry keeps its state, outputs 0
                    at = em.const(f"t{s}", np.asarray(t, self.g.types[self.arg(4)].dtype))
                    live = em.node("Less", [at, self.arg(4)], self.t(self.batch, dtype="bool"), f"live{s}")
                    live = em.node("Unsqueeze", [live], self.t(self.batch, 1, dtype="bool"), f"live2{s}",
                                   {"axes": [1]})
                    steps[t] = self.op("Where", [live, new_state, zeros], f"y{s}")
                    new_state = self.op("Where", [live, new_state, state], f"h{s}")
                    new_cell = self.op("Where", [live, new_cell, cell], f"c{s}") if new_cell else ""
                state, cell = new_state, new_cell or cell
            ys.append(self.stack([steps[t] for t in range(self.seq)], (self.seq, self.batch, h), 0, f"y{d}"))
            finals.append(state)
            cells.append(cell)
        outs = [*n.outputs, "", ""][:3]
        state_shape = (self.dirs, self.batch, h)
        results = [(ys, (self.seq, self.dirs, self.batch, h)), (finals, state_shape), (cells, state_shape)]
        for k, (vals, shape) in enumerate(results):
            if outs[k]:
                full = self.stack(vals, shape, 1 if k == 0 else 0, f"out{k}")
                perm = [2, 0, 1, 3] if k == 0 else [1, 0, 2]
                if n.attrs.get("layout", 0):
                    moved = self.t(*[shape[q] for q in perm])
                    em.node("Transpose", [full], moved, f"out{k}_t", {"perm": perm}, dst=outs[k])
                else:
                    em.node("Identity", [full], self.t(*shape), f"out{k}_id", dst=outs[k])

    def stack(self, vals: list[str], shape: tuple[int, ...], axis: int, base: str) -> str:
        one = self.t(*shape[:axis], 1, *shape[axis + 1 :])
        parts = [self.em.node("Unsqueeze", [v], one, f"{base}_{k}", {"axes": [axis]})
                 for k, v in enumerate(vals)]
        return self.em.node("Concat", parts, self.t(*shape), base, {"axis": axis})

    def step(self, s: str, xt: str, hr: str, state: str, cell: str, rt: str, rb: str, acts: list[str],
             peep: list[str]) -> tuple[str, str]:
        """One step: the new hidden state (and, for an LSTM, the new cell)."""
        b, h = self.batch, self.hidden
        gx = [self.block(xt, k, (b, h), f"gx{s}_{k}") for k in range(self.gates)]
        gr = [self.block(hr, k, (b, h), f"gr{s}_{k}") for k in range(self.gates)]
        pre = [self.op("Add", [gx[k], gr[k]], f"pre{s}_{k}") for k in range(self.gates)]
        if self.n.op == "RNN":
            return self.activate(acts[0], pre[0], f"h{s}_new"), ""
        if self.n.op == "GRU":
            z = self.activate(acts[0], pre[0], f"z{s}")
            r = self.activate(acts[0], pre[1], f"r{s}")
            if self.n.attrs.get("linear_before_reset", 0):
                cand = self.op("Add", [gx[2], self.op("Mul", [r, gr[2]], f"rh{s}")], f"cand{s}")
            else:
                rth = self.em.node("Slice", [rt], self.t(h, h), f"rth{s}",
                                   {"_starts": [2 * h], "_ends": [3 * h], "_axes": [1], "_steps": [1]})
                hh = self.op("MatMul", [self.op("Mul", [r, state], f"rh{s}"), rth], f"rhr{s}")
                if rb:
                    rbh = self.block(rb, 2, (h,), f"rbh{s}")
                    hh = self.op("Add", [hh, rbh], f"rhrb{s}")
                cand = self.op("Add", [gx[2], hh], f"cand{s}")
            hc = self.activate(acts[1], cand, f"hc{s}")
            keep = self.op("Mul", [self.op("Sub", [self.em.const("one", np.float32(1.0)), z], f"zc{s}"), hc],
                           f"keep{s}")
            return self.op("Add", [keep, self.op("Mul", [z, state], f"zh{s}")], f"h{s}_new"), ""
        # LSTM: gates i, o, f, c; peepholes i, o, f
        def peeped(k: int, p: int, c: str, base: str) -> str:
            if not peep:
                return pre[k]
            return self.op("Add", [pre[k], self.op("Mul", [peep[p], c], base + "_p")], base)

        i = self.activate(acts[0], peeped(0, 0, cell, f"ip{s}"), f"i{s}")
        f = self.activate(acts[0], peeped(2, 2, cell, f"fp{s}"), f"f{s}")
        c_in = self.activate(acts[1], pre[3], f"cin{s}")
        new_cell = self.op("Add", [self.op("Mul", [f, cell], f"fc{s}"), self.op("Mul", [i, c_in], f"ic{s}")],
                           f"c{s}_new")
        o = self.activate(acts[0], peeped(1, 1, new_cell, f"op{s}"), f"o{s}")
        return self.op("Mul", [o, self.op(acts[2], [new_cell], f"hcell{s}")], f"h{s}_new"), new_cell


