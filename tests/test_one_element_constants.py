"""One-element constants: an operand the kernel reads as a tensor (a convolution's bias of one output
channel, a Concat input, GatherND's index...) reaches it as an input; one an elementwise operator
broadcasts is folded to a literal. Each model is compiled and checked against onnx's reference
evaluator on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from autotune.graph import compile_model, prepare  # noqa: E402

F, I64 = np.float32, np.int64
node = helper.make_node
RNG = np.random.default_rng(71)


def _model(nodes: list, x_shape: tuple, inits: dict) -> onnx.ModelProto:
    """x -> nodes -> y, the output's shape from onnx's inference."""
    def build(y_shape: list | None) -> onnx.ModelProto:
        vi = helper.make_tensor_value_info
        g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, list(x_shape))],
                              [vi("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    inferred = onnx.shape_inference.infer_shapes(build(None)).graph.output[0].type.tensor_type.shape
    return build([d.dim_value for d in inferred.dim])


CASES = {
    "conv to one channel, its bias": ([node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                                      (1, 4, 8, 8), {"w": RNG.standard_normal((1, 4, 3, 3)).astype(F),
                                                     "b": np.array([0.5], F)}),
    "conv of one weight": ([node("Conv", ["x", "w"], ["y"])], (1, 1, 6, 6),
                           {"w": np.array([[[[1.5]]]], F)}),
    "transposed conv to one channel": ([node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2])],
                                       (1, 3, 5, 5), {"w": RNG.standard_normal((3, 1, 2, 2)).astype(F),
                                                      "b": np.array([-0.25], F)}),
    "matmul by a 1x1 matrix": ([node("MatMul", ["x", "w"], ["y"])], (3, 1), {"w": np.array([[2.5]], F)}),
    "matmul by a 1-vector": ([node("MatMul", ["x", "w"], ["y"])], (3, 1), {"w": np.array([2.0], F)}),
    "concat of one value": ([node("Concat", ["x", "c"], ["y"], axis=1)], (1, 4),
                            {"c": np.array([[3.0]], F)}),
    "gather_nd of one index": ([node("GatherND", ["x", "i"], ["y"])], (1, 6, 5),
                               {"i": np.array([[0]], I64)}),
    "gather_elements of one index": ([node("GatherElements", ["x", "i"], ["y"], axis=1)], (1, 5),
                                     {"i": np.array([[-2]], I64)}),
    "scatter_nd of one update": ([node("ScatterND", ["x", "i", "u"], ["y"])], (5,),
                                 {"i": np.array([[2]], I64), "u": np.array([9.0], F)}),
    "scatter_elements of one update": ([node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)],
                                       (2, 5), {"i": np.array([[3]], I64), "u": np.array([[9.0]], F)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_operand_read_as_a_tensor_may_be_one_constant_element(case: str, tmp_path) -> None:  # noqa: ANN001
    nodes, x_shape, inits = CASES[case]
    m = _model(nodes, x_shape, inits)
    x = RNG.standard_normal(x_shape).astype(F)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    (got,) = compile_model(m, db=None, verbose=False, cache_dir=str(tmp_path)).run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_elementwise_operand_of_one_element_is_still_a_literal() -> None:
    m = _model([node("Mul", ["x", "c"], ["t"]), node("Add", ["t", "d"], ["y"])], (2, 3),
               {"c": np.array([1.5], F), "d": np.array([[0.5]], F)})
    (task,) = prepare(m).tasks
    assert len(task.workload.inputs) == 1  # x alone: both constants are literals in the kernel
