"""Compile-time use of tuning records: build_kernel from the DB (or loudly without it), and bench.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.compile import build_kernel
from autotune.target import cpu_target
from autotune.te import make_workload
from records import MeasurementRecord, TuningDatabase

ROOT = Path(__file__).resolve().parents[1]
SHAPE = [32, 48, 40]


def _script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("compile")
    proc = _script("tune.py", "--op", "matmul", "--shape", ",".join(map(str, SHAPE)), "--trials", "4",
                   "--db", "tmp.db", "--no-progress", cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d / "tmp.db"


@pytest.fixture(scope="module")
def target():  # noqa: ANN201
    return cpu_target()


def _check(kernel, wl, seed: int) -> None:  # noqa: ANN001
    inputs = wl.random_inputs(np.random.default_rng(seed))
    out = kernel(*inputs)
    ref = wl.run_reference(inputs)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.dtype == np.float32 and o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4)


def test_build_kernel_uses_the_recorded_best(tuned_db: Path, target, capsys) -> None:  # noqa: ANN001
    wl = make_workload("matmul", SHAPE)
    with TuningDatabase(tuned_db, create=False) as db:
        best = db.best(wl.key, target.key)
        assert best is not None
        kernel = build_kernel(wl, target, db)
    assert kernel.tuned and kernel.config == best.config
    assert json.loads(json.dumps([s.to_dict() for s in kernel.steps])) == best.steps
    assert "WARNING" not in capsys.readouterr().err
    assert kernel.kernel_name in kernel.source and kernel.kernel_name in kernel.lowered
    _check(kernel, wl, seed=11)
    # non-contiguous float64 views are converted, the result is unchanged
    a, b = wl.random_inputs(np.random.default_rng(3))
    a_f = np.asfortranarray(a.astype(np.float64))
    np.testing.assert_allclose(kernel(a_f, b)[0], kernel(a, b)[0], rtol=1e-6)
    costs = kernel.time(a, b, repeat=2, min_repeat_ms=1.0)
    assert len(costs) == 2 and all(c > 0 for c in costs)


def test_build_kernel_without_record_warns_and_works(tuned_db: Path, target, capsys) -> None:  # noqa: ANN001
    wl = make_workload("matmul", [16, 24, 8])  # not in the DB
    with TuningDatabase(tuned_db, create=False) as db:
        kernel = build_kernel(wl, target, db)
    err = capsys.readouterr().err
    assert not kernel.tuned
    lines = [ln for ln in err.splitlines() if ln.startswith("WARNING")]
    assert len(lines) == 1
    assert "no tuned schedule for matmul[16,24,8]" in lines[0] and target.key in lines[0]
    _check(kernel, wl, seed=5)
    kernel2 = build_kernel(wl, target, None)
    assert not kernel2.tuned and kernel2.config == kernel.config  # deterministic default
    assert "WARNING: no tuned schedule" in capsys.readouterr().err


def test_broken_record_falls_back_loudly(target, capsys) -> None:  # noqa: ANN001
    wl = make_workload("matmul", [8, 16, 8])
    with TuningDatabase(":memory:") as db:
        db.add_workload(wl.key, "matmul[8,16,8]", wl.description(), wl.flops)
        db.add_target(target.key, target.kind, target.fingerprint)
        bad = [{"step": "split", "stage": "no_such_stage", "loop": "i", "factor": 2, "nparts": None}]
        db.add_measurement(MeasurementRecord(wl.key, target.key, {"x": 1}, bad, (1e-6,), None, verified=True))
        kernel = build_kernel(wl, target, db)
    assert not kernel.tuned
    assert "failed to build" in capsys.readouterr().err
    _check(kernel, wl, seed=2)


def test_wrong_inputs_raise(target) -> None:  # noqa: ANN001
    wl = make_workload("matmul", [8, 16, 8])
    kernel = build_kernel(wl, target, None)
    a, b = wl.random_inputs(np.random.default_rng(0))
    with pytest.raises(ValueError, match="'B'.*shape"):
        kernel(a, b.T)
    with pytest.raises(ValueError, match="2 inputs"):
        kernel(a)
    with pytest.raises(ValueError, match="'A'.*dtype"):
        kernel(a.astype(np.complex64), b)


def test_bench_json(tuned_db: Path) -> None:
    proc = _script("bench.py", "--db", str(tuned_db), "--json", "--min-repeat-ms", "5", "--repeat", "3",
                   cwd=tuned_db.parent)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["target"] == cpu_target().key and out["db"] == str(tuned_db)
    (row,) = out["results"]
    assert row["workload"] == "matmul[32,48,40]" and row["flops"] == 2 * 32 * 48 * 40
    assert row["speedup"] > 0 and row["ours_gflops"] > 0 and row["numpy_gflops"] > 0
    assert row["max_abs_err"] < 1e-4 and row["config"] and row["tuned"]
    assert len(lines) == 1  # --json: stdout holds only the JSON; the table goes to stderr
    assert any(ln.startswith("matmul[32,48,40]") for ln in proc.stderr.splitlines())


def test_bench_bad_db(tmp_path: Path) -> None:
    proc = _script("bench.py", "--db", str(tmp_path / "missing.db"), cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error:")
    assert not (tmp_path / "missing.db").exists()
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 10)
    proc = _script("bench.py", "--db", str(text), cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error:")
    assert text.read_text() == "not a database\n" * 10


def test_bench_empty_db(tmp_path: Path) -> None:
    TuningDatabase(tmp_path / "empty.db").close()
    proc = _script("bench.py", "--db", str(tmp_path / "empty.db"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "no tuned workloads" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
