"""Fault tests of the shared tuning database with real processes: tuners started together on one file,
kill -9 at random moments (during confirmation too) then resume, a read-only mount, damaged rows, the
nearest compatible target. Tuners run in forked children (real processes, real builds and timings) on
a tiny workload with one OpenMP thread: on a shared 2-core machine, threaded kernels' timings swing by
orders of magnitude with other jobs' load."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from records import CONFIRM_LABEL, TuningDatabase, config_key
from records.maintenance import check

ROOT = Path(__file__).resolve().parents[1]
OP, SHAPE = "matmul", "16,16,16"
ROUNDS = 2  # TuneOptions.confirm_rounds


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _tune(db_path: str, trials: int, seed: int, confirm: int) -> None:
    """A tuning run, in a forked child: what scripts/tune.py does, with quick timing options."""
    from autotune.measure import Builder, CpuRunner, RunOptions
    from autotune.search import TuneOptions, tune_workload
    from autotune.target import cpu_target
    from autotune.te import make_workload

    options = TuneOptions(trials=trials, strategy="random", seed=seed, batch_size=2, progress=False,
                          confirm=confirm, run=RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0))
    with TuningDatabase(db_path) as db, Builder() as builder, CpuRunner() as runner:
        tune_workload(make_workload(OP, SHAPE), cpu_target(), db, options, builder, runner)


def _start(db: Path, trials: int, seed: int = 0, confirm: int = 3) -> multiprocessing.Process:
    proc = multiprocessing.get_context("fork").Process(target=_tune, args=(str(db), trials, seed, confirm))
    proc.start()
    return proc


def _rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, config_key, tuner, costs FROM measurements ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        conn.close()


def _finish_confirmation(db: Path, trials: int, confirm: int) -> None:
    """Where other jobs' load made confirmation refuse (finalists left with equal, incomplete counts,
    never a partial round), rerun as the warning says, at most twice."""
    for _ in range(2):
        with TuningDatabase(db, readonly=True) as d:
            first = d.measurements()[0]
            keys = [config_key(r.config) for r in d.search_top(first.workload_key, first.target_key, confirm)]
            counts = [d.confirmations(first.workload_key, first.target_key).get(k, 0) for k in keys]
        assert len(set(counts)) == 1, f"finalists hold different numbers of confirmations: {counts}"
        if counts[0] == ROUNDS:
            return
        rerun = _start(db, trials, confirm=confirm)
        rerun.join(120)
        assert rerun.exitcode == 0


def _assert_complete(db: Path, trials: int, confirm: int) -> None:
    """Every trial once, the budget exactly, each finalist confirmed ROUNDS times, no claim left."""
    rows = _rows(db)
    search = [r[1] for r in rows if r[2] != CONFIRM_LABEL]
    assert len(search) == trials and len(set(search)) == trials, "a config measured twice or budget missed"
    with TuningDatabase(db, readonly=True) as d:
        first = d.measurements()[0]
        wk, tk = first.workload_key, first.target_key
        keys = {config_key(r.config) for r in d.search_top(wk, tk, confirm)}
        counts = d.confirmations(wk, tk)
        assert {k: counts.get(k, 0) for k in keys} == {k: ROUNDS for k in keys}
        assert sum(counts.values()) == ROUNDS * len(keys)
        report = check(d)
        assert report.ok and report.live_claims == 0, report.lines()


@pytest.mark.parametrize("tuners,trials", [(2, 6), (4, 8)])
def test_tuners_started_together_never_measure_a_config_twice(tmp_path: Path, tuners: int,
                                                              trials: int) -> None:
    db = tmp_path / "shared.db"
    TuningDatabase(db).close()
    # the same seed: every tuner proposes the same configs, so only the claims keep them apart
    procs = [_start(db, trials, seed=0, confirm=2) for _ in range(tuners)]
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * tuners
    _finish_confirmation(db, trials, confirm=2)
    _assert_complete(db, trials, confirm=2)


def test_model_tuners_on_one_db_share_the_model_budget(tmp_path: Path) -> None:
    """Two model tuners started together: the budget spans the model's tasks and is read again every
    round, so together they stop at exactly --trials and measure no config twice."""
    db, trials = tmp_path / "shared.db", 10
    TuningDatabase(db).close()
    cmd = [sys.executable, str(ROOT / "scripts" / "tune.py"), "--model", "zoo:mlp", "--trials", str(trials),
           "--batch-size", "2", "--strategy", "random", "--confirm", "0", "--db", str(db), "--no-progress"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT workload_key, config_key FROM measurements WHERE tuner != ?",
                           [CONFIRM_LABEL]).fetchall()
    assert len(rows) == trials and len(set(rows)) == trials
    assert len({w for w, _ in rows}) > 1  # the budget was spread over several tasks


def _kill_when(proc: multiprocessing.Process, db: Path, ready, delay: float = 0.0,
               timeout: float = 90.0) -> list[tuple]:
    """SIGKILL ``proc`` ``delay`` seconds after ``ready(rows)`` holds; returns the rows committed then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.is_alive():
        rows = _rows(db)
        if ready(rows):
            time.sleep(delay)
            assert proc.is_alive(), "the tuner ended before the moment to kill it"
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            return _rows(db)
        time.sleep(0.02)
    raise AssertionError("the tuner ended before the moment to kill it")


