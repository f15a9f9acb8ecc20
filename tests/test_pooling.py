"""Pools over 1 to 3 spatial dims with dilations, padding and ceil mode, and MaxPool's Indices
(both storage orders): compiled kernels (NCHW and NHWC layouts) and the numpy form against
onnxruntime on fresh random inputs (one model, one build per layout). onnxruntime, not onnx's
reference evaluator: the latter moves ceil-mode average windows by half their end extension."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

ort = pytest.importorskip("onnxruntime")

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.interpreter import run_graph  # noqa: E402

# (input, op, attributes, with Indices)
CASES = [
    (
        "X3",
        "MaxPool",
        {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "dilations": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1]},
        False,
    ),
    (
        "X3",
        "AveragePool",
        {"kernel_shape": [3, 3, 3], "strides": [2, 2, 3], "dilations": [2, 1, 2], "ceil_mode": 1},
        False,
    ),
    (
        "X3",
        "AveragePool",
        {"kernel_shape": [2, 2, 3], "pads": [1, 0, 1, 1, 1, 0], "count_include_pad": 1},
        False,
    ),
    ("X3", "MaxPool", {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}, True),
    (
        "X2",
        "AveragePool",
        {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [1, 1, 2, 1], "ceil_mode": 1},
        False,
    ),
    (
        "X2",
        "AveragePool",
        {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        False,
    ),
    ("X2", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    (
        "X2",
        "MaxPool",
        {"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [2, 1], "storage_order": 1},
        True,
    ),
    ("X2", "MaxPool", {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "storage_order": 1}, True),
    ("X1", "MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "storage_order": 1}, True),
]
SHAPES = {"X1": (2, 3, 11), "X2": (2, 3, 9, 10), "X3": (1, 2, 7, 8, 9)}


def _model() -> onnx.ModelProto:
    nodes, outputs = [], []
    for k, (x, op, attrs, with_indices) in enumerate(CASES):
        outs = [f"Y{k}"] + ([f"I{k}"] if with_indices else [])
        nodes.append(helper.make_node(op, [x], outs, name=f"pool{k}", **attrs))
        rank = len(SHAPES[x])
        outputs.append(
            helper.make_tensor_value_info(f"Y{k}", TensorProto.FLOAT, [f"y{k}_{d}" for d in range(rank)])
        )
        if with_indices:
            outputs.append(
                helper.make_tensor_value_info(f"I{k}", TensorProto.INT64, [f"i{k}_{d}" for d in range(rank)])
            )
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in SHAPES.items()]
    graph = helper.make_graph(nodes, "pools", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pools_compile_and_match_onnxruntime(layout: str, tmp_path) -> None:  # noqa: ANN001
    model = _model()
    rng = np.random.default_rng(11)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    graph = from_onnx(model)
    by_numpy = run_graph(graph, feeds)
    compiled = compile_model(graph, db=None, layout=layout, verbose=False, cache_dir=str(tmp_path), workers=1)
    got = compiled.run(feeds)
    names = [o.name for o in model.graph.output]
    for name, want, ours_np, ours in zip(names, expected, by_numpy, got):
        assert ours.shape == want.shape and ours.dtype == want.dtype, name
        if want.dtype == np.int64:
            np.testing.assert_array_equal(ours_np, want, err_msg=name)
            np.testing.assert_array_equal(ours, want, err_msg=name)
        else:
            np.testing.assert_allclose(ours_np, want, rtol=1e-5, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6, err_msg=name)
