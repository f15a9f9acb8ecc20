"""Operators ONNX defines as functions (Attention, SwiGLU, ...) are expanded into their function body
at import and compile with its operators' kernels: checked against numpy in float64 on fresh random
inputs; an operator whose body needs what the compiler lacks stays unlisted. An If on a constant
condition is replaced by its branch; AffineGrid is a kernel of its own."""

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


def branches(cond: str, then_value: float, else_value: float):  # noqa: ANN201
    """An If on ``cond`` adding one of two constants to x."""
    vi = helper.make_tensor_value_info

    def branch(v: float, name: str):  # noqa: ANN202
        c = helper.make_node("Constant", [], [name + "_c"], value_float=v)
        add = helper.make_node("Add", ["x", name + "_c"], [name + "_y"])
        return helper.make_graph([c, add], name, [], [vi(name + "_y", TensorProto.FLOAT, [2, 3])])

    return helper.make_node("If", [cond], ["y"], then_branch=branch(then_value, "then"),
                            else_branch=branch(else_value, "else"))


def test_an_if_on_a_constant_condition_takes_its_branch_and_one_at_run_time_is_refused(tmp_path) -> None:  # noqa: ANN001
    vi = helper.make_tensor_value_info
    x = np.random.default_rng(53).standard_normal((2, 3)).astype(np.float32)
    flag = helper.make_tensor("flag", TensorProto.INT64, [1], [3])
    nodes = [helper.make_node("Size", ["flag"], ["n"]), helper.make_node("Equal", ["n", "n"], ["cond"]),
             branches("cond", 2.0, -2.0)]
    xy = [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])]
    g = helper.make_graph(nodes, "if", *xy, initializer=[flag])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    np.testing.assert_array_equal(module.run({"x": x})[0], x + np.float32(2.0))
    g = helper.make_graph([branches("c", 2.0, -2.0)], "if",
                          [vi("x", TensorProto.FLOAT, [2, 3]), vi("c", TensorProto.BOOL, [])],
                          [vi("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(UnsupportedModelError, match=r"If \(node"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    assert "LinearAttention" not in supported_ops()  # its body needs Scan


@pytest.mark.parametrize("size,align", [((2, 1, 3, 4), 0), ((1, 1, 2, 3, 4), 1)], ids=["2d", "3d-aligned"])
def test_affine_grid(size: tuple, align: int, tmp_path) -> None:  # noqa: ANN001
    s = len(size) - 2
    theta = np.random.default_rng(54 + s).standard_normal((size[0], s, s + 1)).astype(np.float32)
    vi = helper.make_tensor_value_info
    sizes = helper.make_tensor("size", TensorProto.INT64, [len(size)], list(size))
    g = helper.make_graph([helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)],
                          "grid", [vi("theta", TensorProto.FLOAT, theta.shape)],
                          [vi("grid", TensorProto.FLOAT, [size[0], *size[2:], s])], initializer=[sizes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    (grid,) = module.run({"theta": theta})
    for pos in np.ndindex(*size[2:]):  # each position's normalised coordinates, x (last axis) first
        coords = [(-1 + 2 * i / (n - 1)) if align else (-1 + (2 * i + 1) / n) for i, n in zip(pos, size[2:])]
        point = np.array([*coords[::-1], 1.0])
        np.testing.assert_allclose(grid[(slice(None), *pos)], theta.astype(np.float64) @ point, rtol=1e-5,
                                   atol=1e-6)


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
