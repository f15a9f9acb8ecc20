"""Tensor-expression layer: every registered op against its numpy reference, keys, FLOPs, errors."""

from __future__ import annotations

import numpy as np
import pytest

from autotune import te
from autotune.te.evaluate import evaluate, evaluate_workload
from autotune.te.ops import conv, nn

# Every registered op needs at least one entry here (test_every_op_has_a_small_shape enforces it).
SMALL_SHAPES: dict[str, list[list[int]]] = {
    "matmul": [[5, 7, 3]],
    "dense": [[4, 6, 5]],
    "dense_bias": [[4, 6, 5]],
    "dense_bias_relu": [[3, 5, 4]],
    "dense_bias_gelu": [[3, 5, 4]],
    "batch_matmul": [[2, 3, 4, 5]],
    # plain with pad; stride 2 + groups 2; dilation 2
    "conv2d": [
        [1, 3, 6, 5, 4, 3, 3, 1, 1],
        [2, 4, 7, 7, 6, 3, 2, 2, 0, 1, 2],
        [1, 2, 7, 6, 3, 3, 3, 1, 2, 2],
    ],
    "conv2d_nhwc": [
        [1, 6, 5, 3, 4, 3, 3, 1, 1],
        [2, 7, 7, 4, 6, 2, 3, 2, 0, 1, 2],
        [1, 7, 6, 2, 3, 3, 3, 1, 2, 2],
    ],
    "depthwise_conv2d": [[1, 3, 6, 6, 3, 3, 1, 1], [2, 2, 7, 5, 2, 3, 2, 0]],
    "max_pool2d": [[1, 2, 6, 6, 2, 2, 0], [2, 3, 7, 5, 3, 2, 1]],
    "avg_pool2d": [[1, 2, 6, 6, 2, 2, 0], [2, 3, 7, 5, 3, 2, 1], [1, 1, 5, 5, 3, 1, 2]],
    "global_avg_pool2d": [[2, 3, 4, 5]],
    "softmax": [[3, 7]],
    "layernorm": [[4, 6]],
    "relu": [[9]],
    "add": [[9]],
    "mul": [[9]],
    "gelu": [[11]],
    "bias_add_relu": [[3, 5]],
    "add_relu_mul": [[3, 5]],
}

CASES = [(op, shape) for op, shapes in sorted(SMALL_SHAPES.items()) for shape in shapes]


def test_every_op_has_a_small_shape() -> None:
    missing = sorted(set(te.op_names()) - set(SMALL_SHAPES))
    assert not missing, f"add small test shapes for: {missing}"
    stale = sorted(set(SMALL_SHAPES) - set(te.op_names()))
    assert not stale, f"SMALL_SHAPES lists unregistered ops: {stale}"


@pytest.mark.parametrize(("op", "shape"), CASES, ids=[f"{o}-{'x'.join(map(str, s))}" for o, s in CASES])
def test_op_matches_reference(op: str, shape: list[int]) -> None:
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    wl = te.make_workload(op, shape)
    arrays = wl.random_inputs(rng)
    assert all(np.any(a != 0) for a in arrays)
    got = evaluate(wl.outputs, dict(zip(wl.inputs, arrays)))
    want = wl.run_reference(arrays)
    assert len(got) == len(want) == len(wl.outputs)
    for g, w, out in zip(got, want, wl.outputs):
        assert g.shape == w.shape == out.shape, (op, g.shape, w.shape, out.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-12, err_msg=f"{op} {shape} seed={seed}")


def test_evaluate_list_inputs_and_float32() -> None:
    wl = te.make_workload("conv2d", [1, 2, 5, 5, 3, 3, 3, 1, 1])
    arrays = wl.random_inputs(np.random.default_rng(1))
    by_list = evaluate_workload(wl, arrays)[0]
    by_dict = evaluate(wl.outputs, dict(zip(wl.inputs, arrays)))[0]
    np.testing.assert_array_equal(by_list, by_dict)
    f32 = evaluate_workload(wl, arrays, dtype=np.float32)[0]
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, by_list, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        evaluate(wl.outputs, {wl.inputs[0]: arrays[0]})


