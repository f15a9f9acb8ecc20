"""onnxruntime's contrib operators (domain ``com.microsoft``) that its graph optimizer and
transformer optimizer write into the models they save (``optimized_model_filepath`` at the extended
level, ``onnxruntime.transformers.optimizer``): each is imported as the graph's own operators, so it
compiles like the subgraph it was fused from. What each computes is onnxruntime's contrib-operator
specification; the tests check every one against onnxruntime itself.

- ``Gelu(X)``: erf GELU; ``BiasGelu(A, B)``: GELU of A + B; ``FastGelu(X[, bias])``: the tanh
  approximation of GELU of X (+ bias); ``QuickGelu(X)``: X · sigmoid(alpha · X);
- ``FusedMatMul(A, B)``: alpha · A @ B, either operand's first axis moved among its last two
  (transBatchA / transBatchB) and its last two axes swapped (transA / transB) first;
- ``FusedConv(X, W[, B[, Z]])``: a convolution (+ Z) and its activation (Relu, Tanh, Sigmoid,
  LeakyRelu, Clip, HardSigmoid, with ``activation_params``); ``FusedGemm(A, B[, C])``: a Gemm and
  its activation (the same but Clip, with ``activation_alpha`` / ``activation_beta``);
- ``SimplifiedLayerNormalization(X, scale)`` (which onnxruntime puts in the ONNX domain): RMS
  normalization; its LayerNormalization in the ONNX domain below opset 17 is ONNX's of opset 17;
- ``SkipLayerNormalization(input, skip, gamma[, beta[, bias]])``: layer norm of input + skip (+ bias)
  over the last axis; its fourth output is that sum. ``SkipSimplifiedLayerNormalization(input, skip,
  gamma)``: the same with RMS normalization.

A form these do not cover (an activation not listed, a bias input of
SkipSimplifiedLayerNormalization, the mean and inverse-deviation outputs a training graph reads) is
named in the import's error, as an unsupported operator is.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .ir import Node

DOMAIN = "com.microsoft"
Consts = dict[str, np.ndarray]
Names = Callable[[str], str]  # a fresh value name from a base


def _gelu(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    return [Node("Gelu", [n.input[0]], [n.output[0]], {"approximate": "none"}, name)]


def _bias_gelu(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    s = names("sum")
    return [Node("Add", [n.input[0], n.input[1]], [s], {}, name + "_add"),
            Node("Gelu", [s], [n.output[0]], {"approximate": "none"}, name)]


def _fast_gelu(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    x, nodes = n.input[0], []
    if len(n.input) > 1 and n.input[1]:
        x = names("sum")
        nodes.append(Node("Add", [n.input[0], n.input[1]], [x], {}, name + "_add"))
    return nodes + [Node("Gelu", [x], [n.output[0]], {"approximate": "tanh"}, name)]


def _quick_gelu(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    x, gate, nodes = n.input[0], names("gate"), []
    alpha = float(a.get("alpha", 1.702))
    if alpha != 1.0:  # alpha 1 is SiLU: x · sigmoid(x), the form exporters write (the same tasks)
        scale, x = names("alpha"), names("scaled")
        consts[scale] = np.array(alpha, np.float32)
        nodes.append(Node("Mul", [n.input[0], scale], [x], {}, name + "_scale"))
    return nodes + [Node("Sigmoid", [x], [gate], {}, name + "_sigmoid"),
                    Node("Mul", [n.input[0], gate], [n.output[0]], {}, name)]


def _fused_matmul(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    nodes, operands = [], []
    for k, side in enumerate("AB"):
        v, batch, swap = n.input[k], int(a.get(f"transBatch{side}", 0)), int(a.get(f"trans{side}", 0))
        if batch or swap:  # the operand as FusedMatMul reads it (ops.movement.operand_perm)
            t = names(f"t{k}")
            nodes.append(Node("Transpose", [v], [t], {"_operand": [batch, swap]}, f"{name}_{side}"))
            v = t
        operands.append(v)
    alpha = float(a.get("alpha", 1.0))
    if alpha == 1.0:
        return nodes + [Node("MatMul", operands, [n.output[0]], {}, name)]
    prod, scale = names("product"), names("alpha")
    consts[scale] = np.array(alpha, np.float32)
    return nodes + [Node("MatMul", operands, [prod], {}, name + "_matmul"),
                    Node("Mul", [prod, scale], [n.output[0]], {}, name)]


def _skip_norm(simplified: bool) -> Callable[[Any, str, dict, Names, Consts], list[Node]]:
    def expand(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
        ins = list(n.input) + [""] * (5 - len(n.input))
        outs = list(n.output) + [""] * (4 - len(n.output))
        total = outs[3] or names("sum")
        nodes = []
        bias = "" if simplified else ins[4]  # (a simplified one's bias is refused: contrib_problem)
        if bias:
            partial = names("partial")
            nodes += [Node("Add", [ins[0], ins[1]], [partial], {}, name + "_skip"),
                      Node("Add", [partial, bias], [total], {}, name + "_bias")]
        else:
            nodes.append(Node("Add", [ins[0], ins[1]], [total], {}, name + "_skip"))
        eps = float(a.get("epsilon", 1e-12))
        if simplified:
            norm = Node("RMSNormalization", [total, ins[2]], [outs[0]], {"axis": -1, "epsilon": eps}, name)
        else:
            operands = [total, ins[2]] + ([ins[3]] if ins[3] else [])
            norm = Node("LayerNormalization", operands, [outs[0]], {"axis": -1, "epsilon": eps}, name)
        return nodes + [norm]
    return expand


def _simplified_norm(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    attrs = {"axis": int(a.get("axis", -1)), "epsilon": float(a.get("epsilon", 1e-5))}
    return [Node("RMSNormalization", list(n.input)[:2], [n.output[0]], attrs, name)]


CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")


def _activation(act: str, params: list, x: str, out: str, name: str, names: Names,
                consts: Consts) -> list[Node]:
    """The activation of a fused convolution or GEMM (``params``: its alpha / beta, or Clip's
    bounds)."""
    if act == "Clip":
        lo, hi = names("min"), names("max")
        consts[lo], consts[hi] = np.array(params[0], np.float32), np.array(params[1], np.float32)
        return [Node("Clip", [x, lo, hi], [out], {}, name)]
    attrs = ({"alpha": params[0]} if act == "LeakyRelu" else
             {"alpha": params[0], "beta": params[1]} if act == "HardSigmoid" else {})
    return [Node(act, [x], [out], attrs, name)]


def _fused_conv(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    conv = names("conv")
    nodes = [Node("Conv", list(n.input)[:3], [conv], {k: a[k] for k in CONV_ATTRS if k in a}, name + "_conv")]
    if len(n.input) > 3 and n.input[3]:  # Z, added before the activation
        total = names("sum")
        nodes.append(Node("Add", [conv, n.input[3]], [total], {}, name + "_add"))
        conv = total
    params = list(a.get("activation_params", []))
    return nodes + _activation(a.get("activation", ""), params, conv, n.output[0], name, names, consts)


def _gemm_params(a: dict) -> list:
    return [a[k] for k in ("activation_alpha", "activation_beta") if k in a]


def _fused_gemm(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    gemm = names("gemm")
    attrs = {k: a[k] for k in ("alpha", "beta", "transA", "transB") if k in a}
    nodes = [Node("Gemm", list(n.input)[:3], [gemm], attrs, name + "_gemm")]
    act = a.get("activation", "")
    return nodes + _activation(act, _gemm_params(a), gemm, n.output[0], name, names, consts)


# --- quantized operators (onnxruntime's quantizer writes them in its QOperator format) -------------
def _dequantized(x: str, scale: str, zp: str, name: str, names: Names, nodes: list[Node],
                 attrs: dict | None = None) -> str:
    out = names("dq")
    nodes.append(Node("DequantizeLinear", [x, scale, zp] if zp else [x, scale], [out], attrs or {}, name))
    return out


def _quantized(x: str, scale: str, zp: str, out: str, name: str) -> Node:
    return Node("QuantizeLinear", [x, scale, zp] if zp else [x, scale], [out], {}, name)


def _qlinear(op: str, operands: tuple[int, ...], y_at: int,
             attrs: Callable[[dict], dict] = lambda a: {}) -> Callable[..., list[Node]]:
    """``QLinear<op>``: the float ``op`` of its dequantized operands (each a value, scale and zero
    point from input position ``operands[k]``), quantized by the scale and zero point at ``y_at``
    (what onnxruntime computes, but where a float lands on the other side of a rounding step)."""

    def expand(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
        ins, nodes = list(n.input) + [""] * 9, []
        xs = [_dequantized(ins[i], ins[i + 1], ins[i + 2], f"{name}_dq{k}", names, nodes)
              for k, i in enumerate(operands)]
        y = names("y")
        nodes.append(Node(op, xs, [y], attrs(a), name + "_op"))
        return nodes + [_quantized(y, ins[y_at], ins[y_at + 1], n.output[0], name)]

    return expand


POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")


def _qlinear_concat(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    """QLinearConcat(Y_scale, Y_zero_point, X0, X0_scale, X0_zero_point, X1, ...)."""
    ins, nodes = list(n.input), []
    xs = [_dequantized(ins[i], ins[i + 1], ins[i + 2], f"{name}_dq{k}", names, nodes)
          for k, i in enumerate(range(2, len(ins), 3))]
    y = names("y")
    nodes.append(Node("Concat", xs, [y], {"axis": int(a.get("axis", 0))}, name + "_op"))
    return nodes + [_quantized(y, ins[0], ins[1], n.output[0], name)]


def _qgemm(n: Any, name: str, a: dict, names: Names, consts: Consts) -> list[Node]:
    """QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point[, C[, y_scale[, y_zero_point]]]):
    alpha A'B' (either transposed) + C (int32, in the scale a_scale b_scale), quantized by y_scale
    and y_zero_point where given, else float32."""
    ins, nodes = list(n.input) + [""] * 9, []
    trans_b = int(a.get("transB", 0))
    per_column = {"axis": 0 if trans_b else 1}
    ad = _dequantized(ins[0], ins[1], ins[2], name + "_dqa", names, nodes)
    bd = _dequantized(ins[3], ins[4], ins[5], name + "_dqb", names, nodes, per_column)
    y = names("product") if ins[6] or ins[7] else n.output[0]
    attrs = {"alpha": float(a.get("alpha", 1.0)), "transA": int(a.get("transA", 0)), "transB": trans_b}
    nodes.append(Node("Gemm", [ad, bd], [y], attrs, name + "_gemm"))
    if ins[6]:
        scale, bias, total = names("bias_scale"), names("bias"), names("sum") if ins[7] else n.output[0]
        nodes.append(Node("Mul", [ins[1], ins[4]], [scale], {}, name + "_bias_scale"))
        nodes.append(Node("DequantizeLinear", [ins[6], scale], [bias], {"axis": 0}, name + "_dqc"))
        nodes.append(Node("Add", [y, bias], [total], {}, name + "_add"))
        y = total
    if ins[7]:
        nodes.append(_quantized(y, ins[7], ins[8], n.output[0], name))
    return nodes


QLINEAR = {
    "QLinearAdd": _qlinear("Add", (0, 3), 6),
    "QLinearMul": _qlinear("Mul", (0, 3), 6),
    "QLinearSigmoid": _qlinear("Sigmoid", (0,), 3),
    "QLinearLeakyRelu": _qlinear("LeakyRelu", (0,), 3, lambda a: {"alpha": float(a.get("alpha", 0.01))}),
    "QLinearGlobalAveragePool": _qlinear("GlobalAveragePool", (0,), 3),
    "QLinearAveragePool": _qlinear("AveragePool", (0,), 3, lambda a: {k: a[k] for k in POOL_ATTRS if k in a}),
    "QLinearConcat": _qlinear_concat,
    "QGemm": _qgemm,
}


EXPANSIONS: dict[str, Callable[[Any, str, dict, Names, Consts], list[Node]]] = {
    "Gelu": _gelu,
    "BiasGelu": _bias_gelu,
    "FastGelu": _fast_gelu,
    "QuickGelu": _quick_gelu,
    "FusedMatMul": _fused_matmul,
    "SkipLayerNormalization": _skip_norm(simplified=False),
    "SkipSimplifiedLayerNormalization": _skip_norm(simplified=True),
    "FusedConv": _fused_conv,
    "FusedGemm": _fused_gemm,
    "SimplifiedLayerNormalization": _simplified_norm,
    **QLINEAR,
}


# operators onnxruntime registers in the ONNX domain itself: LayerNormalization below opset 17 (the
# one ONNX then defined, same inputs, attributes and outputs), SimplifiedLayerNormalization always
IN_ONNX_DOMAIN = {"LayerNormalization": 17, "SimplifiedLayerNormalization": None}


def _in_onnx_domain(n: Any, opset: int) -> bool:
    since = IN_ONNX_DOMAIN.get(n.op_type, 0)
    return n.domain in ("", "ai.onnx") and n.op_type in IN_ONNX_DOMAIN and (since is None or opset < since)


def is_contrib(n: Any) -> bool:
    """Is ONNX node ``n`` one of the contrib operators imported here?"""
    return (n.domain == DOMAIN and n.op_type in EXPANSIONS) or (
        n.domain in ("", "ai.onnx") and n.op_type == "SimplifiedLayerNormalization")


def checkable(model: Any, opset: int) -> Any:
    """``model`` as onnx's checker can take it: onnxruntime's operators in the ONNX domain
    (``IN_ONNX_DOMAIN``) moved to its own domain, which the checker does not check; the model itself
    when it has none."""
    at = [i for i, n in enumerate(model.graph.node) if _in_onnx_domain(n, opset)]
    if not at:
        return model
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i in at:
        out.graph.node[i].domain = DOMAIN
    if all(o.domain != DOMAIN for o in out.opset_import):
        out.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return out


def contrib_problem(n: Any, attrs: dict) -> str | None:
    """Why contrib node ``n`` cannot be imported (a form not covered), or None."""
    if n.op_type.startswith("Skip") and any(o for o in list(n.output)[1:3]):
        return "its mean or inverse standard deviation output read"
    if n.op_type == "SimplifiedLayerNormalization" and any(o for o in list(n.output)[1:]):
        return "its inverse standard deviation output read"
    if n.op_type == "SkipSimplifiedLayerNormalization" and len(n.input) > 3 and n.input[3]:
        return "a bias input"
    if n.op_type in ("QLinearGlobalAveragePool", "QLinearAveragePool") and int(attrs.get("channels_last", 0)):
        return "channels_last=1"
    if n.op_type in ("FusedConv", "FusedGemm"):
        conv = n.op_type == "FusedConv"
        act = attrs.get("activation", "")
        params = list(attrs.get("activation_params", [])) if conv else _gemm_params(attrs)
        wanted = {"Clip": 2, "HardSigmoid": 2, "LeakyRelu": 1}.get(act, 0)
        if act not in ACTIVATIONS or (act == "Clip" and not conv) or len(params) < wanted:
            return f"activation {act!r}" + (f" and parameters {params}" if act in ACTIVATIONS else "")
    return None


def expand_contrib(n: Any, name: str, attrs: dict, fresh: Names, consts: Consts) -> list[Node]:
    """The graph nodes contrib node ``n`` is computed as; values it needs inside are named by
    ``fresh`` (from a suffix after ``name``), constants go into ``consts``."""
    return EXPANSIONS[n.op_type](n, name, attrs, lambda suffix: fresh(f"{name}/{suffix}"), consts)