def test_kill_9_while_tuning_and_while_confirming_then_resume(tmp_path: Path) -> None:
    db, trials = tmp_path / "killed.db", 8
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    first = rng.randint(1, trials - 2)  # a random moment of the search
    kept = _kill_when(_start(db, trials), db, lambda rows: len(rows) >= first)
    # then during confirmation: the search is complete and a random number of its finalists'
    # re-measurements are in, at least two still to come (a timed delay could outlast a confirmation
    # of this tiny workload)
    at = rng.randint(0, 3 * ROUNDS - 2)
    kept2 = _kill_when(_start(db, trials), db,
                       lambda rows: sum(r[2] != CONFIRM_LABEL for r in rows) >= trials
                       and sum(r[2] == CONFIRM_LABEL for r in rows) >= at)
    assert set(kept) <= set(kept2), "rows lost by the kill"
    resumed = _start(db, trials)
    resumed.join(120)
    assert resumed.exitcode == 0
    assert set(kept2) <= set(_rows(db)), "rows lost by the kill"
    _finish_confirmation(db, trials, confirm=3)
    _assert_complete(db, trials, confirm=3)


def _script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DB with a few verified records (finalists confirmed), shared by the tests below."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    db = tmp_path_factory.mktemp("tuned") / "tuned.db"
    proc = _start(db, 5)
    proc.join(120)
    assert proc.exitcode == 0
    return db


def test_damaged_rows_are_quarantined_never_fatal(tmp_path: Path, tuned_db: Path) -> None:
    db = tmp_path / "damaged.db"
    shutil.copyfile(tuned_db, db)
    with TuningDatabase(db) as d:
        best = d.best_per_workload()[0]
        n = d.count()
    raw = sqlite3.connect(db)  # the best config's every record: not JSON any more
    raw.execute("UPDATE measurements SET config = '{not json' WHERE config_key = ?",
                [_rows(db)[[r[0] for r in _rows(db)].index(best.id)][1]])
    raw.commit()
    raw.close()
    found = _script("db.py", "check", str(db), cwd=tmp_path)
    assert found.returncode == 1 and f"measurements {best.id}:" in found.stdout
    # bench skips them (one warning naming them) and uses the next config; tune of another
    # workload on the same DB works
    bench = _script("bench.py", "--db", str(db), "--repeat", "1", "--min-repeat-ms", "1", cwd=tmp_path)
    assert bench.returncode == 0, bench.stderr
    assert "unreadable row(s) skipped" in bench.stderr and f"measurements {best.id}" in bench.stderr
    tune = _script("tune.py", "--op", "add", "--shape", "64", "--trials", "2", "--strategy", "random",
                   "--confirm", "0", "--no-progress", "--db", str(db), cwd=tmp_path)
    assert tune.returncode == 0, tune.stderr
    repaired = _script("db.py", "repair", str(db), cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    assert _script("db.py", "check", str(db), cwd=tmp_path).returncode == 0
    with TuningDatabase(db) as d:
        moved = d.db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
        assert moved >= 1 and d.count(workload_key=best.workload_key) + moved == n and not d.skipped


def _read_only_mount_works() -> str:
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind /tmp /tmp && "
                            "mount -o remount,ro,bind /tmp && ! touch /tmp/.ro-probe"],
                           capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"no read-only bind mount here ({probe.stderr.strip()[:80]})"


