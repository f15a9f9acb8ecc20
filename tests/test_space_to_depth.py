"""SpaceToDepth in both channel orders: compiled kernels against onnx's reference evaluator on fresh
random inputs, and DepthToSpace of the same mode undoing it exactly."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from autotune.graph import GraphError, compile_model, from_onnx  # noqa: E402


def _model(mode: str) -> onnx.ModelProto:
    nodes = [
        helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode),
        helper.make_node("DepthToSpace", ["y"], ["z"], blocksize=2, mode=mode),
    ]
    graph = helper.make_graph(
        nodes,
        "s2d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4, 6))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "c2", "h2", "w2"]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_matches_the_reference_and_depth_to_space_undoes_it(mode: str, tmp_path) -> None:  # noqa: ANN001
    model = _model(mode)
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 6)).astype(np.float32)
    want_y, _ = ReferenceEvaluator(model).run(None, {"x": x})
    module = compile_model(from_onnx(model), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    y, z = module.run({"x": x})
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(z, x)


def test_an_unknown_channel_order_is_refused() -> None:
    model = _model("DCR")
    model.graph.node[0].attribute[1].s = b"RCD"
    with pytest.raises(GraphError, match="mode='RCD'"):
        from_onnx(model)
