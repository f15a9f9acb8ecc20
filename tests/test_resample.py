"""Resize in every mode the definition accepts: compiled kernels and the numpy form against onnx's
reference evaluator on fresh random inputs (one model, one build)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from autotune.graph import GraphError, compile_model, from_onnx  # noqa: E402
from autotune.graph.interpreter import run_graph  # noqa: E402

SHAPE = (2, 3, 5, 7)
F32, I64 = np.float32, np.int64

# (attributes, roi, scales, sizes)
CASES = [
    ({"mode": "cubic"}, None, [1, 1, 0.6, 1.7], None),
    (
        {
            "mode": "cubic",
            "coordinate_transformation_mode": "align_corners",
            "cubic_coeff_a": -0.5,
            "exclude_outside": 1,
        },
        None,
        None,
        [2, 3, 8, 4],
    ),
    ({"mode": "cubic", "antialias": 1}, None, [1, 1, 0.45, 0.7], None),
    ({"mode": "linear", "antialias": 1, "exclude_outside": 1}, None, None, [2, 3, 3, 4]),
    (
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
        None,
        [1, 1, 0.6, 2.3],
        None,
    ),
    (
        {
            "mode": "linear",
            "coordinate_transformation_mode": "tf_crop_and_resize",
            "axes": [2, 3],
            "extrapolation_value": -3.0,
        },
        [0.1, -0.2, 1.3, 0.9],
        None,
        [4, 6],
    ),
    (
        {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize"},
        [0, 0.2, 0.25, 0.1, 1, 0.9, 0.75, 1.0],
        None,
        [2, 4, 3, 5],
    ),
    ({"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller"}, None, None, [9, 4]),
    ({"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, None, None, [9, 4]),
    ({"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, None, [2, 3, 1, 5]),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, None, [1, 1.5, 0.5, 2], None),
    (
        {
            "mode": "cubic",
            "coordinate_transformation_mode": "asymmetric",
            "antialias": 1,
            "exclude_outside": 1,
            "axes": [3],
        },
        None,
        [0.3],
        None,
    ),
    (
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "tf_crop_and_resize",
            "nearest_mode": "round_prefer_ceil",
            "axes": [3],
        },
        [0.35, 1.4],
        None,
        [5],
    ),
]


def _model(cases: list) -> onnx.ModelProto:
    nodes, inits, outputs = [], [], []
    for k, (attrs, roi, scales, sizes) in enumerate(cases):
        ins = ["X"]
        for name, vals, dt in (("roi", roi, F32), ("scales", scales, F32), ("sizes", sizes, I64)):
            if vals is None:
                ins.append("")
            else:
                inits.append(numpy_helper.from_array(np.asarray(vals, dtype=dt), f"{name}{k}"))
                ins.append(f"{name}{k}")
        while ins[-1] == "":
            ins.pop()
        nodes.append(helper.make_node("Resize", ins, [f"Y{k}"], name=f"resize{k}", **attrs))
        outputs.append(
            helper.make_tensor_value_info(f"Y{k}", TensorProto.FLOAT, [f"y{k}_{d}" for d in range(4)])
        )
    graph = helper.make_graph(
        nodes, "resize", [helper.make_tensor_value_info("X", TensorProto.FLOAT, SHAPE)], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_resize_modes_compile_and_match_the_onnx_reference(tmp_path) -> None:  # noqa: ANN001
    model = _model(CASES)
    x = np.random.default_rng(7).standard_normal(SHAPE).astype(F32)
    expected = ReferenceEvaluator(model).run(None, {"X": x})
    graph = from_onnx(model)
    numpy_form = run_graph(graph, {"X": x})
    compiled = compile_model(graph, db=None, verbose=False, cache_dir=str(tmp_path), workers=1).run({"X": x})
    for k, (want, by_numpy, got) in enumerate(zip(expected, numpy_form, compiled)):
        assert got.shape == want.shape, (k, CASES[k][0])
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(by_numpy, want, rtol=1e-4, atol=1e-5 * scale, err_msg=str(CASES[k][0]))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=str(CASES[k][0]))


def test_crop_and_resize_with_scales_is_refused() -> None:
    model = _model(
        [
            (
                {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
                [0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9],
                [1, 1, 2, 2],
                None,
            )
        ]
    )
    with pytest.raises(GraphError, match="tf_crop_and_resize with scales"):
        from_onnx(model)


# ConvTranspose: (input shape, weight shape, attributes, with bias)
CONV_T = [
    (
        (1, 4, 3, 4, 5),
        (4, 3, 2, 3, 2),
        {
            "group": 2,
            "strides": [2, 1, 3],
            "dilations": [1, 2, 1],
            "pads": [1, 0, 1, 0, 1, 0],
            "output_padding": [1, 0, 2],
        },
        True,
    ),
    ((2, 3, 3, 2, 4), (3, 2, 3, 3, 3), {"strides": [2, 2, 1], "auto_pad": "SAME_UPPER"}, False),
    ((1, 2, 5, 6), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [10, 12]}, True),
]


def test_conv_transpose_1_to_3_spatial_dims_compile_and_match_onnxruntime(tmp_path) -> None:  # noqa: ANN001
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(9)
    nodes, inputs, inits, outputs, feeds = [], [], [], [], {}
    for k, (xs, ws, attrs, bias) in enumerate(CONV_T):
        ins = [f"x{k}", f"w{k}"] + ([f"b{k}"] if bias else [])
        feeds[f"x{k}"] = rng.standard_normal(xs).astype(F32)
        inputs.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, xs))
        inits.append(numpy_helper.from_array(rng.standard_normal(ws).astype(F32), f"w{k}"))
        if bias:
            inits.append(
                numpy_helper.from_array(
                    rng.standard_normal(ws[1] * attrs.get("group", 1)).astype(F32), f"b{k}"
                )
            )
        nodes.append(helper.make_node("ConvTranspose", ins, [f"y{k}"], **attrs))
        outputs.append(
            helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [f"y{k}_{d}" for d in range(len(xs))])
        )
    model = helper.make_model(
        helper.make_graph(nodes, "convt", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 19)]
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    graph = from_onnx(model)
    by_numpy = run_graph(graph, feeds)
    got = compile_model(graph, db=None, verbose=False, cache_dir=str(tmp_path), workers=1).run(feeds)
    for k, (want, ours_np, ours) in enumerate(zip(expected, by_numpy, got)):
        assert ours.shape == want.shape, k
        np.testing.assert_allclose(ours_np, want, rtol=1e-4, atol=1e-4, err_msg=str(CONV_T[k][2]))
        np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4, err_msg=str(CONV_T[k][2]))


def older_resample_model(op: str, opset: int, mode: str, scales: list[float], as_attribute: bool = False):  # noqa: ANN201
    """Upsample (opsets 7-9) or a Resize of opset 10: x, then its scales (an input or Upsample-7's
    attribute)."""
    inputs = ["x"] if as_attribute else ["x", "scales"]
    extra = {"scales": scales} if as_attribute else {}
    inits = [] if as_attribute else [numpy_helper.from_array(np.asarray(scales, F32), "scales")]
    node = helper.make_node(op, inputs, ["y"], mode=mode, **extra)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize("op,opset,mode,scales,as_attribute", [
    ("Resize", 10, "nearest", [1, 1, 2, 3], False), ("Resize", 10, "linear", [1, 1, 0.5, 1.5], False),
    ("Upsample", 9, "nearest", [1, 1, 2, 3], False), ("Upsample", 9, "linear", [1, 1, 2.5, 2], False),
    ("Upsample", 7, "nearest", [1.0, 1.0, 2.0, 2.0], True)], ids=["resize10", "resize10-linear", "upsample9",
                                                               "upsample9-linear", "upsample7"])
def test_older_resampling_forms_compute_the_asymmetric_resize(op: str, opset: int, mode: str, scales: list,
                                                              as_attribute: bool, tmp_path) -> None:  # noqa: ANN001
    """They map output position o to source o / scale; nearest takes its floor, linear interpolates."""
    x = np.random.default_rng(opset).standard_normal(SHAPE).astype(F32)
    m = older_resample_model(op, opset, mode, scales, as_attribute)
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    (y,) = module.run({"x": x})
    want = x.astype(np.float64)
    for d, s in enumerate(scales):
        src = np.arange(int(np.floor(SHAPE[d] * s))) / s
        lo = np.minimum(np.floor(src).astype(int), SHAPE[d] - 1)
        if mode == "nearest":
            want = np.take(want, lo, axis=d)
            continue
        hi = np.minimum(lo + 1, SHAPE[d] - 1)
        frac = np.minimum(src - lo, 1.0).reshape([-1 if k == d else 1 for k in range(4)])
        want = np.take(want, lo, axis=d) * (1 - frac) + np.take(want, hi, axis=d) * frac
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_nearest_downsampling_before_opset_11_is_refused() -> None:
    """onnxruntime rounds its source positions up, ONNX's converter down: no answer is right."""
    with pytest.raises(GraphError, match="nearest downsampling before opset 11"):
        from_onnx(older_resample_model("Resize", 10, "nearest", [1, 1, 0.5, 1]))
