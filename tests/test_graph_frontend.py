"""ONNX frontend: import, inferred shapes, folded shape computations, and one clear error for each
kind of bad model (unsupported operators all at once, not ONNX, dynamic dims, undefined values)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import zoo  # noqa: E402
from autotune.graph.frontend import ModelImportError, UnsupportedModelError, from_onnx  # noqa: E402
from autotune.graph.interpreter import run_graph  # noqa: E402


def make(nodes, inputs, outputs, inits=(), opset=17):  # noqa: ANN001, ANN201
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_zoo_models_import_with_static_shapes() -> None:
    g = from_onnx(zoo.make_model("zoo:resnet18?image=32,width=8"))
    assert g.inputs == ["data"] and g.types["data"].shape == (1, 3, 32, 32)
    assert g.types[g.outputs[0]].shape == (1, 1000)
    assert all(all(s > 0 for s in t.shape) for t in g.types.values())
    b = from_onnx(zoo.make_model("zoo:bert_layer?seq=8,hidden=32,heads=2,ffn=64"))
    assert b.types[b.outputs[0]].shape == (1, 8, 32)
    assert "Reshape" in b.op_counts() and not any(n.op == "Constant" for n in b.nodes)


def test_shape_computations_fold_into_a_constant_reshape() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inits = [
        ("idx", np.array(0, dtype=np.int64)),
        ("ax", np.array([0], dtype=np.int64)),
        ("minus1", np.array([-1], dtype=np.int64)),
    ]
    g = from_onnx(make(nodes, [("x", [2, 3, 4])], [("z", [2, 12])], inits))
    assert [n.op for n in g.nodes] == ["Reshape", "Relu"]
    assert g.types["z"].shape == (2, 12)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run_graph(g, {"x": x})[0], np.maximum(x.reshape(2, 12), 0))


def test_unsupported_operators_are_all_reported_at_once() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r"),
        helper.make_node("NonMaxSuppression", ["a"], ["b"], name="nms1"),
        helper.make_node("TopK", ["b"], ["c", "ci"], name="topk"),
        helper.make_node(
            "MaxPool", ["c"], ["d"], name="pool_so", kernel_shape=[3, 3], dilations=[1, 1, 1, 1]
        ),
    ]
    w = ("w", np.zeros((1, 1, 3, 3), np.float32))
    with pytest.raises(UnsupportedModelError) as info:
        from_onnx(make(nodes, [("x", [1, 1, 4, 4])], [("d", [1, 1, 4, 4])], [w]))
    msg = str(info.value)
    assert "NonMaxSuppression (node 'nms1')" in msg and "TopK (node 'topk')" in msg
    assert "pool_so" in msg and "dilations=[1, 1, 1, 1]" in msg
    assert len(info.value.problems) == 3


def test_not_onnx_missing_file_and_empty_file(tmp_path) -> None:  # noqa: ANN001
    junk = tmp_path / "junk.onnx"
    junk.write_text("this is not a model\n" * 20)
    with pytest.raises(ModelImportError, match="not an ONNX model"):
        from_onnx(junk)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelImportError, match="not an ONNX model"):
        from_onnx(empty)
    with pytest.raises(ModelImportError, match="does not exist"):
        from_onnx(tmp_path / "nope.onnx")


def test_dynamic_dims_need_input_shapes() -> None:
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", ["batch", 8])], [("y", ["batch", 8])])
    with pytest.raises(ModelImportError, match=r"input 'x' has dynamic dims \[batch,8\].*--input-shape"):
        from_onnx(model)
    g = from_onnx(model, {"x": [3, 8]})
    assert g.types["y"].shape == (3, 8)
    with pytest.raises(ModelImportError, match="does not fit"):
        from_onnx(model, {"x": [3, 9]})
    with pytest.raises(ModelImportError, match="not an input"):
        from_onnx(model, {"z": [3, 8]})


def test_a_value_nothing_defines_is_a_missing_input() -> None:
    model = make([helper.make_node("Add", ["x", "bias"], ["y"], name="add")], [("x", [4])], [("y", [4])])
    with pytest.raises(ModelImportError, match="missing input: node 'add' \\(Add\\) reads 'bias'"):
        from_onnx(model)


def test_gelu_op_and_legacy_softmax() -> None:
    gelu = make([helper.make_node("Gelu", ["x"], ["y"])], [("x", [2, 5])], [("y", [2, 5])], opset=20)
    g = from_onnx(gelu)
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    from math import erf, sqrt

    want = np.array([[0.5 * v * (1 + erf(v / sqrt(2))) for v in row] for row in x])
    np.testing.assert_allclose(run_graph(g, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    sm = make(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", [2, 3, 4])], [("y", [2, 3, 4])], opset=11
    )
    g = from_onnx(sm)
    x3 = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    flat = x3.reshape(2, 12)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    np.testing.assert_allclose(
        run_graph(g, {"x": x3})[0], (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4), rtol=1e-5
    )
