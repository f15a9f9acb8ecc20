"""Graph passes. Each takes a Graph and returns a new one (the input is never modified):

- ``infer_types``        shape/dtype inference; folds constant subexpressions when asked
- ``fold_constants``     evaluate every node whose inputs are all constants
- ``eliminate_dead_code`` drop nodes and constants no graph output depends on
- ``fold_batch_norm``    Conv -> BatchNormalization becomes one Conv with scaled weights and a bias
- ``lower_batch_norm``   any other BatchNormalization becomes Mul + Add with per-channel constants
- ``canonicalize_gemm``  Gemm -> MatMul (+ Mul alpha) (+ Add bias), constant weights pre-transposed
- ``fuse_gelu``          the erf form x * 0.5 * (1 + erf(x / sqrt 2)) (and its variants) -> Gelu
- ``remove_identities``  Identity / Dropout disappear
- ``lower_losses``       NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss -> the operators they are made of
- ``lower_quantize``     Quantize/DequantizeLinear, MatMulInteger, QLinearMatMul -> the operators of each
- ``lower_recurrent``    RNN / GRU / LSTM -> their steps unrolled over the static sequence
- ``castlike_to_cast``   CastLike -> Cast to its second operand's type
- ``split_to_slices``    Split -> one Slice per output
- ``one_output_per_node`` a kernel node with several outputs -> one node per output
- ``scatter_to_table``   ScatterND / ScatterElements -> a gather through a constant table
- ``lower_einsum``       Einsum -> Transpose / Reshape / MatMul (+ ReduceSum)
- ``matmul_vectors_to_matrices`` MatMul of a 1-d operand -> a matrix product, reshaped
- ``absorb_const_operands`` constant operands that parametrise a kernel become its attributes
- ``scalar_results_as_views`` a kernel's 0-d result is computed as shape (1, ...) and viewed as 0-d
- ``simplify_transposes`` compose transposes, drop identities, size-1-only moves become Reshape
- ``convert_layout``     convolutions and pools (and elementwise ops between them) go NHWC
- ``optimize``           all of the above in order (the compiler's pipeline)
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from autotune.te.workload import numpy_dtype

from .ir import Graph, GraphError, Node, TensorType, contiguous
from .ops import (
    ALIAS,
    ELEMWISE,
    FOLD,
    FOLD_LIMIT_BYTES,
    REWRITE,
    broadcast_shapes,
    evaluate,
    op_def,
    transpose_perm,
)
from .winograd import Plan, use_winograd  # also registers the Winograd operators

Pass = Callable[[Graph], Graph]


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
        w_new = (w * k[:, None, None, None]).astype(np.float32)
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
            raise GraphError(f"BatchNormalization node {n.name!r}: parameters must be constants")
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


def _lower_nodes(graph: Graph, ops: tuple[str, ...], lower: Callable[[Graph, Node, _Emitter], None]) -> Graph:
    """Every node of ``ops`` replaced by the nodes ``lower`` emits for it (the others kept, in order)."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op in ops:
            lower(g, n, _Emitter(g, out, n.name))
        else:
            out.append(n)
    g.nodes = out
    return infer_types(remove_identities(eliminate_dead_code(g)))


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
    std = emit("Sqrt", [emit("Add", [var, const("eps", np.float64(n.attrs.get("epsilon", 1e-5)))],
                             per_channel, "var_eps")], per_channel, "std")
    k = emit("Div", [const("scale", channels(1)), std], per_channel, "k")
    scaled = emit("Mul", [dev, k], t, "scaled")
    y = n.outputs[0]
    out.append(Node("Add", [scaled, const("bias", channels(2))], [y], {}, n.name))
    flat = _add_const(g, f"{n.name}_channels", np.asarray([c], np.int64))
    for pos, stat, label in ((1, mean, "mean"), (2, var, "var")):
        if len(n.outputs) > pos and n.outputs[pos]:
            vec = emit("Reshape", [stat, flat], TensorType((c,), t.dtype), f"{label}_vec")
            part = emit("Mul", [vec, const("keep", np.float64(1.0 - momentum))], TensorType((c,), t.dtype),
                        f"{label}_part")
            running = g.consts[n.inputs[2 + pos]].astype(np.float64) * momentum
            out.append(Node("Add", [part, const("running", running)], [n.outputs[pos]], {},
                            g.fresh_name(f"{n.name}_running{pos}")))