def test_read_only_mount_compile_and_bench_read_tune_refuses(tmp_path: Path, tuned_db: Path) -> None:
    # chmod does not stop root: a real read-only mount (a user namespace's bind mount) does
    why = _read_only_mount_works()
    if why:
        pytest.skip(why)
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copyfile(tuned_db, ro / "shared.db")
    before = {p.name: p.read_bytes() for p in ro.iterdir()}
    py, scripts = sys.executable, ROOT / "scripts"
    inner = (f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} && cd {ro} && "
             f"{py} {scripts}/bench.py --db shared.db --repeat 1 --min-repeat-ms 1; echo bench=$?; "
             f"{py} {scripts}/compile.py --model zoo:mlp --db shared.db; echo compile=$?; "
             f"{py} {scripts}/db.py check shared.db; echo check=$?; "
             f"{py} {scripts}/tune.py --op {OP} --shape {SHAPE} --trials 9 --db shared.db --no-progress; "
             "echo tune=$?")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", inner], capture_output=True, text=True, timeout=180)
    said = out.stdout + out.stderr
    assert all(f"{what}=0" in out.stdout for what in ("bench", "compile", "check")), said
    assert "tune=2" in out.stdout, said
    errors = [ln for ln in out.stderr.splitlines() if ln.strip() and "WARNING: no tuned schedule" not in ln]
    assert errors == ["error: shared.db is read-only (the file or its directory); tuning needs a writable "
                      "database (compile and bench can read this one as it is)"]
    assert {p.name: p.read_bytes() for p in ro.iterdir()} == before


def test_nearest_compatible_target_records(tmp_path: Path, tuned_db: Path) -> None:
    from autotune.target import cpu_target, make_target, nearest_records_target

    here = cpu_target()
    older = make_target("cpu", {**here.fingerprint, "compiler": "gcc (old) 9.1.0"})
    other_isa = make_target("cpu", {**here.fingerprint, "isa": ["sse4_2"], "compiler": "gcc 8"})
    db = tmp_path / "moved.db"
    with TuningDatabase(tuned_db, readonly=True) as src, TuningDatabase(db) as d:
        for w in src.workloads():
            d.add_workload(w["key"], w["name"], w["description"], w["flops"])
        recs = src.measurements()
        for t in (older, other_isa):
            d.add_target(t.key, t.kind, t.fingerprint)
        from dataclasses import replace

        d.add_measurements([replace(r, target_key=older.key) for r in recs])
        d.add_measurements([replace(r, target_key=other_isa.key) for r in recs + recs])  # more, not ours
        chosen, note = nearest_records_target(d, here)
        assert chosen.key == older.key and chosen.fingerprint == here.fingerprint
        assert "nearest compatible target" in note and "gcc (old) 9.1.0" in note
        assert nearest_records_target(d, older) == (older, "")
    bench = _script("bench.py", "--db", str(db), "--repeat", "1", "--min-repeat-ms", "1", cwd=tmp_path)
    assert bench.returncode == 0 and "nearest compatible target" in bench.stdout, bench.stderr
    exact = _script("bench.py", "--db", str(db), "--exact-target", cwd=tmp_path)
    assert exact.returncode == 2 and "no verified records for this machine" in exact.stderr


def test_db_script_export_import_merge_and_bad_input(tmp_path: Path, tuned_db: Path) -> None:
    with TuningDatabase(tuned_db, readonly=True) as d:
        n = d.count()
    out = tmp_path / "all.jsonl"
    assert _script("db.py", "export", str(tuned_db), str(out), cwd=tmp_path).returncode == 0
    copy = tmp_path / "copy.db"
    imported = _script("db.py", "import", str(copy), str(out), cwd=tmp_path)
    assert imported.returncode == 0 and f"{n} new measurements" in imported.stdout
    merged = _script("db.py", "merge", str(copy), str(tuned_db), cwd=tmp_path)
    assert merged.returncode == 0 and "0 new measurements" in merged.stdout  # nothing twice
    with TuningDatabase(copy, readonly=True) as d:
        assert d.count() == n
    for args in (["check", str(tmp_path / "none.db")], ["export", str(tuned_db), str(tmp_path / "no" / "x")],
                 ["import", str(copy), str(tmp_path / "none.jsonl")], ["frob"]):
        bad = _script("db.py", *args, cwd=tmp_path)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, (args, bad.stderr)
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "no").exists()


def test_records_travel_gzipped_and_a_bad_file_leaves_no_database(tmp_path: Path, tuned_db: Path) -> None:
    with TuningDatabase(tuned_db, readonly=True) as d:
        n = d.count()
    packed = tmp_path / "records.jsonl.gz"
    assert _script("db.py", "export", str(tuned_db), str(packed), cwd=tmp_path).returncode == 0
    assert packed.read_bytes()[:2] == b"\x1f\x8b"  # compressed because of its name
    fresh = tmp_path / "fresh.db"
    done = _script("db.py", "import", str(fresh), str(packed), cwd=tmp_path)
    assert done.returncode == 0 and f"{n} new measurements" in done.stdout
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])  # a download cut short
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 4)
    for bad_file in (cut, garbage):
        target = tmp_path / f"from_{bad_file.stem}.db"
        bad = _script("db.py", "import", str(target), str(bad_file), cwd=tmp_path)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert not list(tmp_path.glob(f"{target.name}*")), "a failed import left a database behind"
    with TuningDatabase(fresh, readonly=True) as d:
        assert d.count() == n
