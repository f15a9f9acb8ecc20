"""Operators ONNX defines as functions of other operators (Attention, RotaryEmbedding, SwiGLU, ...):
the frontend replaces each such node by its function body, built by the onnx package for the node's
attributes and input types (as onnx's own tooling expands them for its ``*_expanded`` tests), so they
compile exactly as their definition reads, with the kernels of the operators in the body."""

from __future__ import annotations

from typing import Any

from ..ir import GraphError, Node
from .base import OPS, Consts, Types, register

# the function operators the compiler takes (every one of their node tests in float32 computes)
FUNCTION_OPS = ("Attention", "RotaryEmbedding", "SwiGLU", "Swish", "CenterCropPad", "CausalConvWithState",
                "HannWindow", "HammingWindow", "BlackmanWindow")
FUNCTION = "function"  # the kind of an operator computed as its function body
MAX_EXPANSION_ROUNDS = 4  # a body holding function operators is expanded again, this many times at most


class _Function:
    """Never reached: the frontend expands the node before any typing."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list:
        raise GraphError(f"{node.op} node {node.name!r} should have been expanded into its function body")

    numpy = infer


for _op in FUNCTION_OPS:
    if _op not in OPS:  # an operator with its own kernel definition keeps it
        register(_op, FUNCTION)(_Function)


def _opset_of(imports: Any) -> int:
    return next((int(o.version) for o in imports if o.domain in ("", "ai.onnx")), 1)


def _opset(model: Any) -> int:
    return _opset_of(model.opset_import)


def _value_types(model: Any) -> dict[str, Any]:
    """Value name -> TypeProto (onnx's shape inference over the model)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types stay unknown; the expansion then fails by name
        inferred = model
    g = inferred.graph
    types = {vi.name: vi.type for vi in [*g.input, *g.value_info, *g.output]}
    for init in g.initializer:
        types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return types


def expand_functions(model: Any) -> Any:
    """``model`` with every node of a function operator (kind ``function``) replaced by its function body
    (internal values prefixed by the node's name); the model itself when it has none."""
    import onnx

    for _ in range(MAX_EXPANSION_ROUNDS):
        todo = {i for i, n in enumerate(model.graph.node)
                if n.domain in ("", "ai.onnx") and n.op_type in OPS and OPS[n.op_type].kind == FUNCTION}
        if not todo:
            return model
        # onnx's own expansion of a node into its function body (what writes its *_expanded tests)
        from onnx.backend.test.case.node import function_testcase_helper
        types = _value_types(model)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        nodes = []
        for i, n in enumerate(model.graph.node):
            if i not in todo:
                nodes.append(n)
                continue
            name = n.name or f"{n.op_type}_{i}"
            missing = [v for v in n.input if v and v not in types]
            if missing:
                raise GraphError(f"{n.op_type} node {name!r}: the type of {missing[0]!r} is unknown, so its "
                                 "function body cannot be built")
            empty = onnx.TypeProto()
            node = onnx.NodeProto()
            node.CopyFrom(n)
            try:
                bodies, _ = function_testcase_helper(
                    node, [types[v] if v else empty for v in n.input], f"{name}_", model.opset_import
                )
            except Exception as err:  # noqa: BLE001 - onnx refuses the node: say so by name
                raise GraphError(f"{n.op_type} node {name!r}: no function body for it ({err})") from None
            # the body written in the newest opset the model imports
            opset = _opset(model)
            fits = [(_opset_of(imports), body) for body, imports in bodies if _opset_of(imports) <= opset]
            if not fits:
                raise GraphError(f"{n.op_type} node {name!r}: onnx has no function body for opset {opset}")
            nodes.extend(max(fits, key=lambda f: f[0])[1])
        del out.graph.node[:]
        out.graph.node.extend(nodes)
        model = out
    raise GraphError(f"function operators still left after {MAX_EXPANSION_ROUNDS} rounds of expansion")
