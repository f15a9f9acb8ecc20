"""The model gallery (bench/gallery): its table and JSON, model selection, random inputs, and the
run end to end through its child processes on cached exports. The export test needs torch (the
``[models]`` extra) and is skipped without it; the rest needs only onnx, onnxruntime and gcc."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from bench.gallery import gallery, table
from bench.gallery.evaluate import make_feeds, vacuous_check
from bench.gallery.export import paths
from bench.gallery.models import MODELS, InputSpec
from bench.gallery.table import TOLERANCE, Row


def test_status_follows_the_first_failing_stage() -> None:
    assert Row("m", "legacy", error="export: RuntimeError: boom").status == "export failed"
    assert Row("m", "legacy", error="import: UnsupportedModelError: Where").status == "not imported"
    assert Row("m", "legacy", error="crash: exit status -11: ").status == "crashed"
    assert Row("m", "legacy", error="timeout: no result").status == "timed out"
    ok = Row("m", "dynamo", imported=True, max_rel_err=TOLERANCE / 2)
    assert (ok.status, ok.correct) == ("ok", True)
    wrong_tuned = Row("m", "dynamo", imported=True, max_rel_err=1e-7, tuned_max_rel_err=TOLERANCE * 3)
    assert (wrong_tuned.status, wrong_tuned.correct) == ("WRONG", False)
    late = Row("m", "dynamo", imported=True, max_rel_err=1e-7, error="timing: OSError: x")
    assert late.status == "timing failed"
    assert Row("m", "dynamo", imported=True).correct is None


def test_table_and_json_round_trip(tmp_path: Path) -> None:
    rows = [
        Row("resnet18", "legacy", "ResNet", imported=True, max_rel_err=2e-7, compile_s=3.0,
            untuned_ms=8.0, ort_ms=4.0, tuned_ms=2.0, tuned_max_rel_err=3e-7),
        Row("bert", "dynamo", "BERT",
            error="import: UnsupportedModelError: unsupported by the compiler: IsNaN"),
    ]
    assert rows[0].speedup("untuned") == 0.5 and rows[0].speedup("tuned") == 2.0
    assert rows[1].speedup("untuned") is None
    text = table.format_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["model", "exporter", "status"]
    assert lines[2].split() == ["resnet18", "legacy", "ok", "3.0e-07", "3.0", "8.000", "2.000", "4.000",
                                "0.50", "2.00"]
    assert lines[3].split()[:3] == ["bert", "dynamo", "not", ] and lines[3].split()[-1] == "-"
    assert lines[-1] == "bert · dynamo: import: UnsupportedModelError: unsupported by the compiler: IsNaN"
    out = tmp_path / "g.json"
    table.write_json(str(out), rows, {"db": None})
    data = json.loads(out.read_text())
    assert data["summary"] == {"rows": 2, "exported": 2, "imported": 1, "correct": 1, "wrong": 0,
                               "min_untuned_speedup": 0.5, "min_tuned_speedup": 2.0}
    assert data["rows"][0]["status"] == "ok" and data["rows"][1]["status"] == "not imported"
    back = table.read_json(str(out))
    assert back == rows
    out.write_text(json.dumps({"schema": 99, "rows": []}))
    with pytest.raises(ValueError, match="schema"):
        table.read_json(str(out))


def test_selection_orders_cheap_models_first_and_names_unknown_ones() -> None:
    picked = gallery.select(["vit_b_16", "resnet18", "bert_tiny"], [], None)
    assert [s.name for s in picked] == ["bert_tiny", "resnet18", "vit_b_16"]
    assert {s.name for s in gallery.select([], ["resnet"], None)} == {"resnet18", "resnet34", "resnet50",
                                                                      "resnet50_one_class", "hf_resnet"}
    assert all(s.rank <= 2 for s in gallery.select([], [], 2)) and gallery.select([], [], 2)
    with pytest.raises(ValueError, match="nope.*family 'zz'"):
        gallery.select(["nope"], ["zz"], None)
    families = {s.family for s in MODELS.values()}
    for f in ("ResNet", "ResNeXt", "Wide-ResNet", "MobileNet V2", "MobileNet V3", "EfficientNet V1",
              "EfficientNet V2", "RegNet", "ShuffleNet", "MNASNet", "SqueezeNet", "DenseNet", "GoogLeNet",
              "Inception", "ConvNeXt", "ViT", "Swin", "MaxViT", "BERT", "DistilBERT", "RoBERTa", "GPT-2",
              "T5 encoder"):
        assert f in families


def test_random_inputs_are_token_ids_in_range_and_padded_masks() -> None:
    specs = MODELS["gpt2"].inputs
    feeds = make_feeds(specs, ["input_ids", "attention_mask"], np.random.default_rng(3))
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.dtype == np.int64 and ids.shape == (1, 128) and 0 <= ids.min() and ids.max() < 50257
    assert len(np.unique(ids)) > 100  # random, not a constant
    n = int(mask.sum())
    assert mask.dtype == np.int64 and 64 <= n <= 128 and mask[0, :n].all() and not mask[0, n:].any()
    img = make_feeds((InputSpec("x", "image", (1, 3, 4, 4)),), ["renamed"], np.random.default_rng(0))
    assert img["renamed"].dtype == np.float32 and img["renamed"].std() > 0.3
    with pytest.raises(ValueError, match="'extra'"):
        make_feeds(specs, ["input_ids", "attention_mask", "extra"], np.random.default_rng(0))


def test_bad_arguments_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert gallery.main(["no_such_model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown no_such_model;") and err.count("\n") == 1
    assert gallery.main(["resnet18", "--resume"]) == 2
    assert gallery.main(["resnet18", "--db", "/nonexistent.db"]) == 2


def _tiny_onnx(path: Path) -> None:
    """A small float32 model with resnet18's input: Conv 3->4 (3x3) + Relu + global pool + Gemm."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (4, 3, 3, 3)), ("fc", (4, 10)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"])]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_run_end_to_end_on_cached_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the child processes: a cached failed export gives an 'export failed' row, a cached
    model (a small stand-in for resnet18's export) is imported, compiled and checked against
    onnxruntime; --resume keeps the first row."""
    cache = tmp_path / "cache"
    cache.mkdir()
    _, meta = paths(cache, "squeezenet1_1", "dynamo")
    meta.write_text(json.dumps({"ok": False, "error": "RuntimeError: exporter says no"}))
    onnx_path, meta = paths(cache, "resnet18", "legacy")
    _tiny_onnx(onnx_path)
    meta.write_text(json.dumps({"ok": True, "opset": 17, "seconds": 1.0}))
    out = tmp_path / "g.json"
    common = ["--cache", str(cache), "--no-timing", "--json", str(out)]
    assert gallery.main(["squeezenet1_1", "--exporter", "dynamo"] + common) == 0
    assert gallery.main(["resnet18", "--exporter", "legacy", "--resume"] + common) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["status"]) for r in rows] == [("squeezenet1_1", "export failed"),
                                                         ("resnet18", "ok")]
    assert rows[0]["error"] == "export: RuntimeError: exporter says no"
    r = rows[1]
    assert r["imported"] and r["opset"] == 17 and 0 <= r["max_rel_err"] <= TOLERANCE and r["compile_s"] > 0
    assert r["untuned_ms"] is None  # --no-timing
    printed = [line.split()[:3] for line in capsys.readouterr().out.splitlines()]
    assert ["resnet18", "legacy", "ok"] in printed


def test_export_and_operator_report(tmp_path: Path) -> None:
    """A real legacy export of SqueezeNet 1.1 (torchvision's custom-op registrations skipped as the
    gallery does where they fail to load) and what the operator report reads from it."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("torchvision") is None:  # (importing it here could fail: see the test)
        pytest.skip("torchvision is not installed")
    import onnx

    from bench.gallery.export import ensure_export
    from bench.gallery.ops_report import summarize

    meta = ensure_export(MODELS["squeezenet1_1"], "legacy", tmp_path, timeout_s=600)
    assert meta["ok"], meta
    s = summarize(onnx.load(str(paths(tmp_path, "squeezenet1_1", "legacy")[0])), "squeezenet1_1", "legacy")
    assert s.ops["Conv"] == 26 and s.ops["MaxPool"] == 3
    assert list(s.attrs["MaxPool"]) == ["ceil_mode=1 pads=[0,0,0,0] strides=[2,2] kernel_shape=[3,3] "
                                        "dilations=[1,1]"]
    assert s.input_dtypes == {"x": "FLOAT"} and not s.dtypes


def test_torchvision_imports_without_its_custom_op_registrations() -> None:
    """The fallback of import_torchvision, forced in a fresh interpreter: a classifier still builds
    and runs."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("torchvision") is None:  # (importing it here could fail: see the test)
        pytest.skip("torchvision is not installed")
    import subprocess
    import sys

    code = ("import sys, torch; from bench.gallery.models import import_torchvision\n"
            "tv = import_torchvision(skip_registrations=True)\n"
            "assert 'skipped' in (sys.modules['torchvision._meta_registrations'].__doc__ or '')\n"
            "m = tv.models.squeezenet1_1(weights=None).eval()\n"
            "print(tuple(m(torch.randn(1, 3, 64, 64)).shape))")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(1, 1000)"


def test_a_reference_that_ignores_its_input_is_refused() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 10)).astype(np.float32)
    vacuous_check([a], [a + 0.5])  # input-dependent: accepted
    with pytest.raises(ValueError, match="hardly depends"):
        vacuous_check([a], [a * (1 + 1e-6)])
    with pytest.raises(ValueError, match="hardly depends"):
        vacuous_check([np.zeros_like(a)], [np.zeros_like(a)])  # ViT's zero-initialised head
    with pytest.raises(ValueError, match="not finite"):
        vacuous_check([np.full((2,), np.inf, np.float32)], [a])


def test_random_weights_are_made_well_scaled() -> None:
    """Zero weight matrices are redrawn and batch-norm statistics recomputed from random batches."""
    torch = pytest.importorskip("torch")
    from bench.gallery.export import well_scaled

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5))
    torch.nn.init.zeros_(model[3].weight)
    spec = InputSpec("x", "image", (1, 3, 8, 8))
    out = well_scaled(model, dataclasses.replace(MODELS["resnet18"], inputs=(spec,)))
    assert not out.training and bool(model[3].weight.any())
    bn = model[1]
    assert bn.momentum == 0.1 and not torch.allclose(bn.running_var, torch.ones(4))
    with torch.no_grad():
        y = model[1](model[0](torch.randn(64, 3, 8, 8)))
    assert abs(float(y.mean())) < 0.2 and 0.7 < float(y.std()) < 1.3  # normalised by its statistics
