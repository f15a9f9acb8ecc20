"""ONNX frontend: an ONNX model -> the graph IR, every shape and dtype static and inferred.

Problems are reported before any work starts and all at once: every unsupported operator (by type
and node name) and unsupported attribute value in one :class:`UnsupportedModelError`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .contrib import checkable, contrib_problem, expand_contrib, is_contrib
from .half import declared, widen
from .ir import Graph, GraphError, Node, TensorType, topo_sort
from .ops import IMPORTED_AS, KERNEL_DTYPES, OPS, attr_problem
from .ops.functions import expand_functions

log = logging.getLogger("autotune.graph")


class ModelImportError(GraphError):
    """The file is not a usable ONNX model (not ONNX, unresolved dynamic dims, undefined values)."""


class UnsupportedModelError(ModelImportError):
    """Operators or attribute values this compiler does not support (all of them, listed)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"unsupported by the compiler: {'; '.join(problems)}")


def _load(source: Any) -> Any:
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray)):
        data, where = bytes(source), "the given bytes"
    else:
        path = Path(source)
        if not path.is_file():
            raise ModelImportError(f"model file {str(path)!r} does not exist")
        data, where = path.read_bytes(), str(path)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - protobuf raises several types for garbage
        raise ModelImportError(f"{where} is not an ONNX model ({type(err).__name__})") from None
    if not model.HasField("graph") or not model.graph.output or model.ir_version <= 0:
        raise ModelImportError(f"{where} is not an ONNX model (no graph, outputs or IR version)")
    opset, newest = _opset(model), onnx.defs.onnx_opset_version()
    if opset > newest:
        raise ModelImportError(f"{where} uses ONNX opset {opset}; the newest this onnx knows is {newest}")
    if not isinstance(source, (bytes, bytearray)):
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(Path(source).parent))
        except Exception as err:  # noqa: BLE001
            raise ModelImportError(f"{where}: cannot load external weights ({err})") from None
    return model


def _opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import AttributeProto, helper, numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            out[a.name] = "<subgraph>"
        else:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [x.decode() if isinstance(x, bytes) else x for x in v]
            out[a.name] = v
    return out


def _type_of(vi: Any) -> tuple[list[int | str | None], str]:
    from onnx import helper

    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ModelImportError(f"value {vi.name!r} is not a tensor")
    dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))) if tt.elem_type else "float32"
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return dims, dtype


def _imported_node(n: Any, name: str, opset: int) -> tuple[Node, np.ndarray | None]:
    """The graph node of ONNX node ``n``: older forms as the operator they became (Upsample, and
    Resize before opset 11, as the opset-11 Resize), with a constant operand an older form held as an
    attribute (to be given a name and put in the third input)."""
    attrs, inputs = _attrs(n), list(n.input)
    op = IMPORTED_AS.get(n.op_type, n.op_type)
    held = None
    if op == "Resize" and (n.op_type != "Resize" or opset < 11):
        from .ops.resample import as_opset11_resize

        attrs, inputs, held = as_opset11_resize(attrs, inputs)
    return Node(op, inputs, list(n.output), attrs, name), held


def unsupported(model: Any) -> list[str]:
    """Every node this compiler cannot take, as ``"Op (node 'name')"`` / attribute problems."""
    by_op: dict[str, list[str]] = {}
    problems: list[str] = []
    opset = _opset(model)
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        if is_contrib(n):
            why = contrib_problem(n, _attrs(n))
            if why:
                problems.append(f"{n.domain}.{n.op_type} node {name!r} with {why}")
            continue
        op = IMPORTED_AS.get(n.op_type, n.op_type)
        if n.domain not in ("", "ai.onnx") or op not in OPS or OPS[op].internal:
            op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
            by_op.setdefault(op, []).append(name)
            continue
        why = attr_problem(_imported_node(n, name, opset)[0])
        if why:
            problems.append(f"{n.op_type} node {name!r} with {why}")
    ops = [
        f"{op} (node{'s' if len(names) > 1 else ''} {', '.join(repr(x) for x in names[:5])}"
        f"{', ...' if len(names) > 5 else ''})"
        for op, names in sorted(by_op.items())
    ]
    return ops + problems


