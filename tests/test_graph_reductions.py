"""Reductions at run time, checked against numpy in float64 on fresh random inputs: ReduceProd (an
unrolled product; more elements than are unrolled is rejected), RMSNormalization and the other
normalizations (Hardmax, Lp, mean-variance, LRN)."""

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


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN written out channel by channel, in float64."""
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    c = x.shape[1]
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + size // 2)
        total = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, ch] = x64[:, ch] / (bias + alpha / size * total) ** beta
    return out


@pytest.mark.parametrize("size", [5, 4])
def test_lrn_after_a_convolution_runs_in_either_layout(size: int, tmp_path) -> None:  # noqa: ANN001
    """AlexNet's Conv -> Relu -> LRN (here with an even window too, which is lopsided)."""
    rng = np.random.default_rng(50 + size)
    w = rng.standard_normal((12, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("LRN", ["r"], ["y"], size=size, alpha=2e-3, beta=0.75, bias=2.0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 9, 7))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 12, 9, 7))],
                          initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 3, 9, 7)).astype(np.float32)
    (y,) = compiled(m, tmp_path).run({"x": x})
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    padded = np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 12, 9, 7))
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,kc->nkhw", padded[:, :, i:i + 9, j:j + 7], w64[:, :, i, j])
    want = lrn_reference(np.maximum(conv, 0), size, 2e-3, 0.75, 2.0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_lrn_of_a_rank_3_input(tmp_path) -> None:  # noqa: ANN001
    x = np.random.default_rng(52).standard_normal((2, 6, 11)).astype(np.float32) * 3
    (y,) = compiled(single("LRN", x.shape, 13, size=3, alpha=0.5, beta=0.6), tmp_path).run({"x": x})
    np.testing.assert_allclose(y, lrn_reference(x, 3, 0.5, 0.6, 1.0), rtol=1e-5)


def test_lrn_without_a_size_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="size"):
        from_onnx(single("LRN", (1, 4, 2, 2), 13))


@pytest.mark.parametrize("op", ["InstanceNormalization", "GroupNormalization"])
def test_a_norm_of_one_channel_or_group_takes_its_folded_scale_and_bias(op: str, tmp_path) -> None:  # noqa: ANN001
    """PyTorch writes GroupNorm(1, C) as an InstanceNormalization of one channel: its one-value scale
    and bias reach the kernel folded to scalars (and so do a GroupNormalization's equal ones)."""
    shape = (2, 1, 3, 5) if op == "InstanceNormalization" else (2, 4, 3, 5)
    extra = {"num_groups": 1} if op == "GroupNormalization" else {}
    scale_shape = (1,) if op == "InstanceNormalization" else (4,)  # opset 21: one per channel
    node = helper.make_node(op, ["x", "s", "b"], ["y"], epsilon=1e-5, **extra)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=[numpy_helper.from_array(np.full(scale_shape, 1.5, np.float32), "s"),
                                       numpy_helper.from_array(np.full(scale_shape, -0.5, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    x = (np.random.default_rng(60).standard_normal(shape) * 2 + 1).astype(np.float32)
    (y,) = compiled(m, tmp_path).run({"x": x})
    x64 = x.astype(np.float64)
    axes = (1, 2, 3)
    want = (x64 - x64.mean(axis=axes, keepdims=True)) / np.sqrt(x64.var(axis=axes, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want * 1.5 - 0.5, rtol=1e-5, atol=1e-5)


def test_a_batch_norm_of_statistics_computed_at_run_time(tmp_path) -> None:  # noqa: ANN001
    """tf2onnx writes a Keras layer norm as a BatchNormalization whose mean and variance are
    computed in the graph (here: over the last axis of x, viewed as the channels of a [1, C] input)."""
    rows, width = 6, 10
    nodes = [helper.make_node("ReduceMean", ["x", "last"], ["m"], keepdims=0),
             helper.make_node("Unsqueeze", ["m", "last"], ["m2"]),
             helper.make_node("Sub", ["x", "m2"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["dd"]),
             helper.make_node("ReduceMean", ["dd", "last"], ["v"], keepdims=0),
             helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("BatchNormalization", ["xf", "s", "b", "m", "v"], ["yf"], epsilon=1e-3),
             helper.make_node("Reshape", ["yf", "back"], ["y"])]
    rng = np.random.default_rng(70)
    s, b = rng.uniform(0.5, 1.5, rows).astype(np.float32), rng.standard_normal(rows).astype(np.float32)
    inits = [numpy_helper.from_array(np.asarray([1], np.int64), "last"),
             numpy_helper.from_array(np.asarray([1, rows, width], np.int64), "flat"),
             numpy_helper.from_array(np.asarray([rows, width], np.int64), "back"),
             numpy_helper.from_array(s, "s"), numpy_helper.from_array(b, "b")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (rows, width))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (rows, width))],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = (rng.standard_normal((rows, width)) * 3 + 2).astype(np.float32)
    (y,) = compiled(m, tmp_path).run({"x": x})
    x64 = x.astype(np.float64)
    norm = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(y, norm * s[:, None] + b[:, None], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,keepdims,opset",
                         [("ReduceMax", 0, 18), ("ReduceMin", 1, 18), ("ReduceMax", 1, 13)])
def test_a_whole_tensor_max_or_min_reduces_by_rows_then_over_them(op: str, keepdims: int, opset: int,
                                                                   tmp_path) -> None:  # noqa: ANN001
    """The maximum / minimum of every element of a large tensor (DynamicQuantizeLinear's range) is
    computed per row of the last axis, then over the rows: exactly the whole's."""
    from autotune.graph import prepare

    shape = (2, 64, 96)
    node = helper.make_node(op, ["x"], ["y"], keepdims=keepdims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1] if keepdims else [])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    reductions = [n for n in prepare(model).graph.nodes if n.op == op]
    assert len(reductions) == 2, reductions
    module = compile_model(model, verbose=False, cache_dir=str(tmp_path), workers=1)
    rng = np.random.default_rng(opset + keepdims)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        x[tuple(rng.integers(0, s) for s in shape)] = 9.0 if op == "ReduceMax" else -9.0
        (y,) = module.run({"x": x})
        want = (np.max if op == "ReduceMax" else np.min)(x, keepdims=bool(keepdims))
        assert y.shape == want.shape and np.array_equal(y, want)