def test_evaluate_index_semantics() -> None:
    x = te.placeholder((4,), "float64", name="x")
    # floor semantics for negative integer operands
    fd = te.compute((7,), lambda i: te.cast("float64", (i - 3) // 2 * 10 + (i - 3) % 2), name="fd")
    (got,) = evaluate([fd], {x: np.zeros(4)})
    i = np.arange(7) - 3
    np.testing.assert_array_equal(got, (i // 2) * 10 + i % 2)
    # the untaken branch of a select may read out of bounds
    shifted = te.compute((6,), lambda i: te.select(te.all_of(i >= 1, i < 5), x[i - 1], -1.0), name="s")
    (got,) = evaluate([shifted], [np.array([1.0, 2.0, 3.0, 4.0])])
    np.testing.assert_array_equal(got, [-1, 1, 2, 3, 4, -1])
    # a taken out-of-bounds read is an error
    bad = te.compute((5,), lambda i: x[i], name="bad")
    with pytest.raises(IndexError):
        evaluate([bad], [np.ones(4)])


def _matmul_named(m: int, n: int, k: int, a_name: str, b_name: str, out_name: str) -> list[te.Tensor]:
    a = te.placeholder((m, k), name=a_name)
    b = te.placeholder((k, n), name=b_name)
    kk = te.reduce_axis(k, "kk_" + out_name)
    out = te.compute((m, n), lambda row, col: te.sum(a[row, kk] * b[kk, col], axis=kk), name=out_name)
    return [out]


def test_structural_key() -> None:
    k1 = te.make_workload("conv2d", [1, 3, 6, 6, 4, 3, 3, 1, 1]).key
    k2 = te.make_workload("conv2d", [1, 3, 6, 6, 4, 3, 3, 1, 1]).key
    assert k1 == k2
    assert k1 != te.make_workload("conv2d", [1, 3, 6, 6, 4, 3, 3, 1, 0]).key
    assert k1 != te.make_workload("conv2d", [1, 3, 8, 6, 4, 3, 3, 1, 1]).key
    assert te.make_workload("add", [8]).key != te.make_workload("mul", [8]).key
    assert te.make_workload("add", [8]).key != te.make_workload("add", [9]).key
    mm = te.make_workload("matmul", [4, 5, 6]).key
    assert te.make_workload("dense", [4, 5, 6]).key != mm
    assert te.structural_key(_matmul_named(4, 5, 6, "P", "Q", "R")) == mm
    assert te.structural_key(_matmul_named(4, 5, 6, "A", "B", "C")) == mm
    keys = {te.make_workload(op, shapes[0]).key for op, shapes in SMALL_SHAPES.items()}
    assert len(keys) == len(SMALL_SHAPES)


def test_count_flops() -> None:
    m, n, k = 7, 5, 3
    assert te.make_workload("matmul", [m, n, k]).flops == 2 * m * n * k
    n_, c, h, w, f, kh, kw = 2, 3, 8, 7, 4, 3, 2
    for stride, pad in [(1, 0), (2, 1)]:
        wl = te.make_workload("conv2d", [n_, c, h, w, f, kh, kw, stride, pad])
        oh, ow = wl.outputs[0].shape[2:]
        assert (oh, ow) == ((h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1)
        assert wl.flops == 2 * n_ * f * oh * ow * c * kh * kw
    data = te.placeholder((1, 4, 6, 6))
    weight = te.placeholder((8, 2, 3, 3))
    out = conv.conv2d_nchw(data, weight, 1, 1, groups=2)
    assert te.count_flops([out]) == 2 * 1 * 8 * 6 * 6 * 2 * 3 * 3


@pytest.mark.parametrize(
    ("op", "shape", "needle"),
    [
        ("no_such_op", [1], "matmul"),
        ("matmul", [2, 3], "matmul"),
        ("matmul", [2, 3, 4, 5], "matmul"),
        ("matmul", [2, 0, 4], "positive"),
        ("add", [-3], "positive"),
        ("conv2d", [1, 3, 8, 8, 4, 3, 3, 0, 1], "positive"),
        ("conv2d", [1, 3, 8, 8, 4, 3, 3, 1, -1], "positive"),
        ("conv2d", [1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 0], "positive"),
        ("conv2d", [1, 3, 3, 3, 4, 5, 5, 1, 0], "output size"),
        ("conv2d", [1, 3, 8, 8, 4, 3, 3, 1, 1, 1, 2], "groups"),
        ("conv2d_nhwc", [1, 3, 3, 3, 4, 5, 5, 1, 0], "output size"),
        ("depthwise_conv2d", [1, 3, 2, 2, 4, 4, 1, 0], "output size"),
        ("max_pool2d", [1, 1, 2, 2, 3, 1, 0], "output size"),
        ("avg_pool2d", [1, 1, 4, 4, 2, 1, 2], "pad"),
        ("conv2d", "1,3,a", "malformed"),
    ],
)
def test_make_workload_errors(op: str, shape: list[int] | str, needle: str) -> None:
    with pytest.raises(te.WorkloadError, match=needle):
        te.make_workload(op, shape)


def test_unknown_op_lists_valid_ops() -> None:
    with pytest.raises(te.WorkloadError) as info:
        te.make_workload("convolution", [1])
    for op in ("matmul", "conv2d", "softmax"):
        assert op in str(info.value)


def test_shape_from_string_and_description() -> None:
    wl = te.make_workload("conv2d", "1,3,8,8,4,3,3,1,0")
    assert wl.params["pad"] == 0 and wl.params["groups"] == 1
    assert te.workload_from_description(wl.description()).key == wl.key


def test_expression_dtype_errors() -> None:
    i = te.Var("i")
    with pytest.raises(TypeError):
        _ = i / 2
    x = te.placeholder((4,), "float32", name="x")
    with pytest.raises(TypeError):
        _ = x[0] % 2.0
    with pytest.raises(TypeError):
        _ = x[0] // 2.0
    with pytest.raises(TypeError):
        _ = x[0] + te.placeholder((4,), "float64", name="y")[0]
    with pytest.raises(TypeError):
        te.exp(i)


def test_reduce_must_be_whole_body() -> None:
    a = te.placeholder((3, 4), name="a")
    k = te.reduce_axis(4)
    with pytest.raises(ValueError):
        te.compute((3,), lambda r: te.sum(a[r, k], axis=k) + 1.0)
    with pytest.raises(ValueError):
        nn.dense(a, te.placeholder((2, 5), name="b"))