def from_onnx(
    source: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fold: bool = True,
) -> Graph:
    """Import an ONNX model (path, bytes or ModelProto). ``input_shapes`` fixes dynamic input dims
    by input name. Shapes and dtypes of every value are inferred; constant subexpressions (shape
    computations, Constant nodes) are folded unless ``fold`` is False."""
    import onnx

    model = _load(source)
    narrow_inputs = {model.graph.input[j].name: t for j, t in declared(model.graph.input).items()}
    declared_outputs = tuple(declared(model.graph.output).items())
    model, widened = widen(model)
    if widened:
        log.info("%s is stored in 16-bit floats: computed in float32 (%d tensors and types widened)",
                 model.graph.name or "the model", widened)
    model = expand_functions(model)
    problems = unsupported(model)
    g = model.graph
    _check_defined(
        [
            Node(n.op_type, list(n.input), list(n.output), {}, n.name or f"{n.op_type}_{i}")
            for i, n in enumerate(g.node)
        ],
        {vi.name for vi in g.input} | {init.name for init in g.initializer},
    )
    try:
        onnx.checker.check_model(checkable(model, _opset(model)))
    except onnx.checker.ValidationError as err:
        if problems:
            raise UnsupportedModelError(problems) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else "validation failed"
        raise ModelImportError(f"invalid ONNX model: {first}") from None
    opset = _opset(model)
    consts: dict[str, np.ndarray] = {}
    from onnx import numpy_helper

    for init in g.initializer:
        consts[init.name] = numpy_helper.to_array(init)
    types: dict[str, TensorType] = {k: TensorType(tuple(v.shape), str(v.dtype)) for k, v in consts.items()}
    given = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    inputs: list[str] = []
    names = [vi.name for vi in g.input if vi.name not in consts]
    for k in given:
        if k not in names:
            raise ModelImportError(
                f"--input-shape names {k!r}, which is not an input (inputs: {', '.join(names)})"
            )
    dynamic = False
    for vi in g.input:
        if vi.name in consts:
            continue
        inputs.append(vi.name)
        dims, dtype = _type_of(vi)
        bad = [d for d in dims if isinstance(d, int) and d < 0]
        if bad:
            problems.append(f"input {vi.name!r} has a negative dim ({bad[0]}) in {dims}")
            continue
        if vi.name in given:
            shape = given[vi.name]
            if len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape)):
                raise ModelImportError(
                    f"input {vi.name!r}: shape {list(shape)} does not fit the model's {dims}"
                )
        elif any(not isinstance(d, int) for d in dims):
            shown = ",".join(str(d) if d is not None else "?" for d in dims)
            problems.append(f"input {vi.name!r} has dynamic dims [{shown}]")
            dynamic = True
            continue
        else:
            shape = tuple(int(d) for d in dims)  # type: ignore[arg-type]
        if dtype not in KERNEL_DTYPES:
            problems.append(f"input {vi.name!r} is {dtype}; model inputs may be {', '.join(KERNEL_DTYPES)}")
            continue
        types[vi.name] = TensorType(shape, dtype)
        if 0 in shape:  # it holds nothing: known at compile time, folded like a constant
            consts[vi.name] = np.zeros(shape, dtype)
    nodes = []
    fresh = _fresh_names({v for n in g.node for v in (*n.input, *n.output)} | set(consts)
                         | {vi.name for vi in g.input})
    for i, n in enumerate(g.node):
        if is_contrib(n):  # onnxruntime's fused operators, as the graph's own
            attrs = _attrs(n)
            if contrib_problem(n, attrs):
                continue  # named in problems already
            added: dict[str, np.ndarray] = {}
            nodes += expand_contrib(n, n.name or f"{n.op_type}_{i}", attrs, fresh, added)
            for k, v in added.items():
                consts[k] = v
                types[k] = TensorType(v.shape, str(v.dtype))
            continue
        node, held = _imported_node(n, n.name or f"{n.op_type}_{i}", opset)
        if held is not None:
            node.inputs[2] = fresh(f"{node.name}_scales")
            consts[node.inputs[2]] = held
            types[node.inputs[2]] = TensorType(held.shape, str(held.dtype))
        if (n.op_type in ("Softmax", "LogSoftmax", "Hardmax") and opset < 13) or (
            n.op_type == "Dropout" and opset < 10
        ):
            node.attrs["_legacy"] = True  # the operator's older definition (axis semantics, mask type)
        nodes.append(node)
    try:
        nodes = topo_sort(nodes, list(inputs) + list(consts))
    except GraphError as err:
        raise ModelImportError(str(err)) from None
    outputs = [o.name for o in g.output]
    declared_inputs = tuple((j, narrow_inputs[v]) for j, v in enumerate(inputs) if v in narrow_inputs)
    graph = Graph(g.name or "model", inputs, outputs, nodes, types, consts,
                  declared_inputs=declared_inputs, declared_outputs=declared_outputs)
    from .passes import eliminate_dead_code, infer_types

    if problems:
        # every other problem too, before any work: nodes that cannot be typed (unsupported dtypes,
        # operands that must be constants...), skipping those downstream of a problem already named
        known = [n for n in nodes if n.op in OPS and not OPS[n.op].internal and not attr_problem(n)]
        infer_types(Graph(graph.name, inputs, outputs, known, types, consts), fold=fold, problems=problems)
        hint = " (fix dynamic dims with --input-shape NAME=D0,D1,...)" if dynamic else ""
        problems[-1] += hint
        raise UnsupportedModelError(problems)
    collected: list[str] = []
    typed = infer_types(graph, fold=fold, problems=collected)
    if collected:
        raise UnsupportedModelError(collected)
    graph = typed
    graph.validate()
    _check_declared_outputs(model, graph)
    return eliminate_dead_code(graph)


def _fresh_names(taken: set[str]) -> Callable[[str], str]:
    """A source of value names: ``base``, or ``base`` with a number, naming nothing in ``taken``
    (the model's values and constants) nor any name it gave before."""

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    return fresh


def _check_defined(nodes: list[Node], defined: set[str]) -> None:
    produced = {o for n in nodes for o in n.outputs if o}
    missing = []
    for n in nodes:
        for v in n.inputs:
            if v and v not in defined and v not in produced:
                missing.append(f"node {n.name!r} ({n.op}) reads {v!r}")
    if missing:
        raise ModelImportError(
            "missing input: " + "; ".join(missing[:5]) + " — no node, graph input or initializer defines it"
        )


def _check_declared_outputs(model: Any, graph: Graph) -> None:
    for vi in model.graph.output:
        if vi.name not in graph.types:
            raise ModelImportError(f"graph output {vi.name!r} is never produced")
        dims, _ = _type_of(vi) if vi.type.HasField("tensor_type") else ([], "")
        have = graph.types[vi.name].shape
        if dims and all(isinstance(d, int) for d in dims) and tuple(dims) != have:
            raise ModelImportError(f"output {vi.name!r} is declared {list(dims)} but computes {list(have)}")
