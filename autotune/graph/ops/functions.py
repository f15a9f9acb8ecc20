"""Operators ONNX defines as functions of other operators (Attention, RotaryEmbedding, SwiGLU, ...):
the frontend replaces each such node by its function body, built by the onnx package for the node's
attributes and input types (as onnx's own tooling expands them for its ``*_expanded`` tests), so they
compile exactly as their definition reads, with the kernels of the operators in the body. An If
whose condition depends only on constants (a body's checks of its constant operands) is replaced by
the branch it takes, its condition computed with onnx's reference evaluator."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphError, Node
from .base import OPS, Consts, Types, register

# the function operators the compiler takes (every one of their node tests in float32 computes)
FUNCTION_OPS = ("Attention", "RotaryEmbedding", "SwiGLU", "Swish", "CenterCropPad", "CausalConvWithState",
                "HannWindow", "HammingWindow", "BlackmanWindow", "DynamicQuantizeLinear")
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


_NONDETERMINISTIC = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                     "Bernoulli")


def _constant_values(model: Any) -> set[str]:
    """Values computed from initializers and Constant nodes alone (no graph input, no randomness)."""
    known = {i.name for i in model.graph.initializer}
    for n in model.graph.node:
        nested = any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute)
        if not nested and n.op_type not in _NONDETERMINISTIC and all(not v or v in known for v in n.input):
            known.update(o for o in n.output if o)
    return known


def _evaluate(model: Any, value: str) -> Any:
    """A constant value of ``model`` computed with onnx's reference evaluator."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    producer = {o: k for k, n in enumerate(g.node) for o in n.output}
    need: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v in producer and producer[v] not in need:
            need.add(producer[v])
            stack.extend(i for i in g.node[producer[v]].input if i)
    order = [n for k, n in enumerate(g.node) if k in need]
    sub = onnx.helper.make_graph(order, "cond", [], [onnx.helper.make_value_info(value, onnx.TypeProto())],
                                 initializer=list(g.initializer))
    m = onnx.helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)
    return ReferenceEvaluator(m).run(None, {})[0]


def _rename_captured(node: Any, rename: dict[str, str]) -> None:
    """Rename, in ``node``'s subgraphs (and theirs), the outer values they read that ``rename`` maps
    and they do not define themselves."""
    for a in node.attribute:
        for sub in [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []:
            local = {i.name for i in [*sub.input, *sub.initializer]} | {o for n in sub.node for o in n.output}
            outer = {k: v for k, v in rename.items() if k not in local}
            for n in sub.node:
                n.input[:] = [outer.get(v, v) for v in n.input]
                _rename_captured(n, outer)
            for o in sub.output:
                o.name = outer.get(o.name, o.name)


def inline_constant_ifs(model: Any) -> Any:
    """``model`` with every If whose condition depends only on constants replaced by the branch it
    takes (values defined in the branch prefixed by the If's name, also where subgraphs of the branch
    read them; the branch's outputs become the If's through Identity nodes)."""
    import onnx

    for _ in range(64):
        known = _constant_values(model)
        at = next((i for i, n in enumerate(model.graph.node)
                   if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.input[0] in known), None)
        if at is None:
            return model
        n = model.graph.node[at]
        branches = {a.name: a.g for a in n.attribute}
        branch = branches["then_branch" if bool(np.asarray(_evaluate(model, n.input[0])).reshape(-1)[0])
                          else "else_branch"]
        prefix = f"{n.name or 'If'}_{at}_"
        inner = {o for b in branch.node for o in b.output if o} | {i.name for i in branch.initializer}
        rename = {v: prefix + v for v in inner}
        nodes = []
        for b in branch.node:
            c = onnx.NodeProto()
            c.CopyFrom(b)
            c.name = prefix + (b.name or b.op_type)
            c.input[:] = [rename.get(v, v) for v in b.input]
            c.output[:] = [rename.get(v, v) for v in b.output]
            _rename_captured(c, rename)
            nodes.append(c)
        for o, bo in zip(n.output, branch.output):
            if o:
                nodes.append(onnx.helper.make_node("Identity", [rename.get(bo.name, bo.name)], [o],
                                                   name=prefix + "out_" + o))
        out = onnx.ModelProto()
        out.CopyFrom(model)
        graph_nodes = list(out.graph.node)
        del out.graph.node[:]
        out.graph.node.extend(graph_nodes[:at] + nodes + graph_nodes[at + 1 :])
        for init in branch.initializer:
            t = onnx.TensorProto()
            t.CopyFrom(init)
            t.name = rename[init.name]
            out.graph.initializer.append(t)
        model = out
    return model


def expand_functions(model: Any) -> Any:
    """``model`` with every node of a function operator (kind ``function``) replaced by its function body
    (internal values prefixed by the node's name); the model itself when it has none."""
    import onnx

    for _ in range(MAX_EXPANSION_ROUNDS):
        model = inline_constant_ifs(model)
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
