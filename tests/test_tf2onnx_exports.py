"""Models another exporter wrote: Keras models converted by tf2onnx (``bench/gallery/keras.py
export``: random weights, the inputs drawn there and Keras's output on them saved beside each).
tf2onnx writes NHWC graphs with transposes around each convolution, recurrent layers as ONNX LSTM
and GRU, 1-d convolutions as 2-d ones between Unsqueeze and Squeeze, and attention's shapes as
Shape/Gather/ReduceProd arithmetic: each compiles and matches Keras and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from autotune.graph import compile_model

DATA = Path(__file__).parent / "data" / "tf2onnx"
MODELS = sorted(p.stem for p in DATA.glob("*.onnx"))


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want))) / float(np.max(np.abs(want)))


@pytest.mark.parametrize("name", MODELS)
def test_a_tf2onnx_export_matches_keras_and_onnxruntime(name: str, tmp_path: Path) -> None:
    path = DATA / f"{name}.onnx"
    assert onnx.load(str(path)).producer_name == "tf2onnx"
    saved = np.load(DATA / f"{name}.npz")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in session.get_inputs()],
                     [saved[k] for k in saved.files if k.startswith("in:")]))
    module = compile_model(str(path), verbose=False, cache_dir=str(tmp_path))
    (got,) = module.run(feeds)
    (ref,) = session.run(None, feeds)
    assert got.shape == ref.shape == saved["out"].shape
    assert _rel(got, ref) <= 1e-5 and _rel(got, saved["out"]) <= 1e-5
    # the check could fail: other inputs give another answer
    rng = np.random.default_rng(1)  # (the attention model has no positions: new token ids, not a shuffle)
    other = {k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f"
             else rng.integers(0, 100, v.shape).astype(v.dtype) for k, v in feeds.items()}
    assert _rel(module.run(other)[0], ref) > 1e-3


def test_the_exports_are_of_every_kind_they_stand_for() -> None:
    ops = {n: {node.op_type for node in onnx.load(str(DATA / f"{n}.onnx")).graph.node} for n in MODELS}
    assert {"LSTM", "GRU"} <= ops["keras_recurrent"]
    assert {"ConvTranspose", "Resize", "Pad"} <= ops["keras_unet"]
    assert {"Unsqueeze", "Squeeze", "ConvTranspose"} <= ops["keras_conv1d"]
    assert {"Shape", "ReduceProd", "MatMul"} <= ops["keras_transformer"]
