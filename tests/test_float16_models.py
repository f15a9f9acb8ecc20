"""Models stored in float16 (a ``.half()`` export; a float16 conversion that keeps float32 inputs and
outputs) compile as their float32 twin (``autotune.graph.half``): the module computes in float32 from
the stored weights, takes float16 or float32 inputs and rounds the outputs declared float16 to
float16 at the end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from autotune.graph import compile_model, from_onnx
from autotune.graph.half import widen_float16

H, F = TensorProto.FLOAT16, TensorProto.FLOAT


def _model(keep_io_float32: bool) -> onnx.ModelProto:
    """Conv + bias, ReLU, a float16 Constant, a ConstantOfShape of a float16 value, a pool and a
    dense layer, all in float16; with ``keep_io_float32`` a Cast after the input and before the
    output, as float16 converters write them."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float16), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float16), "B"),
        numpy_helper.from_array((rng.standard_normal((4, 5)) * 0.5).astype(np.float16), "D"),
        numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "shape"),
    ]
    x, out = ("x16", "y16") if keep_io_float32 else ("x", "y")
    nodes = [
        helper.make_node("Conv", [x, "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(0.75, np.float16))),
        helper.make_node("Mul", ["r", "k"], ["m"]),
        helper.make_node("ConstantOfShape", ["shape"], ["z"],
                         value=numpy_helper.from_array(np.array([0.5], np.float16))),
        helper.make_node("Add", ["m", "z"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "D"], [out]),
    ]
    io = F if keep_io_float32 else H
    if keep_io_float32:
        nodes = [helper.make_node("Cast", ["x"], ["x16"], to=H), *nodes,
                 helper.make_node("Cast", ["y16"], ["y"], to=F)]
    graph = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", io, [2, 3, 6, 7])],
                              [helper.make_tensor_value_info("y", io, [2, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("keep_io_float32", [False, True])
def test_a_float16_model_computes_as_its_float32_twin(keep_io_float32):
    model = _model(keep_io_float32)
    before = model.SerializeToString()
    wide, widened = widen_float16(model)
    assert widened >= 6 and model.SerializeToString() == before  # the caller's model is not touched
    assert not any(t.data_type == H for t in wide.graph.initializer)
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 7)).astype(np.float16)
    module = compile_model(from_onnx(model), db=None, verbose=False)
    (got,) = module.run({"x": x})  # float16 in, the declared type out
    assert got.dtype == (np.float32 if keep_io_float32 else np.float16)
    (twin,) = ReferenceEvaluator(wide).run(None, {"x": x.astype(np.float32)})
    if keep_io_float32:
        np.testing.assert_allclose(got, twin, rtol=1e-5, atol=1e-5 * np.abs(twin).max())
    else:  # the float32 result rounded once
        np.testing.assert_array_equal(got, module.run({"x": x}, [np.empty((2, 5), np.float32)])[0]
                                      .astype(np.float16))
        np.testing.assert_allclose(got, twin, rtol=1e-3, atol=1e-5 * np.abs(twin).max())
    # the twin means what the float16 model means: within float16's rounding of its own evaluation
    feed = x if not keep_io_float32 else x.astype(np.float32)
    (half,) = ReferenceEvaluator(model).run(None, {"x": feed})
    assert half.dtype == (np.float16 if not keep_io_float32 else np.float32)
    np.testing.assert_allclose(got, half.astype(np.float32), rtol=0, atol=1e-2 * np.abs(twin).max())
    assert np.abs(got).max() > 0.1 and np.std(got) > 0.01  # a check on values that vary


def test_a_float32_model_is_not_copied():
    model = _model(False)
    wide, _ = widen_float16(model)
    assert widen_float16(wide) == (wide, 0)