def lower_losses(graph: Graph) -> Graph:
    """NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss -> the operators they are made of: the
    log-probabilities (LogSoftmax over the classes, for the cross entropy), the entry of each target
    (GatherElements), its class weight (Gather), ignored targets masked (Equal / Where), the negated
    product and the reduction (the mean divides by the weights counted)."""
    from .ops.loss import ignore_index

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
    saturating to the quantized type's range. MatMulInteger / QLinearMatMul -> a float32 MatMul of
    the operands less their zero points (exact: see ops/quantize.EXACT_PRODUCT_TERMS), cast to int32
    or requantized (``Requantize``, in float64)."""
    from .ops.quantize import QUANT_RANGES, QUANTIZED_OPS, granularity

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
            return v if t.dtype == "float32" else em.node("Cast", [v], TensorType(t.shape, "float32"), base,
                                                          {"to": 1})

        def given(i: int) -> str:
            return n.inputs[i] if len(n.inputs) > i and n.inputs[i] else ""

        def centred(v: str, zp: str, base: str) -> str:
            f = as_float(v, base)
            if not zp:
                return f
            t = TensorType(broadcast_shapes(g.types[v].shape, g.types[zp].shape), "float32")
            return em.node("Sub", [f, as_float(zp, f"{base}_zero")], t, f"{base}_centred")

        if n.op in ("MatMulInteger", "QLinearMatMul"):  # an exact integer product in float32, then
            b, zb = (1, 3) if n.op == "MatMulInteger" else (3, 5)  # its int32 value or requantized
            y, yt = n.outputs[0], g.types[n.outputs[0]]
            ab = [centred(n.inputs[0], given(2), "a"), centred(n.inputs[b], given(zb), "b")]
            c = em.node("MatMul", ab, TensorType(yt.shape, "float32"), "product")
            if n.op == "MatMulInteger":
                em.node("Cast", [c], yt, "integer", {"to": _onnx_code("int32")}, dst=y)
                return
            sa, sb, sy = (g.types[n.inputs[i]] for i in (1, 4, 6))
            both = TensorType(broadcast_shapes(sa.shape, sb.shape), "float32")
            m = em.node("Div", [em.node("Mul", [n.inputs[1], n.inputs[4]], both, "scales"), n.inputs[6]],
                        TensorType(broadcast_shapes(both.shape, sy.shape), "float32"), "multiplier")
            em.node("Requantize", [c, m, *([given(7)] if given(7) else [])], yt, "requantized",
                    {"to": yt.dtype}, dst=y)
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

    return _lower_nodes(graph, QUANTIZED_OPS, lower)


def _onnx_code(dtype: str) -> int:
    """ONNX's element type code of a dtype."""
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(numpy_dtype(dtype))


def lower_recurrent(graph: Graph) -> Graph:
    """RNN / GRU / LSTM -> their steps unrolled over the (static) sequence (see ops/recurrent.py)."""
    from .ops.recurrent import GATES

    return _lower_nodes(graph, tuple(GATES), lambda g, n, em: _Recurrence(g, n, em).lower())


class _Recurrence:
    """The nodes of one unrolled RNN / GRU / LSTM node (ONNX's gate order: GRU z, r, h; LSTM i, o,
    f, c; peepholes i, o, f)."""

    def __init__(self, g: Graph, n: Node, em: _Emitter) -> None:
        from .ops.recurrent import GATES, activations, directions, shapes

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


