"""``autotune db show`` and the named views: workloads and targets by name, the best record per pair
by compile's rule (median of a config's runs, confirmed finalists first), counts, errors by kind;
views readable by the plain sqlite-utils CLI; Datasette metadata; a schema-2 file read as it is and
migrated when opened for writing. Cost: about 5 s (a few subprocesses, no tuning)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from records import CONFIRM_LABEL, MeasurementRecord, TuningDatabase
from records.schema import SCHEMA_VERSION
from records.views import DESCRIPTIONS, NAMED_VIEWS

ROOT = Path(__file__).resolve().parents[1]
W, V, T = "a" * 24, "b" * 24, "c" * 24


def autotune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _rec(workload: str, config: dict, mean: float | None, tuner: str = "xgb", error: str | None = None):
    return MeasurementRecord(workload_key=workload, target_key=T, config=config, steps=[],
                             costs=() if error else (mean,), error_kind=error, error_msg=error or "",
                             verified=error is None, tuner=tuner)


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, dict]:
    """A database with random times: on workload W a lucky config (one fast run, never confirmed)
    and three confirmed finalists with three runs each; on V plain configs; failures of two kinds."""
    rng = np.random.default_rng()
    path = tmp_path / "made.db"
    expect: dict = {}
    with TuningDatabase(path) as db:
        db.add_workload(W, "matmul[64,64,64]", {"op": "matmul"}, 2 * 64**3)
        db.add_workload(V, "softmax[8x10]", {"op": "softmax"}, 400.0)
        db.add_target(T, "cpu", {"model": "Test CPU 9000", "cores": 2})
        medians = {}
        for c in range(3):
            runs = sorted(rng.uniform(1e-4, 2e-4, 3))
            db.add_measurement(_rec(W, {"tile": c}, runs[0]))
            for r in runs[1:]:
                db.add_measurement(_rec(W, {"tile": c}, r, tuner=CONFIRM_LABEL))
            medians[c] = runs[1]  # upper median of three
        db.add_measurement(_rec(W, {"tile": 99}, float(rng.uniform(1e-6, 5e-5))))  # lucky, unconfirmed
        v_times = rng.uniform(1e-6, 1e-5, 4)
        for c, t in enumerate(v_times):
            db.add_measurement(_rec(V, {"v": c}, float(t)))
        n_build, n_run = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        for i in range(n_build):
            db.add_measurement(_rec(W, {"bad": i}, None, error="build_error"))
        for i in range(n_run):
            db.add_measurement(_rec(V, {"bad": i}, None, error="runtime_error"))
        best_w = min(medians, key=medians.get)
        expect = {"W": ({"tile": best_w}, medians[best_w]), "V": ({"v": int(np.argmin(v_times))},
                  float(v_times.min())), "build_error": n_build, "runtime_error": n_run}
        assert db.best(W, T).config == expect["W"][0]  # the rule compile uses, by the API
    return path, expect


def test_show_names_the_best_record_compile_takes(made) -> None:  # noqa: ANN001
    path, expect = made
    r = autotune("db", "show", str(path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["schema_version"] == str(SCHEMA_VERSION) and out["workloads"] == 2
    assert [t["name"] for t in out["targets"]] == ["cpu Test CPU 9000"]
    pairs = {p["workload"]: p for p in out["pairs"]}
    w, v = pairs["matmul[64,64,64]"], pairs["softmax[8x10]"]
    assert w["best_config"] == expect["W"][0] and w["best_ms"] == pytest.approx(expect["W"][1] * 1e3)
    assert w["best_runs"] == 3 and w["confirmations"] == 6 and w["trials"] == 4 + expect["build_error"]
    assert w["best_gflops"] == pytest.approx(2 * 64**3 / expect["W"][1] / 1e9)
    assert v["best_config"] == expect["V"][0] and v["errors"] == expect["runtime_error"]
    assert out["errors_by_kind"] == {"build_error": expect["build_error"],
                                     "runtime_error": expect["runtime_error"]}
    text = autotune("db", "show", str(path))
    assert text.returncode == 0 and "matmul[64,64,64]" in text.stdout and "cpu Test CPU 9000" in text.stdout
    assert f"build_error: {expect['build_error']}" in text.stdout


def test_views_carry_names_and_agree_with_the_api(made) -> None:  # noqa: ANN001
    path, expect = made
    cli = shutil.which("sqlite-utils")
    if cli is None:
        pytest.skip("the sqlite-utils CLI is not on PATH")
    rows = json.loads(subprocess.run([cli, "rows", str(path), "best_configs"], capture_output=True,
                                     text=True, timeout=60, check=True).stdout)
    by_name = {r["workload"]: r for r in rows}
    assert json.loads(by_name["matmul[64,64,64]"]["config"]) == expect["W"][0]
    assert by_name["matmul[64,64,64]"]["target"] == "cpu Test CPU 9000"
    assert json.loads(by_name["softmax[8x10]"]["config"]) == expect["V"][0]
    with TuningDatabase(path, create=False, readonly=True) as db:
        for r in rows:
            assert db.best(r["workload_key"], r["target_key"]).id == r["measurement_id"]
    errors = json.loads(subprocess.run([cli, "query", str(path), "select * from errors_by_kind"],
                                       capture_output=True, text=True, timeout=60, check=True).stdout)
    assert {e["error_kind"]: e["count"] for e in errors} == {"build_error": expect["build_error"],
                                                             "runtime_error": expect["runtime_error"]}


def test_schema_2_file_is_read_as_it_is_and_migrated_on_write(made) -> None:  # noqa: ANN001
    path, expect = made
    con = sqlite3.connect(path)  # the file as schema 2 wrote it: no named views
    for view in NAMED_VIEWS:
        con.execute(f"DROP VIEW {view}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = path.read_bytes()
    shown = autotune("db", "show", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["errors_by_kind"]["build_error"] == expect["build_error"]
    assert path.read_bytes() == before  # read-only: nothing migrated, nothing written
    with TuningDatabase(path) as db:  # a writer brings it up to date
        names = {r[0] for r in db.db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
        assert set(NAMED_VIEWS) <= names
        assert db.best(W, T).config == expect["W"][0]
    assert autotune("db", "check", str(path)).returncode == 0


def test_datasette_metadata_describes_every_table_and_view(made, tmp_path: Path) -> None:  # noqa: ANN001
    path, _ = made
    out = tmp_path / "metadata.json"
    r = autotune("db", "metadata", str(path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    meta = json.loads(out.read_text())
    tables = meta["databases"]["made"]["tables"]
    con = sqlite3.connect(path)
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    con.close()
    assert names == set(tables) == set(DESCRIPTIONS)
    assert all(t["description"] for t in tables.values())
    bad = autotune("db", "metadata", str(path), "-o", str(tmp_path / "no" / "such" / "m.json"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    datasette = shutil.which("datasette")
    if datasette is None:
        pytest.skip("datasette is not installed; the metadata was checked against the file's schema only")
    url = "/made/best_configs.json?_shape=array"
    served = subprocess.run([datasette, str(path), "-m", str(out), "--get", url],
                            capture_output=True, text=True, timeout=120)
    assert served.returncode == 0, served.stderr
    assert {r["workload"] for r in json.loads(served.stdout)} == {"matmul[64,64,64]", "softmax[8x10]"}
