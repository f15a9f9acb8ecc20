"""Operators ONNX defines as functions (Attention, SwiGLU, ...) are expanded into their function body
at import and compile with its operators' kernels: checked against numpy in float64 on fresh random
inputs; an operator whose body needs what the compiler lacks stays unlisted."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.frontend import UnsupportedModelError  # noqa: E402
from autotune.graph.ops import supported_ops  # noqa: E402


def run(node, inputs: dict[str, np.ndarray], out_shape: tuple, tmp_path, opset: int = 23):  # noqa: ANN001, ANN201
    vi = helper.make_tensor_value_info
    g = helper.make_graph([node], "f", [vi(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
                          [vi(node.output[0], TensorProto.FLOAT, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    return module.run(inputs)[0]


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_with_grouped_kv_heads(causal: int, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(50 + causal)
    b, hq, hkv, s, d = 2, 4, 2, 5, 8
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for h in (hq, hkv, hkv))
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=causal, scale=0.3)
    y = run(node, {"Q": q, "K": k, "V": v}, (b, hq, s, d), tmp_path)
    rep = hq // hkv  # each key / value head serves this many query heads
    k64, v64 = (np.repeat(t.astype(np.float64), rep, axis=1) for t in (k, v))
    logits = q.astype(np.float64) @ k64.transpose(0, 1, 3, 2) * 0.3
    if causal:
        logits = np.where(np.tril(np.ones((s, s), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, p / p.sum(axis=-1, keepdims=True) @ v64, rtol=1e-5, atol=1e-6)


def test_swiglu(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(51)
    a, b = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5)
    y = run(node, {"a": a, "b": b}, (3, 4), tmp_path, opset=28)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(y, a64 / (1 + np.exp(-1.5 * a64)) * b, rtol=1e-5, atol=1e-6)


def test_a_function_whose_body_is_not_compiled_stays_unlisted() -> None:
    assert "Attention" in supported_ops() and "AffineGrid" not in supported_ops()  # its body needs If
    vi = helper.make_tensor_value_info
    size = helper.make_tensor("size", TensorProto.INT64, [4], [1, 1, 2, 3])
    ins, outs = [vi("theta", TensorProto.FLOAT, [1, 2, 3])], [vi("grid", TensorProto.FLOAT, [1, 2, 3, 2])]
    g = helper.make_graph([helper.make_node("AffineGrid", ["theta", "size"], ["grid"])], "f", ins, outs,
                          initializer=[size])
    with pytest.raises(UnsupportedModelError, match=r"AffineGrid \(node"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]))


def test_pad_with_a_value_computed_at_run_time(tmp_path) -> None:  # noqa: ANN001
    """What Attention's body writes for its masks: Pad filling with a value it computed."""
    rng = np.random.default_rng(52)
    x, v = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 1, 2])
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Pad", ["x", "pads", "v"], ["y"])], "pad",
                          [vi("x", TensorProto.FLOAT, [2, 3]), vi("v", TensorProto.FLOAT, [1])],
                          [vi("y", TensorProto.FLOAT, [3, 6])], initializer=[pads])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    (y,) = module.run({"x": x, "v": v})
    np.testing.assert_array_equal(y, np.pad(x, ((0, 1), (1, 2)), constant_values=v[0]))
