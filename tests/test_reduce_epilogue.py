"""A ReduceMax / ReduceMin with an elementwise epilogue fused after it compiles (its reduction stage
and its output stage are named apart) and computes what numpy does."""

import numpy as np
import pytest

from autotune.graph import Graph, Node, TensorType, compile_model


@pytest.mark.parametrize("op,fn", [("ReduceMax", np.max), ("ReduceMin", np.min)])
def test_reduce_max_min_with_epilogue(op, fn):
    g = Graph(
        "reduce_epilogue", ["x"], ["y"],
        [Node(op, ["x", "axes"], ["r"], {"keepdims": 1}, "r"), Node("Relu", ["r"], ["y"], {}, "relu")],
        {"x": TensorType((2, 3, 5))}, {"axes": np.array([2], dtype=np.int64)},
    )
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    (y,) = compile_model(g, verbose=False).run([x])
    np.testing.assert_allclose(y, np.maximum(fn(x, axis=2, keepdims=True), 0), rtol=1e-6)