# --- canonicalization -------------------------------------------------------------------------------
def canonicalize_gemm(graph: Graph) -> Graph:
    """Gemm -> MatMul with a [K, N] right operand (pre-transposed when constant), then an optional
    Mul by alpha and an Add of beta * C."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op != "Gemm":
            out.append(n)
            continue
        a, b = n.inputs[0], n.inputs[1]
        c = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
        y_t = g.types[n.outputs[0]]
        if n.attrs.get("transA", 0):
            if a in g.consts:
                a = _add_const(g, a + "_T", g.consts[a].T)
            else:
                at = _new_value(g, a + "_T", TensorType(g.types[a].shape[::-1], g.types[a].dtype))
                out.append(Node("Transpose", [a], [at], {"perm": [1, 0]}, n.name + "_transA"))
                a = at
        if n.attrs.get("transB", 0):
            if b in g.consts:
                b = _add_const(g, b + "_T", g.consts[b].T)
            else:
                bt = _new_value(g, b + "_T", TensorType(g.types[b].shape[::-1], g.types[b].dtype))
                out.append(Node("Transpose", [b], [bt], {"perm": [1, 0]}, n.name + "_transB"))
                b = bt
        steps: list[tuple[str, list[str]]] = [("MatMul", [a, b])]
        if alpha != 1.0:
            steps.append(("Mul", ["", _add_const(g, n.name + "_alpha", np.float32(alpha))]))
        if c is not None:
            if c in g.consts:
                cc = _add_const(g, c + "_beta", (beta * g.consts[c]).astype(np.float32)) if beta != 1.0 else c
            else:
                cc = c
                if beta != 1.0:
                    cb = _new_value(g, c + "_beta", g.types[c])
                    out.append(
                        Node(
                            "Mul",
                            [c, _add_const(g, n.name + "_beta", np.float32(beta))],
                            [cb],
                            {},
                            n.name + "_beta",
                        )
                    )
                    cc = cb
            steps.append(("Add", ["", cc]))
        prev = ""
        for i, (op, ins) in enumerate(steps):
            last = i == len(steps) - 1
            dst = n.outputs[0] if last else _new_value(g, f"{n.name}_{op.lower()}", y_t)
            ins = [prev if x == "" else x for x in ins]
            out.append(Node(op, ins, [dst], {}, n.name if i == 0 else f"{n.name}_{op.lower()}"))
            prev = dst
    g.nodes = out
    return infer_types(eliminate_dead_code(g))


def remove_identities(graph: Graph) -> Graph:
    """Identity and inference Dropout nodes disappear (uses read their input)."""
    g = graph.copy()
    for n in [n for n in g.nodes if n.op in ("Identity", "Dropout")]:
        _bypass(g, n)
    return g


def _close(v: float | None, target: float, tol: float = 1e-3) -> bool:
    return v is not None and abs(v - target) <= tol * abs(target)


def fuse_gelu(graph: Graph) -> Graph:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` -- as exporters write it, in any association of the
    products and with ``x * (1/sqrt 2)`` for the division -- becomes one Gelu node."""
    g = graph.copy()
    changed = True
    while changed:
        changed = False
        for erf in [n for n in g.nodes if n.op == "Erf"]:
            match = _match_gelu(g, erf)
            if match is None:
                continue
            x, removed, out = match
            last = max(g.nodes.index(r) for r in removed)
            gelu = Node("Gelu", [x], [out], {}, g.fresh_name(erf.name + "_gelu"))
            g.nodes.insert(last + 1, gelu)
            for r in removed:
                g.nodes.remove(r)
            changed = True
            break
    return eliminate_dead_code(infer_types(g))


def _match_gelu(g: Graph, erf: Node) -> tuple[str, list[Node], str] | None:
    prod, cons = g.producer(), g.consumers()

    def only(v: str) -> Node | None:
        users = cons.get(v, [])
        return users[0] if len(users) == 1 and v not in g.outputs else None

    def other(n: Node, v: str) -> str | None:
        if len(n.inputs) != 2 or v not in n.inputs:
            return None
        return n.inputs[1] if n.inputs[0] == v else n.inputs[0]

    pre = prod.get(erf.inputs[0])
    if pre is None or only(erf.inputs[0]) is not erf:
        return None
    if pre.op == "Div" and _close(scalar(g, pre.inputs[1]), math.sqrt(2.0)):
        x = pre.inputs[0]
    elif pre.op == "Mul":
        x = next((v for v in pre.inputs if scalar(g, v) is None), None)
        c = other(pre, x) if x else None
        if x is None or c is None or not _close(scalar(g, c), 1.0 / math.sqrt(2.0)):
            return None
    else:
        return None
    add = only(erf.outputs[0])
    if add is None or add.op != "Add" or not _close(scalar(g, other(add, erf.outputs[0]) or ""), 1.0):
        return None
    a = add.outputs[0]
    m1 = only(a)
    if m1 is None or m1.op != "Mul":
        return None
    o1 = other(m1, a)
    if o1 is None:
        return None
    nodes = [pre, erf, add, m1]
    if o1 == x:  # (x * a) * 0.5
        m2 = only(m1.outputs[0])
        if m2 is None or m2.op != "Mul" or not _close(scalar(g, other(m2, m1.outputs[0]) or ""), 0.5):
            return None
        return x, nodes + [m2], m2.outputs[0]
    if _close(scalar(g, o1), 0.5):  # (a * 0.5) * x
        m2 = only(m1.outputs[0])
        if m2 is None or m2.op != "Mul" or other(m2, m1.outputs[0]) != x:
            return None
        return x, nodes + [m2], m2.outputs[0]
    half = prod.get(o1)  # (x * 0.5) * a
    if half is not None and half.op == "Mul" and only(o1) is m1 and other(half, x) is not None:
        if _close(scalar(g, other(half, x) or ""), 0.5):
            return x, nodes + [half], m1.outputs[0]
    return None


