"""Keras models exported by tf2onnx: does each import, compile and match Keras and onnxruntime?

TensorFlow and tf2onnx pin onnx and protobuf versions of their own, so they export in an
environment apart, and the check runs here:

    python -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx onnx==1.16.2
    /tmp/tfenv/bin/python -m bench.gallery.keras export DIR [--models a,b] [--opset 17]
    python -m bench.gallery.keras check DIR [--timing] [--json bench/gallery/gallery_keras.json]

``export`` builds each model with random weights (Keras applications with logits, no softmax, so a
comparison sees the classifier's spread), draws its inputs, runs Keras, converts with
``tf2onnx.convert.from_keras`` and writes ``NAME.onnx`` and ``NAME.npz`` (the inputs and Keras's
output). ``check`` compiles each export untuned and compares its output on those inputs with
onnxruntime's and Keras's (relative to the largest reference value; the gallery's rule is 1e-4 of
onnxruntime), after checking that onnxruntime's output depends on the input at all; ``--timing``
adds ours against onnxruntime, interleaved.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

TOLERANCE = 1e-4


def _applications() -> dict[str, Callable[[], Any]]:
    import tensorflow as tf

    apps = tf.keras.applications
    made = {
        "mobilenet_v2": apps.MobileNetV2, "mobilenet_v3_small": apps.MobileNetV3Small,
        "mobilenet_v3_large": apps.MobileNetV3Large, "resnet50": apps.ResNet50,
        "resnet50_v2": apps.ResNet50V2, "efficientnet_b0": apps.EfficientNetB0,
        "efficientnet_v2_b0": apps.EfficientNetV2B0, "densenet121": apps.DenseNet121,
        "inception_v3": apps.InceptionV3, "xception": apps.Xception, "nasnet_mobile": apps.NASNetMobile,
        "convnext_tiny": apps.ConvNeXtTiny, "regnetx_002": apps.RegNetX002, "regnety_002": apps.RegNetY002,
    }
    return {f"keras_{k}": (lambda f=f: f(weights=None, classifier_activation=None)) for k, f in made.items()}


def _layers() -> dict[str, Callable[[], Any]]:
    """Small models of the layers the applications do not use: attention, recurrent, 1-d and
    transposed convolutions, a U-Net's skip and resampling."""
    import tensorflow as tf

    L = tf.keras.layers

    def transformer() -> Any:
        ids = tf.keras.Input((16,), dtype="int32")
        x = L.Embedding(100, 64)(ids)
        x = L.LayerNormalization()(x + L.MultiHeadAttention(4, 16)(x, x))
        x = L.LayerNormalization()(x + L.Dense(64)(L.Dense(128, activation="gelu")(x)))
        return tf.keras.Model(ids, L.Dense(10)(L.GlobalAveragePooling1D()(x)))

    def recurrent() -> Any:
        seq = tf.keras.Input((20, 8))
        x = L.Bidirectional(L.LSTM(32, return_sequences=True))(seq)
        return tf.keras.Model(seq, L.Dense(4)(L.GRU(16)(x)))

    def conv1d() -> Any:
        sig = tf.keras.Input((64, 3))
        x = L.Conv1D(16, 5, padding="same", activation="relu")(sig)
        x = L.MaxPooling1D()(L.BatchNormalization()(L.SeparableConv1D(32, 3, strides=2)(x)))
        return tf.keras.Model(sig, L.Flatten()(L.Conv1DTranspose(8, 3, strides=2)(x)))

    def unet() -> Any:
        img = tf.keras.Input((64, 64, 3))
        a = L.Conv2D(16, 3, padding="same", activation="relu")(img)
        b = L.Conv2D(32, 3, strides=2, padding="same", activation="swish")(a)
        b = L.DepthwiseConv2D(3, padding="same")(b)
        u = L.Concatenate()([L.Conv2DTranspose(16, 2, strides=2)(b), a])
        u = L.Cropping2D(1)(L.ZeroPadding2D(1)(L.UpSampling2D(2)(L.AveragePooling2D()(u))))
        return tf.keras.Model(img, L.Conv2D(2, 1, activation="softmax")(u))

    return {"keras_transformer": transformer, "keras_recurrent": recurrent, "keras_conv1d": conv1d,
            "keras_unet": unet}


