"""Outputs other than one computed value per kernel, compiled and checked against numpy (float64)
on fresh random inputs:

- operators with several outputs: LayerNormalization's Mean and InvStdDev (one kernel per output),
  Dropout's mask, BatchNormalization in training mode (batch statistics, running mean / variance);
- values known without running the model, constants at import: tensors with a 0-sized dim (empty
  model inputs, empty results; a reduction over an empty axis gives its identity) and outputs that
  depend only on shapes (EyeLike, Dropout's mask), returned beside computed outputs."""

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


def model(nodes, inputs, outputs, inits=(), opset=18):  # noqa: ANN001, ANN201
    """A model of one node or a list; ``inputs`` / ``outputs`` as (name, shape[, elem type]), an
    output's shape given as its rank only where the compiler's inference is what is checked."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes if isinstance(nodes, list) else [nodes],
        "g",
        [vi(n, t[0] if t else TensorProto.FLOAT, s) for n, s, *t in inputs],
        [vi(n, t[0] if t else TensorProto.FLOAT, [f"{n}{d}" for d in range(s)] if isinstance(s, int) else s)
         for n, s, *t in outputs],
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



@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (6, 4)], ids=["4d-after-conv", "2d"])
def test_batch_norm_training_mode_uses_batch_statistics(shape: tuple, cache: str) -> None:
    rng = np.random.default_rng(len(shape))
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, c).astype(np.float32)
    inits = [("s", scale), ("b", bias), ("m", mean), ("v", var)]
    bn = helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                          momentum=0.8, epsilon=1e-3)
    nodes = [bn]
    if len(shape) == 4:  # a convolution before it must not take it in as an inference BN would be
        w = rng.standard_normal((c, c, 1, 1)).astype(np.float32)
        inits.append(("w", w))
        nodes.insert(0, helper.make_node("Conv", ["x", "w"], ["h"]))
        h = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    else:
        nodes.insert(0, helper.make_node("Identity", ["x"], ["h"]))
        h = x.astype(np.float64)
    m = model(nodes, [("x", shape)], [("y", shape), ("rm", (c,)), ("rv", (c,))], inits)
    _, (y, rm, rv) = run(m, {"x": x}, cache)
    axes = (0, *range(2, len(shape)))
    bshape = (1, c) + (1,) * (len(shape) - 2)
    mu, va = h.mean(axis=axes), h.var(axis=axes)
    want = (h - mu.reshape(bshape)) / np.sqrt(va.reshape(bshape) + 1e-3) * scale.reshape(bshape)
    np.testing.assert_allclose(y, want + bias.reshape(bshape), rtol=RTOL, atol=1e-4)
    np.testing.assert_allclose(rm, mean * 0.8 + mu * 0.2, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(rv, var * 0.8 + va * 0.2, rtol=RTOL, atol=ATOL)

@pytest.mark.parametrize("training", [False, True], ids=["inference", "training-ratio-0"])
def test_dropout_mask_is_a_constant_and_the_output_the_input(training: bool, cache: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    inits = [("r", np.float32(0.0 if training else 0.4)), ("t", np.bool_(training))]
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    m = model(node, [("x", (3, 5))], [("y", (3, 5)), ("mask", (3, 5), TensorProto.BOOL)], inits)
    module, (y, mask) = run(m, {"x": x}, cache)
    assert module.prepared.calls == []  # a view and a constant: no kernel
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.shape == (3, 5) and mask.all()


def test_dropout_that_drops_stays_rejected() -> None:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    inits = [("r", np.float32(0.1)), ("t", np.bool_(True))]
    m = model(node, [("x", (3, 5))], [("y", (3, 5)), ("mask", (3, 5), TensorProto.BOOL)], inits)
    with pytest.raises(UnsupportedModelError, match="random dropping"):
        from_onnx(m)


def test_reductions_of_an_empty_input_give_their_identity(cache: str) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    axes = ("axes", np.array([1], np.int64))
    nodes = [
        helper.make_node("ReduceMax", ["e", "axes"], ["mx"], keepdims=0),
        helper.make_node("ReduceSum", ["e", "axes"], ["sm"], keepdims=1),
        helper.make_node("ReduceProd", ["e", "axes"], ["pr"], keepdims=0),
        helper.make_node("ReduceLogSumExp", ["e", "axes"], ["lse"], keepdims=0),
        helper.make_node("Add", ["x", "mx"], ["y"]),  # a kernel reading the folded identity
    ]
    m = model(nodes, [("x", (2, 3)), ("e", (2, 0, 3))],
              [("y", 2), ("sm", 3), ("pr", 2), ("lse", 2)], [axes])
    module, (y, sm, pr, lse) = run(m, {"x": x, "e": np.zeros((2, 0, 3), np.float32)}, cache)
    assert len(module.prepared.calls) == 1
    np.testing.assert_array_equal(y, x + -np.inf)
    np.testing.assert_array_equal(sm, np.zeros((2, 1, 3), np.float32))
    np.testing.assert_array_equal(pr, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(lse, np.full((2, 3), -np.inf, np.float32))


SLICE_PAST_THE_END = [("st", np.array([9], np.int64)), ("en", np.array([12], np.int64)),
                      ("ax", np.array([1], np.int64))]


def test_empty_results_of_run_time_values_are_constants(cache: str) -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    inits = [*SLICE_PAST_THE_END, ("parts", np.array([2, 0, 4], np.int64))]
    nodes = [
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
        helper.make_node("Split", ["x", "parts"], ["a", "b", "c"], axis=1),
        helper.make_node("Relu", ["c"], ["r"]),
    ]
    m = model(nodes, [("x", (4, 6))], [("s", 2), ("a", 2), ("b", 2), ("r", 2)], inits)
    _, (s, a, b, r) = run(m, {"x": x}, cache)
    assert s.shape == (4, 0) and b.shape == (4, 0) and s.dtype == b.dtype == np.float32
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(r, np.maximum(x[:, 2:], 0))


def test_an_empty_operand_of_a_kernel_is_rejected_by_name_and_dropped_from_a_concat(cache: str) -> None:
    x = np.random.default_rng(14).standard_normal((4, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
        helper.make_node("Einsum", ["x", "s"], ["p"], equation="ij,ik->j"),  # sums over nothing
    ]
    m = model(nodes, [("x", (4, 6))], [("p", 1)], SLICE_PAST_THE_END)
    with pytest.raises(UnsupportedModelError, match=r"Einsum node .*operand 's' is empty \(a 0-sized dim\)"):
        from_onnx(m)
    nodes = [nodes[0], helper.make_node("Concat", ["past", "x", "s"], ["y"], axis=1)]
    m = model(nodes, [("x", (4, 6)), ("past", (4, 0))], [("y", 2)], SLICE_PAST_THE_END)
    _, (y,) = run(m, {"x": x, "past": np.zeros((4, 0), np.float32)}, cache)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("k", [0, 2, -1])
def test_eye_like_of_a_run_time_value_is_a_constant(k: int, cache: str) -> None:
    rng = np.random.default_rng(13 + k)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    nodes = [helper.make_node("EyeLike", ["x"], ["eye"], k=k, dtype=TensorProto.INT64),
             helper.make_node("Neg", ["x"], ["n"])]
    m = model(nodes, [("x", (3, 5))], [("eye", 2, TensorProto.INT64), ("n", 2)])
    module, (eye, n) = run(m, {"x": x}, cache)
    assert len(module.prepared.calls) == 1
    np.testing.assert_array_equal(eye, np.eye(3, 5, k=k, dtype=np.int64))
    np.testing.assert_array_equal(n, -x)


def test_scalar_results_at_run_time(cache: str) -> None:
    rng = np.random.default_rng(15)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    v = rng.standard_normal(6).astype(np.float32)
    i = np.int64(rng.integers(-6, 6))
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Div", ["s", "m"], ["r"]),
        helper.make_node("Gather", ["v", "i"], ["g"]),
        helper.make_node("ArgMax", ["v"], ["a"], keepdims=0),
    ]
    m = model(nodes, [("x", (3, 4)), ("v", (6,)), ("i", (), TensorProto.INT64)],
              [("r", ()), ("g", ()), ("a", (), TensorProto.INT64)])
    _, (r, g, a) = run(m, {"x": x, "v": v, "i": i}, cache)
    assert r.shape == g.shape == a.shape == ()
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(r, x64.sum() / x64.max(), rtol=1e-5)
    assert g == v[i] and a == v.argmax()