def simplify_transposes(graph: Graph) -> Graph:
    """Transpose of a transpose -> one transpose; identity permutations disappear; a transpose
    that moves only size-1 dims is a Reshape (no data movement)."""
    g = graph.copy()
    changed = True
    while changed:
        changed = False
        prod, cons = g.producer(), g.consumers()
        for n in g.nodes:
            if n.op != "Transpose":
                continue
            x = n.inputs[0]
            shape = g.types[x].shape
            perm = transpose_perm(n, len(shape))
            first = prod.get(x)
            if first is not None and first.op == "Transpose" and cons.get(x) == [n] and x not in g.outputs:
                p1 = transpose_perm(first, len(g.types[first.inputs[0]].shape))
                n.inputs = [first.inputs[0]]
                n.attrs = {"perm": [p1[p] for p in perm]}
                g.nodes.remove(first)
                del g.types[x]
                changed = True
                break
            if perm == list(range(len(shape))):
                if _bypass(g, n):
                    changed = True
                    break
                continue
            moved = [p for p in perm if shape[p] != 1]
            if moved == sorted(moved):
                out_shape = np.asarray([shape[p] for p in perm], dtype=np.int64)
                spec = _add_const(g, n.name + "_shape", out_shape)
                n.op, n.inputs, n.attrs = "Reshape", [x, spec], {}
                changed = True
                break
    return eliminate_dead_code(infer_types(g))


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
    from .ops.movement import split_sizes

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
    from .ops.scatter import scatter_table

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
    from .ops.nn import einsum_terms

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


# --- the pipeline -----------------------------------------------------------------------------------
def optimize(
    graph: Graph, layout: str = "NHWC", winograd: Plan = 0
) -> Graph:
    """The compiler's pass pipeline, in order; ``winograd`` (a tile size m for every eligible 3x3
    convolution, or conv name -> m) computes them as F(m x m, 3 x 3) (autotune.graph.winograd);
    last, the products are set to ``graph.precision`` (autotune.graph.precision)."""
    g = fold_constants(castlike_to_cast(graph))
    g = remove_identities(lower_recurrent(lower_quantize(lower_losses(g))))
    g = split_to_slices(g)
    g = one_output_per_node(g)
    g = scatter_to_table(g)
    g = lower_einsum(g)
    g = matmul_vectors_to_matrices(g)
    g = canonicalize_gemm(g)
    g = fuse_gelu(g)
    g = fold_batch_norm(g)
    g = lower_batch_norm(g)
    g = convert_layout(g, layout)
    g = simplify_transposes(g)
    g = fold_constants(g)
    if winograd:
        g = use_winograd(g, winograd)
    g = scalar_results_as_views(g)
    g = absorb_const_operands(g)
    from .precision import apply_precision  # it runs these passes' inference again

    g = apply_precision(g, g.precision)
    for n in g.nodes:
        if op_def(n.op).kind in (FOLD, REWRITE):
            raise GraphError(f"{n.op} node {n.name!r} has non-constant inputs the compiler cannot handle")
    return eliminate_dead_code(g)
