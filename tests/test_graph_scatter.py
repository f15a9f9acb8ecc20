"""ScatterND / ScatterElements computed at run time (constant indices, as models hold them): the
compiled kernel against a plain sequential numpy scatter on fresh random data and updates, with
duplicate and negative indices and every reduction; what cannot be compiled is rejected by name."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402
from autotune.graph.frontend import UnsupportedModelError  # noqa: E402
from autotune.graph.ops.scatter import MAX_UPDATES_PER_ELEMENT  # noqa: E402

COMBINE = {"none": lambda a, u: u, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("modules"))


def scatter_model(op: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, **attrs):  # noqa: ANN003, ANN201
    f = TensorProto.FLOAT
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, f, a.shape) for n, a in (("data", data), ("updates", updates))]
    g = helper.make_graph([node], "scatter", ins, [helper.make_tensor_value_info("y", f, data.shape)],
                          initializer=[numpy_helper.from_array(indices, "indices")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def reference(op: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str,
              axis: int = 0) -> np.ndarray:
    """The operators' definitions, one update at a time in index order (float64)."""
    out = data.astype(np.float64)
    fn = COMBINE[reduction]
    for pos in np.ndindex(*(indices.shape[:-1] if op == "ScatterND" else indices.shape)):
        if op == "ScatterND":
            at = tuple(int(v) % data.shape[d] for d, v in enumerate(indices[pos]))
        else:
            at = list(pos)
            at[axis] = int(indices[pos]) % data.shape[axis]
            at = tuple(at)
        out[at] = fn(out[at], updates[pos])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_with_duplicates_and_negative_indices(reduction: str, cache: str) -> None:
    rng = np.random.default_rng(hash(reduction) % 1000)
    data = rng.standard_normal((4, 5)).astype(np.float32)
    indices = rng.integers(-5, 5, size=(3, 5)).astype(np.int64)  # along axis 1: repeats in each row
    if reduction == "none":  # without a reduction, duplicates are undefined: one update per element
        indices = np.stack([rng.permutation(5)[:5] - 5 * (r % 2) for r in range(3)]).astype(np.int64)
    updates = rng.standard_normal((3, 5)).astype(np.float32)
    data[0, 1], updates[1, 2] = np.nan, np.nan  # NaN stays NaN through every reduction
    m = scatter_model("ScatterElements", data, indices, updates, axis=1, reduction=reduction)
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=cache, workers=1)
    assert [n.op for n in module.prepared.graph.nodes if n.op.startswith("Scatter")] == ["ScatterByTable"]
    (y,) = module.run({"data": data, "updates": updates})
    want = reference("ScatterElements", data, indices, updates, reduction, axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)  # NaN where NaN is expected


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_of_slices_and_of_elements(reduction: str, cache: str) -> None:
    rng = np.random.default_rng(len(reduction))
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    rows = np.array([[2], [-1], [0]] if reduction == "none" else [[2], [-1], [2], [3]], np.int64)
    elems = np.array([[1, 2, 0], [-4, 0, 1], [1, 2, 0]] if reduction != "none" else [[1, 2, 0], [0, 0, 1]],
                     np.int64)
    for indices in (rows, elems):
        updates = rng.standard_normal(indices.shape[:-1] + data.shape[indices.shape[-1]:]).astype(np.float32)
        m = scatter_model("ScatterND", data, indices, updates, reduction=reduction)
        module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=cache, workers=1)
        (y,) = module.run({"data": data, "updates": updates})
        np.testing.assert_allclose(y, reference("ScatterND", data, indices, updates, reduction), rtol=1e-6)


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_a_scatter_of_no_index_is_its_data(op: str, cache: str) -> None:
    """An assignment to an empty slice (torch exports it as a scatter of empty indices and updates,
    as in Swin3D's window mask) leaves the data as it is."""
    data = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    indices = np.zeros((0, 1) if op == "ScatterND" else (0, 3), np.int64)
    updates = np.zeros((0, 3), np.float32)
    module = compile_model(from_onnx(scatter_model(op, data, indices, updates)), db=None, verbose=False,
                           cache_dir=cache, workers=1)
    assert not [n for n in module.prepared.graph.nodes if n.op.startswith("Scatter")]
    (y,) = module.run({"data": data, "updates": updates})
    np.testing.assert_array_equal(y, data)


def test_what_is_not_compiled_is_rejected_by_name() -> None:
    data = np.zeros((2, 3), np.float32)
    many = np.zeros((MAX_UPDATES_PER_ELEMENT + 1, 1), np.int64)
    upd = np.ones(many.shape, np.float32)
    with pytest.raises(UnsupportedModelError, match=f"{MAX_UPDATES_PER_ELEMENT + 1} updates combined"):
        from_onnx(scatter_model("ScatterElements", data, many, upd, reduction="add"))
    with pytest.raises(UnsupportedModelError, match="out of range"):
        from_onnx(scatter_model("ScatterND", data, np.array([[2, 0]], np.int64), np.ones(1, np.float32)))
    m = scatter_model("ScatterND", data, np.array([[1, 0]], np.int64), np.ones(1, np.float32))
    m.graph.input.append(helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 2]))
    del m.graph.initializer[:]
    with pytest.raises(UnsupportedModelError, match="indices must be a constant"):
        from_onnx(m)


@pytest.mark.parametrize("index_type,axis", [(TensorProto.INT64, -1), (TensorProto.FLOAT, 1)])
def test_one_hot_of_run_time_indices(index_type: int, axis: int, cache: str) -> None:
    """Negative indices count from depth, float ones are truncated, out-of-range ones mark nothing;
    the on/off values come as a run-time input."""
    depth = 5
    raw = np.array([[0, 4, -1, 7], [2, -5, 3, -6]])
    whole = index_type != TensorProto.FLOAT
    idx = raw.astype(np.int64) if whole else (raw + 0.4 * np.sign(raw)).astype(np.float32)  # truncated
    g = helper.make_graph(
        [helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=axis)], "g",
        [helper.make_tensor_value_info("i", index_type, raw.shape),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, (2,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])],
        initializer=[numpy_helper.from_array(np.asarray([depth], np.int64), "depth")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    v = np.array([-2.5, 3.0], np.float32)
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=cache, workers=1)
    (y,) = module.run({"i": idx, "v": v})
    want = np.full((2, depth, 4) if axis == 1 else (2, 4, depth), -2.5, np.float32)
    for (r, c), k in np.ndenumerate(raw):
        k = k + depth if k < 0 else k
        if 0 <= k < depth:
            want[(r, k, c) if axis == 1 else (r, c, k)] = 3.0
    np.testing.assert_array_equal(y, want)
