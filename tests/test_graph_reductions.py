"""Reductions at run time, checked against numpy in float64 on fresh random inputs: ReduceProd (an
unrolled product; more elements than are unrolled is rejected) and RMSNormalization."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.frontend import UnsupportedModelError  # noqa: E402
from autotune.graph.ops.reduce import MAX_PRODUCT_TERMS  # noqa: E402


def one_node(node, shape: tuple, rank: int, second: np.ndarray, opset: int = 18):  # noqa: ANN001, ANN201
    """A model of ``node`` on input x of ``shape``, its second operand the initializer ``second``."""
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d"] * rank)],
                          initializer=[numpy_helper.from_array(second, node.input[1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def prod_model(shape: tuple, axes: list[int], keepdims: int):  # noqa: ANN201
    node = helper.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=keepdims)
    rank = len(shape) if keepdims else len(shape) - len(axes)
    return one_node(node, shape, rank, np.asarray(axes, np.int64))


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 0)])
def test_reduce_prod_at_run_time(axes: list[int], keepdims: int, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(len(axes) * 10 + keepdims)
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32) * rng.choice([-1, 1], (3, 4, 5))
    module = compile_model(from_onnx(prod_model(x.shape, axes, keepdims)), db=None, verbose=False,
                           cache_dir=str(tmp_path), workers=1)
    (y,) = module.run({"x": x})
    want = np.prod(x.astype(np.float64), axis=tuple(axes), keepdims=bool(keepdims))
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_a_long_product_is_rejected() -> None:
    with pytest.raises(UnsupportedModelError, match=f"product of {MAX_PRODUCT_TERMS + 1} elements"):
        from_onnx(prod_model((2, MAX_PRODUCT_TERMS + 1), [1], 1))


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_rms_normalization(axis: int, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(20 + axis)
    x = (rng.standard_normal((2, 3, 8)) * 2).astype(np.float32)
    scale = rng.standard_normal((2, 3, 8)[axis % 3 :]).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-3)
    module = compile_model(from_onnx(one_node(node, x.shape, 3, scale, opset=23)), db=None, verbose=False,
                           cache_dir=str(tmp_path), workers=1)
    (y,) = module.run({"x": x})
    x64 = x.astype(np.float64)
    ms = (x64 * x64).mean(axis=tuple(range(axis % 3, 3)), keepdims=True)
    np.testing.assert_allclose(y, x64 / np.sqrt(ms + 1e-3) * scale, rtol=1e-5, atol=1e-6)


def compiled(m, tmp_path):  # noqa: ANN001, ANN201
    return compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)


def single(op: str, shape: tuple, opset: int = 22, **attrs):  # noqa: ANN003, ANN201
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("axis,opset", [(1, 13), (-1, 13), (1, 11)], ids=["axis1", "last", "legacy"])
def test_hardmax_marks_the_first_maximum(axis: int, opset: int, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(30 + axis + opset)
    x = rng.integers(0, 3, (2, 3, 4)).astype(np.float32)  # many ties: the first maximum counts
    (y,) = compiled(single("Hardmax", x.shape, opset, axis=axis), tmp_path).run({"x": x})
    a = axis % 3
    rows = x.reshape(*x.shape[:a], -1) if opset < 13 else np.moveaxis(x, a, -1)
    want = np.zeros_like(rows)
    np.put_along_axis(want, rows.argmax(axis=-1)[..., None], 1, axis=-1)
    want = want.reshape(x.shape) if opset < 13 else np.moveaxis(want, -1, a)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_with_a_zero_row(p: int, tmp_path) -> None:  # noqa: ANN001
    x = np.random.default_rng(p).standard_normal((3, 5)).astype(np.float32)
    x[1] = 0.0
    (y,) = compiled(single("LpNormalization", x.shape, axis=1, p=p), tmp_path).run({"x": x})
    norm = np.linalg.norm(x.astype(np.float64), ord=p, axis=1, keepdims=True)
    np.testing.assert_allclose(y, np.divide(x, norm, out=np.zeros(x.shape), where=norm > 0), rtol=1e-5)


def test_mean_variance_normalization(tmp_path) -> None:  # noqa: ANN001
    x = (np.random.default_rng(40).standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    (y,) = compiled(single("MeanVarianceNormalization", x.shape, 13, axes=[0, 2, 3]), tmp_path).run({"x": x})
    x64 = x.astype(np.float64)
    mu, sd = x64.mean(axis=(0, 2, 3), keepdims=True), x64.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, (x64 - mu) / sd, rtol=1e-4, atol=1e-5)