def export(out: Path, names: list[str] | None, opset: int) -> int:
    """Build, run and convert each model (in an environment with TensorFlow and tf2onnx)."""
    import onnx
    import tensorflow as tf
    import tf2onnx

    models = {**_applications(), **_layers()}
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in names or list(models):
        tf.keras.utils.set_random_seed(0)
        model = models[name]()
        rng = np.random.default_rng(0)
        spec, feeds = [], {}
        for t in model.inputs:
            # batch 1; an image size the application leaves open (MobileNet-V3's): 224
            shape = [1] + [224 if d is None else int(d) for d in t.shape[1:]]
            key = t.name.split(":")[0]
            if t.dtype.is_integer:
                feeds[key] = rng.integers(0, 100, shape).astype(t.dtype.as_numpy_dtype)
            else:
                feeds[key] = rng.standard_normal(shape).astype(np.float32)
            spec.append(tf.TensorSpec(shape, t.dtype, name=key))
        want = model([feeds[s.name] for s in spec] if len(spec) > 1 else feeds[spec[0].name], training=False)
        try:
            proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset)
        except Exception as err:  # noqa: BLE001 - a model the converter refuses is that row's finding
            print(f"{name}: export failed: {type(err).__name__}: {str(err)[:300]}", flush=True)
            failed += 1
            continue
        foreign = sorted({n.op_type for n in proto.graph.node if not onnx.defs.has(n.op_type, n.domain)})
        if foreign:  # tf2onnx leaves TensorFlow ops it cannot convert in the graph, and says so in a log
            print(f"{name}: export failed: tf2onnx left TensorFlow ops {foreign}", flush=True)
            failed += 1
            continue
        (out / f"{name}.onnx").write_bytes(proto.SerializeToString())
        np.savez(out / f"{name}.npz", out=np.asarray(want), **{f"in:{k}": v for k, v in feeds.items()})
        print(f"{name}: {len(proto.graph.node)} nodes, opset {opset}", flush=True)
    return 1 if failed else 0


def check_one(path: Path, timing: bool) -> dict[str, Any]:
    """One export: compiled untuned, compared with onnxruntime and Keras on the exported inputs."""
    import onnxruntime as ort

    from autotune.graph import compile_model

    from .evaluate import _rel_err, interleaved_ms, vacuous_check
    from .export import one_line

    saved = np.load(path.with_suffix(".npz"))
    row: dict[str, Any] = {"model": path.stem, "nodes": None}
    stage = "reference"
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        feeds = dict(zip(names, [saved[k] for k in saved.files if k.startswith("in:")]))
        ref = session.run(None, feeds)
        rng = np.random.default_rng(1)
        other = {k: (rng.integers(v.min(), v.max() + 1, v.shape).astype(v.dtype) if v.dtype.kind in "iu"
                     else rng.standard_normal(v.shape).astype(v.dtype)) for k, v in feeds.items()}
        vacuous_check(ref, session.run(None, other))
        stage = "compile"
        t0 = time.perf_counter()
        module = compile_model(str(path), verbose=False)
        row["compile_s"] = round(time.perf_counter() - t0, 1)
        row["nodes"], row["tasks"] = len(module.graph.nodes), module.summary.tasks
        stage = "run"
        ours = module.run(feeds)
        row["rel_err_ort"] = _rel_err(ours, ref)
        row["rel_err_keras"] = _rel_err(ours[:1], [saved["out"]])
        row["ort_vs_keras"] = _rel_err(ref[:1], [saved["out"]])
        row["status"] = "ok" if row["rel_err_ort"] <= TOLERANCE else "wrong"
        if timing:
            stage = "timing"
            ms = interleaved_ms({"ours": lambda: module.run(feeds), "ort": lambda: session.run(None, feeds)},
                                5, 200.0)
            row["ours_ms"], row["ort_ms"] = round(ms["ours"], 3), round(ms["ort"], 3)
            row["speedup"] = round(ms["ort"] / ms["ours"], 3)
    except Exception as err:  # noqa: BLE001 - every failure is this row's finding
        row["status"], row["error"] = "failed", f"{stage}: {one_line(err, 400)}"
    return row


def check(folder: Path, timing: bool, out: str | None) -> int:
    rows = []
    for path in sorted(folder.glob("*.onnx")):
        row = check_one(path, timing)
        rows.append(row)
        if row["status"] == "failed":
            detail = row["error"]
        else:
            detail = (f"vs onnxruntime {row['rel_err_ort']:.1e}, vs Keras {row['rel_err_keras']:.1e} "
                      f"(onnxruntime vs Keras {row['ort_vs_keras']:.1e})")
            if timing:
                detail += f", {row['ours_ms']:.2f} / {row['ort_ms']:.2f} ms, {row['speedup']:.2f}x"
        print(f"{row['model']:28s} {row['status']:6s} {detail}", flush=True)
    summary = {"exports": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
               "worst_rel_err_ort": max((r["rel_err_ort"] for r in rows if "rel_err_ort" in r), default=None)}
    print(json.dumps(summary))
    if out:
        Path(out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0 if summary["ok"] == len(rows) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="(with TensorFlow and tf2onnx) build, run and convert the models")
    e.add_argument("folder", type=Path)
    e.add_argument("--models", default=None, help="comma-separated names (default: all)")
    e.add_argument("--opset", type=int, default=17)
    c = sub.add_parser("check", help="compile each export and compare with onnxruntime and Keras")
    c.add_argument("folder", type=Path)
    c.add_argument("--timing", action="store_true")
    c.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.cmd == "export":
        return export(args.folder, args.models.split(",") if args.models else None, args.opset)
    return check(args.folder, args.timing, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
