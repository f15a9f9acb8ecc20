"""Models stored in float16 or bfloat16 (a ``.half()`` / ``.bfloat16()`` export; a float16 conversion
that keeps float32 inputs and outputs) compile as their float32 twin (``autotune.graph.half``): the
module computes in float32 from the stored weights, takes 16-bit or float32 inputs and rounds the
outputs declared 16-bit to that type at the end."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from autotune.graph import compile_model, from_onnx
from autotune.graph.half import widen

F = TensorProto.FLOAT
NARROW = {"float16": (TensorProto.FLOAT16, np.float16),
          "bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16)}


def _model(keep_io_float32: bool, dtype: str = "float16") -> onnx.ModelProto:
    """Conv + bias, ReLU, a 16-bit Constant, a ConstantOfShape of a 16-bit value, a pool and a
    dense layer, all in ``dtype``; with ``keep_io_float32`` a Cast after the input and before the
    output, as float16 converters write them."""
    H, low = NARROW[dtype]
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(low), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(low), "B"),
        numpy_helper.from_array((rng.standard_normal((4, 5)) * 0.5).astype(low), "D"),
        numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "shape"),
    ]
    x, out = ("x16", "y16") if keep_io_float32 else ("x", "y")
    nodes = [
        helper.make_node("Conv", [x, "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(0.75, low))),
        helper.make_node("Mul", ["r", "k"], ["m"]),
        helper.make_node("ConstantOfShape", ["shape"], ["z"],
                         value=numpy_helper.from_array(np.array([0.5], low))),
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


@pytest.mark.parametrize("dtype,keep_io_float32",
                         [("float16", False), ("float16", True), ("bfloat16", False)])
def test_a_16bit_float_model_computes_as_its_float32_twin(dtype, keep_io_float32):
    H, low = NARROW[dtype]
    model = _model(keep_io_float32, dtype)
    before = model.SerializeToString()
    wide, widened = widen(model)
    assert widened >= 6 and model.SerializeToString() == before  # the caller's model is not touched
    assert not any(t.data_type == H for t in wide.graph.initializer)
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 7)).astype(low)
    module = compile_model(from_onnx(model), db=None, verbose=False)
    (got,) = module.run({"x": x})  # 16-bit in, the declared type out
    assert got.dtype == (np.float32 if keep_io_float32 else low)
    (twin,) = ReferenceEvaluator(wide).run(None, {"x": x.astype(np.float32)})
    if keep_io_float32:
        np.testing.assert_allclose(got, twin, rtol=1e-5, atol=1e-5 * np.abs(twin).max())
    else:  # the float32 result rounded once
        np.testing.assert_array_equal(got, module.run({"x": x}, [np.empty((2, 5), np.float32)])[0]
                                      .astype(low))
        rtol = 1e-3 if dtype == "float16" else 8e-3  # about an ulp of the type
        np.testing.assert_allclose(got.astype(np.float32), twin, rtol=rtol, atol=1e-5 * np.abs(twin).max())
    # the twin means what the 16-bit model means: within the type's rounding of its own evaluation
    feed = x if not keep_io_float32 else x.astype(np.float32)
    (half,) = ReferenceEvaluator(model).run(None, {"x": feed})
    assert half.dtype == (low if not keep_io_float32 else np.float32)
    scale = np.abs(twin).max() * (1e-2 if dtype == "float16" else 5e-2)
    np.testing.assert_allclose(got.astype(np.float32), half.astype(np.float32), rtol=0, atol=scale)
    assert np.abs(twin).max() > 0.1 and np.std(twin) > 0.01  # a check on values that vary


def test_a_float32_model_is_not_copied():
    model = _model(False)
    wide, _ = widen(model)
    assert widen(wide) == (wide, 0)
