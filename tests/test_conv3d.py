"""3-d convolutions (video and volume models: NCDHW), computed as one 2-d convolution over
depth-stacked channels (passes.lower_conv3d), checked against a float64 reference written tap by
tap on fresh random inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.ops import op_def  # noqa: E402


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides: tuple, dil: tuple, pads: tuple,
              groups: int) -> np.ndarray:
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[a], pads[a + 3]) for a in range(3)])
    f, cg = w.shape[:2]
    out = [(xp.shape[2 + a] - (w.shape[2 + a] - 1) * dil[a] - 1) // strides[a] + 1 for a in range(3)]
    y = np.zeros((x.shape[0], f, *out)) + b[:, None, None, None]
    fg = f // groups
    taps = itertools.product(*[range(s) for s in w.shape[2:]])
    for grp, (i, j, k) in itertools.product(range(groups), list(taps)):
        patch = xp[:, grp * cg:(grp + 1) * cg,
                   i * dil[0]:i * dil[0] + (out[0] - 1) * strides[0] + 1:strides[0],
                   j * dil[1]:j * dil[1] + (out[1] - 1) * strides[1] + 1:strides[1],
                   k * dil[2]:k * dil[2] + (out[2] - 1) * strides[2] + 1:strides[2]]
        wk = w[grp * fg:(grp + 1) * fg, :, i, j, k]
        y[:, grp * fg:(grp + 1) * fg] += np.einsum("ncdhw,fc->nfdhw", patch, wk)
    return y


def compiled(m, tmp_path):  # noqa: ANN001, ANN201
    return compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)


CASES = {  # x shape, weight shape, strides, dilations, pads (begin d h w, end d h w), group
    "r3d_stem": ((1, 3, 5, 12, 10), (6, 3, 3, 7, 7), (1, 2, 2), (1, 1, 1), (1, 3, 3, 1, 3, 3), 1),
    "temporal_stride_lopsided_pad": ((2, 4, 7, 6, 5), (8, 4, 3, 1, 1), (2, 1, 1), (1, 1, 1),
                                     (2, 0, 0, 0, 0, 0), 1),
    "dilated_grouped": ((1, 6, 6, 7, 7), (9, 2, 2, 3, 3), (1, 1, 2), (2, 1, 1), (1, 1, 1, 0, 1, 1), 3),
    "depthwise": ((1, 5, 4, 6, 6), (5, 1, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1, 1, 1, 1), 5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv3d_matches_the_tap_by_tap_sum(case: str, tmp_path) -> None:  # noqa: ANN001
    xs, ws, strides, dil, pads, groups = CASES[case]
    rng = np.random.default_rng(len(case))
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    want = reference(x, w, b, strides, dil, pads, groups)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(strides), dilations=list(dil),
                            pads=list(pads), group=groups)
    relu = helper.make_node("Relu", ["c"], ["y"])
    g = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, want.shape)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (y,) = compiled(m, tmp_path).run({"x": x})
    np.testing.assert_allclose(y, np.maximum(want, 0), rtol=1e-4, atol=1e-4)
    # the numpy form (constant folding, the interpreter) agrees too
    onnx_node = from_onnx(m).nodes[0]
    (mine,) = op_def("Conv").numpy(onnx_node, [x, w, b])
    np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-4)


def test_conv3d_with_a_weight_computed_at_run_time(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                        helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 4, 5, 5))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (y,) = compiled(m, tmp_path).run({"x": x, "w": w})
    # SAME_UPPER: total padding k - 1 per axis, the odd one at the end
    np.testing.assert_allclose(y, reference(x, w, np.zeros(3), (1, 1, 1), (1, 1, 1), (0, 1, 1, 1, 1, 1), 1),
                               rtol=1e-4, atol=1e-4)
