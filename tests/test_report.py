"""``autotune report``: one self-contained HTML page from a real tuning database: per task the tuning
curve (one dot per valid trial, one cross per failure), the chosen config and its loop nest; the
model's estimated latency against the trials; errors by kind; the target's provenance. Then the page
rendered by a real headless Chromium (skipped, saying so, where none is installed).
Cost: about 10 s on two cores (one 8-trial model tuning run, two report runs, one browser start)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.cli import report as report_cli
from autotune.cli import tune as tune_cli
from autotune.graph.compiler import estimated_latency, prepare
from autotune.target import cpu_target
from records import CONFIRM_LABEL, MeasurementRecord, TuningDatabase

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:  # noqa: ANN001
    """A two-layer model tuned for 8 trials, plus one failed trial of each of two kinds."""
    tmp = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng()
    w1 = numpy_helper.from_array(rng.standard_normal((32, 24)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((24, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "two_layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w1, w2])
    model = tmp / "two_layer.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.write_bytes(proto.SerializeToString())
    db = tmp / "t.db"
    assert tune_cli.main(["--model", str(model), "--db", str(db), "--trials", "8", "--batch-size", "2",
                          "--confirm", "0", "--no-progress", "-q"]) == 0
    target = cpu_target()
    tasks = prepare(str(model)).tasks
    with TuningDatabase(db) as d:
        for kind in ("build_error", "runtime_error"):
            d.add_measurement(MeasurementRecord(tasks[0].key, target.key, {"broken": kind}, [], (), kind,
                                                error_msg=f"{kind}: made for the report test"))
        est = estimated_latency(tasks, target, d)
        chosen = {t.key: d.best(t.key, target.key) for t in tasks}
        records = {t.key: [r for r in d.measurements(t.key, target.key) if r.tuner != CONFIRM_LABEL]
                   for t in tasks}
        labels = {t.key: d.workload(t.key)["name"] for t in tasks}
    out = tmp / "report.html"
    assert report_cli.main(["--db", str(db), "--model", str(model), "-o", str(out), "-q"]) == 0
    return {"db": db, "model": model, "html": out.read_text(), "path": out, "est": est, "chosen": chosen,
            "records": records, "labels": labels, "target": target}


def _sections(html: str) -> dict[str, str]:
    """Each task's section by its heading's workload label."""
    out = {}
    for m in re.finditer(r"<section class=task id=task\d+><h3>(.*?) <span.*?</section>", html, re.S):
        out[unescape(m.group(1))] = m.group(0)
    return out


def test_each_task_has_its_curve_config_and_loop_nest(tuned: dict) -> None:
    sections = _sections(tuned["html"])
    assert set(sections) == set(tuned["labels"].values())
    for key, label in tuned["labels"].items():
        sec, recs = sections[label], tuned["records"][key]
        valid = [r for r in recs if r.error_kind is None]
        assert sec.count('class="trial"') == len(valid)  # one dot per valid trial
        assert sec.count('class="failed"') == len(recs) - len(valid)
        assert f"{len(recs)} trials ({len(valid)} valid, {len(recs) - len(valid)} failed)" in sec
        chosen = tuned["chosen"][key]
        assert json.dumps(chosen.config, sort_keys=True) in unescape(sec)
        nest = unescape(re.search(r"<pre>(.*?)</pre>", sec, re.S).group(1))
        assert nest.startswith("kernel ") and "\n  for " in nest
        assert f"{chosen.mean_s * 1e3:.4g} ms" in sec  # compile's choice, drawn as the dashed line


def test_model_estimate_errors_and_provenance(tuned: dict) -> None:
    html = tuned["html"]
    model = html[html.index("<h2 id=model>"):html.index("<h2 id=tasks>")]
    assert "two_layer" in model and f"<b>{tuned['est'] * 1e3:.4g} ms</b>" in model
    assert model.count("<svg") == 1 and 'class="best"' in model
    errors = html[html.index("<h2 id=errors>"):html.index("<h2 id=target>")]
    for kind in ("build_error", "runtime_error"):
        assert re.search(rf"<td>{kind}</td><td class=num>1</td>", errors)
        assert f"{kind}: made for the report test" in errors
    target = html[html.index("<h2 id=target>"):]
    fp = tuned["target"].fingerprint
    assert tuned["target"].key in target and str(fp["cores"]) in target and unescape(target).count(
        fp["compiler"]) == 1


def test_page_is_self_contained(tuned: dict) -> None:
    html = tuned["html"]
    assert "<script" not in html and "<link" not in html and " src=" not in html
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)  # only the SVG namespace


def test_bad_input_is_one_line_and_writes_nothing(tuned: dict, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "r.html"
    for argv in (["--db", str(tmp_path / "missing.db"), "-o", str(out)],
                 ["--db", str(tuned["db"]), "-o", str(tmp_path / "no" / "dir" / "r.html")],
                 ["--db", str(tuned["db"]), "--model", "zoo:nosuch", "-o", str(out)]):
        with pytest.raises(SystemExit) as exc:
            report_cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and err[0].startswith("error:"), err
    assert list(tmp_path.iterdir()) == []


def _png_size_and_colours(data: bytes) -> tuple[int, int, int]:
    """Width, height and the number of distinct byte values of the decompressed pixel rows (a blank
    page has a handful)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return width, height, len(set(zlib.decompress(idat)))


def test_report_renders_in_headless_chromium(tuned: dict, tmp_path: Path) -> None:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        pytest.skip("no Chromium or Chrome installed (apt-get install chromium); the HTML's content is "
                    "tested above")
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([browser, *flags, "--window-size=1000,1400", f"--screenshot={shot}",
                    tuned["path"].as_uri()], capture_output=True, timeout=120, check=True)
    width, height, colours = _png_size_and_colours(shot.read_bytes())
    assert (width, height) == (1000, 1400) and colours > 32
    # the DOM the browser built: every chart parsed as SVG, with its trials
    dom = subprocess.run([browser, *flags, "--dump-dom", tuned["path"].as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert dom.count("<svg") == len(tuned["labels"]) + 1
    assert dom.count('class="trial"') == tuned["html"].count('class="trial"') > 0
