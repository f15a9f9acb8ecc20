"""scripts/tune.py end to end: JSON summary, bad input, resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.search.tune import CONFIRM_LABEL
from records import TuningDatabase

ROOT = Path(__file__).resolve().parents[1]
TUNE = [sys.executable, str(ROOT / "scripts" / "tune.py")]


def run_tune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*TUNE, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_tune_one_op_json(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = run_tune("--op", "matmul", "--shape", "24,40,16", "--trials", "5", "--db", str(db), "--json",
                 "--no-progress", "--seed", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for key in ("workload", "target", "trials", "valid", "errors", "best_gflops", "best_config", "db"):
        assert key in out
    assert out["trials"] == 5 and out["valid"] + out["errors"] == 5
    assert out["valid"] >= 1 and out["best_gflops"] > 0
    with TuningDatabase(db) as d:
        best = d.best(out["workload_key"], out["target"])
        assert best is not None and best.verified and best.config == out["best_config"]
    # a rerun with the same budget measures nothing new
    r2 = run_tune("--op", "matmul", "--shape", "24,40,16", "--trials", "5", "--db", str(db), "--json",
                  "--no-progress")
    assert json.loads(r2.stdout.strip().splitlines()[-1])["new_trials"] == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--op", "nosuchop", "--shape", "1,2"], "valid ops"),
        (["--op", "matmul", "--shape", "12,x"], "malformed shape"),
        (["--op", "matmul", "--shape", "12,12"], "matmul takes"),
        (["--op", "matmul", "--shape", "0,4,4"], "positive"),
        (["--op", "matmul"], "needs --shape"),
        (["--op", "conv2d", "--shape", "1,3,4,4,8,7,7,1,0"], "conv2d"),
        (["--target", "tpu"], "valid targets"),
        (["--strategy", "magic"], "valid"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    db = tmp_path / "t.db"
    r = run_tune(*args, "--db", str(db), "--no-progress")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not db.exists(), "nothing may be written on bad input"


def test_foreign_db_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("create table people (name text)")
    con.execute("insert into people values ('ada')")
    con.commit()
    con.close()
    before = db.read_bytes()
    r = run_tune("--op", "matmul", "--shape", "8,8,8", "--trials", "1", "--db", str(db), "--no-progress")
    assert r.returncode == 2 and "error:" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert db.read_bytes() == before


def test_newer_schema_untouched(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    TuningDatabase(db).close()
    con = sqlite3.connect(db)
    con.execute("update meta set value = '999' where key = 'schema_version'")
    con.commit()
    con.close()
    before = db.read_bytes()
    r = run_tune("--op", "matmul", "--shape", "8,8,8", "--trials", "1", "--db", str(db), "--no-progress")
    assert r.returncode == 2 and "newer" in r.stderr
    assert db.read_bytes() == before


def _count(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("select count(*) from measurements").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_kill_9_then_resume_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one OpenMP thread: threaded kernels' timings swing so with other jobs' load on a shared machine
    # that confirmation would (rightly) refuse to re-rank, see autotune/search/confirm.py
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    db = tmp_path / "k.db"
    args = ["--op", "matmul", "--shape", "48,48,48", "--trials", "14", "--db", str(db), "--no-progress",
            "--batch-size", "2", "--seed", "5"]
    proc = subprocess.Popen([*TUNE, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 240
    while _count(db) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "tuning finished before it could be killed; make the job longer"
    os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its worker processes, no cleanup
    proc.wait()
    with TuningDatabase(db) as d:
        before = {(r.id, r.created_at) for r in d.measurements()}
    assert 3 <= len(before) < 14
    r = run_tune(*args, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["trials"] == 14 and out["new_trials"] == 14 - len(before)
    if out["confirmations"] < 6:  # other jobs' load shifted the timings: refused, and a rerun finishes
        assert "timing shifted during confirmation" in r.stderr and out["confirmations"] % 3 == 0
        r = run_tune(*args, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
    with TuningDatabase(db) as d:
        rows = d.measurements()
        after = {(r.id, r.created_at) for r in rows}
        keys = [json.dumps(r.config, sort_keys=True) for r in rows if r.tuner != CONFIRM_LABEL]
        confirmed = [json.dumps(r.config, sort_keys=True) for r in rows if r.tuner == CONFIRM_LABEL]
    assert before <= after, "a committed row was lost"
    assert len(set(keys)) == len(keys) == 14, "a config was measured twice by the search"
    # then the 3 fastest configs twice more each (--confirm 3, 2 rounds), none of them new
    assert len(confirmed) == 6 and len(set(confirmed)) == 3 and set(confirmed) <= set(keys)
    assert out["confirmations"] == 6
