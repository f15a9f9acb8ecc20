"""Tests for the records package: the SQLite tuning database."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from records import (
    SCHEMA_VERSION,
    ForeignDatabaseError,
    MeasurementRecord,
    RecordsError,
    SchemaVersionError,
    TuningDatabase,
    config_key,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
W1, W2, T1 = "w" * 16, "v" * 16, "t" * 16


def rec(
    config: dict,
    costs: tuple[float, ...] = (1.0,),
    *,
    workload: str = W1,
    error: str | None = None,
    verified: bool = True,
    **kw,
) -> MeasurementRecord:
    return MeasurementRecord(
        workload_key=workload,
        target_key=T1,
        config=config,
        steps=[{"op": "split", "axis": 0, "factor": config.get("tile", 1)}],
        costs=() if error else costs,
        error_kind=error,
        verified=verified,
        **kw,
    )


@pytest.fixture
def db(tmp_path: Path):
    with TuningDatabase(tmp_path / "tuning.db") as d:
        d.add_workload(W1, "matmul_64", {"op": "matmul", "n": 64}, 2 * 64**3)
        d.add_workload(W2, "conv", {"op": "conv2d"}, 1e6)
        d.add_target(T1, "cpu", {"isa": "avx2", "cores": 2})
        yield d


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# -- round trip and queries ---------------------------------------------------


def test_round_trip_preserves_every_field(db: TuningDatabase) -> None:
    good = rec(
        {"tile": 8, "unroll": True},
        (0.5, 0.7),
        build_s=1.25,
        tuner="random",
        space_version=3,
        created_at=123.5,
    )
    bad = rec({"tile": 3}, error="build_error", error_msg="nvcc: boom")
    ids = db.add_measurements([good, bad])

    got = db.measurements()
    assert [r.id for r in got] == ids and ids[0] < ids[1]
    assert got[0] == good and got[0].mean_s == pytest.approx(0.6)
    assert got[1].error_kind == "build_error" and got[1].error_msg == "nvcc: boom"
    assert got[1].costs == () and math.isinf(got[1].mean_s)
    assert got[1].created_at > 1e9  # 0 means "now" at insert time
    assert (
        db.count() == 2 and db.count(errors=True) == 1 and db.count(errors=False) == 1
    )
    assert db.count(workload_key=W2) == 0 and db.measurements(workload_key=W2) == []
    assert db.workload(W1) == {
        "key": W1,
        "name": "matmul_64",
        "description": {"op": "matmul", "n": 64},
        "flops": 2 * 64**3,
    }
    assert db.target(T1) == {
        "key": T1,
        "kind": "cpu",
        "fingerprint": {"isa": "avx2", "cores": 2},
    }
    assert [w["key"] for w in db.workloads()] == sorted([W1, W2])
    assert len(db.targets()) == 1 and db.workload("nope") is None


def test_add_workload_is_idempotent_upsert(db: TuningDatabase) -> None:
    db.add_workload(W1, "renamed", {"op": "matmul"}, 1.0)
    db.add_workload(W1, "renamed", {"op": "matmul"}, 1.0)
    assert len(db.workloads()) == 2 and db.workload(W1)["name"] == "renamed"


def test_invalid_records_are_rejected(db: TuningDatabase) -> None:
    with pytest.raises(RecordsError, match="costs"):
        db.add_measurement(rec({"tile": 1}, (float("nan"),)))
    with pytest.raises(RecordsError, match="add the workload"):
        db.add_measurement(rec({"tile": 1}, workload="unknown"))
    # a bad record in a batch means none of the batch is stored
    with pytest.raises(RecordsError):
        db.add_measurements([rec({"tile": 2}), rec({"tile": 1}, workload="unknown")])
    assert db.count() == 0


def test_best_picks_fastest_verified_success(db: TuningDatabase) -> None:
    db.add_measurements(
        [
            rec({"tile": 1}, (3.0, 3.0)),
            rec(
                {"tile": 2}, (0.1,), verified=False
            ),  # fastest but wrong answer unchecked
            rec({"tile": 3}, error="runtime_crash"),
            rec({"tile": 4}, (2.0, 1.0)),
            rec({"tile": 5}, (9.0,), workload=W2),
        ]
    )
    best = db.best(W1, T1)
    assert best is not None and best.config == {"tile": 4} and best.mean_s == 1.5
    per = db.best_per_workload()
    assert {(r.workload_key, r.config["tile"]) for r in per} == {(W1, 4), (W2, 5)}
    assert db.best_per_workload(target_key="other") == []
    assert db.best(W1, "other") is None


def test_a_config_measured_several_times_ranks_by_its_median_record(db: TuningDatabase) -> None:
    # tile 1: one lucky run (1.0) and two slower ones; tile 2: steady 1.2; tile 3: measured once
    db.add_measurements(
        [
            rec({"tile": 1}, (1.0,)),
            rec({"tile": 2}, (1.2,)),
            rec({"tile": 3}, (1.3,)),
            rec({"tile": 1}, (1.5,)),
            rec({"tile": 2}, (1.25,)),
            rec({"tile": 1}, (1.4,)),
            rec({"tile": 2}, error="run_timeout"),  # a failed repeat does not count
            rec({"tile": 3}, (5.0,), workload=W2),
        ]
    )
    best = db.best(W1, T1)
    assert best is not None and best.config == {"tile": 2} and best.mean_s == 1.25  # upper median of 2
    assert [(r.config["tile"], r.mean_s) for r in db.top(W1, T1, 5)] == [(2, 1.25), (3, 1.3), (1, 1.4)]
    assert {(r.workload_key, r.config["tile"], r.mean_s) for r in db.best_per_workload(T1)} == {
        (W1, 2, 1.25), (W2, 3, 5.0)}


def test_best_is_none_without_verified_success(db: TuningDatabase) -> None:
    db.add_measurements(
        [
            rec({"tile": 1}, (0.1,), verified=False),
            rec({"tile": 2}, error="run_timeout"),
            rec({"tile": 3}, error="wrong_answer", verified=True),
        ]
    )
    assert db.best(W1, T1) is None
    assert db.best_per_workload() == []


def test_resume_keys_cover_all_attempts(tmp_path: Path, db: TuningDatabase) -> None:
    assert config_key({"a": 1, "b": [1, 2]}) == config_key({"b": [1, 2], "a": 1})
    assert config_key({"a": 1}) != config_key({"a": 2})
    configs = [{"tile": 1}, {"tile": 2}, {"tile": 3}]
    db.add_measurements(
        [
            rec(configs[0]),
            rec(configs[1], error="build_error"),
            rec(configs[2], workload=W2),
        ]
    )
    expected = {config_key(configs[0]), config_key(configs[1])}
    assert db.measured_config_keys(W1, T1) == expected
    with TuningDatabase(tmp_path / "tuning.db", create=False) as again:
        assert again.measured_config_keys(W1, T1) == expected


# -- JSONL and merge ----------------------------------------------------------


def _fill(db: TuningDatabase) -> None:
    db.add_measurements(
        [
            rec({"tile": t}, (0.1 * t + 0.01, 0.1 * t), created_at=1000.0 + t)
            for t in range(1, 6)
        ]
        + [
            rec({"tile": 9}, error="invalid_schedule", created_at=2000.0),
            rec({"tile": 2}, (0.5,), workload=W2, created_at=3000.0),
        ]
    )


def test_export_import_round_trip(tmp_path: Path, db: TuningDatabase) -> None:
    _fill(db)
    out = tmp_path / "dump.jsonl"
    assert db.export_jsonl(out) == 2 + 1 + 7
    types = [json.loads(line)["type"] for line in out.read_text().splitlines()]
    assert types == ["workload"] * 2 + ["target"] + ["measurement"] * 7

    with TuningDatabase(tmp_path / "fresh.db") as fresh:
        assert fresh.import_jsonl(out) == 7
        assert fresh.best(W1, T1) == db.best(W1, T1) is not None
        assert fresh.best_per_workload() == db.best_per_workload()
        assert fresh.measurements() == db.measurements()
        assert fresh.workloads() == db.workloads()
        assert fresh.import_jsonl(out) == 0  # duplicates skipped
        assert fresh.count() == 7


def test_export_to_stream_and_import_from_stream(
    tmp_path: Path, db: TuningDatabase
) -> None:
    _fill(db)
    buf = io.StringIO()
    db.export_jsonl(buf)
    buf.seek(0)
    with TuningDatabase(tmp_path / "fresh.db") as fresh:
        assert fresh.import_jsonl(buf) == 7
        assert fresh.count(errors=True) == 1


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("{not json", "line 3"),
        ('{"type": "gizmo"}', "unknown type"),
        ('{"type": "measurement", "workload_key": "x"}', "missing field"),
        (
            json.dumps(
                {
                    "type": "measurement",
                    "workload_key": "nope",
                    "target_key": T1,
                    "config": {},
                    "steps": [],
                    "costs": [1.0],
                    "error_kind": None,
                    "created_at": 5.0,
                }
            ),
            "line 3",
        ),
    ],
)
def test_malformed_import_writes_nothing(
    tmp_path: Path, db: TuningDatabase, bad_line: str, reason: str
) -> None:
    _fill(db)
    src = tmp_path / "dump.jsonl"
    db.export_jsonl(src)
    lines = src.read_text().splitlines()
    lines.insert(2, bad_line)
    src.write_text("\n".join(lines) + "\n")
    with TuningDatabase(tmp_path / "fresh.db") as fresh:
        with pytest.raises(RecordsError, match=reason) as info:
            fresh.import_jsonl(src)
        assert "line 3" in str(info.value) and str(src) in str(info.value)
        assert fresh.count() == 0 and fresh.workloads() == [] and fresh.targets() == []


def test_merge_adds_only_new_rows_and_leaves_source_alone(
    tmp_path: Path, db: TuningDatabase
) -> None:
    _fill(db)
    dump = tmp_path / "dump.jsonl"
    db.export_jsonl(dump)
    other_path = tmp_path / "other.db"
    with TuningDatabase(other_path) as other:
        other.import_jsonl(dump)  # same 7 rows as db ...
        other.add_measurement(
            rec({"tile": 7}, (0.001,), created_at=4000.0)
        )  # ... plus a winner
    before = snapshot(other_path)

    assert db.merge(other_path) == 1
    assert db.merge(other_path) == 0
    assert db.count() == 8
    best = db.best(W1, T1)
    assert best is not None and best.config == {"tile": 7}
    assert snapshot(other_path) == before


def test_merge_rejects_foreign_and_missing(tmp_path: Path, db: TuningDatabase) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(ForeignDatabaseError):
        db.merge(text)
    with pytest.raises(RecordsError, match="does not exist"):
        db.merge(tmp_path / "missing.db")


# -- opening, validation, and safety ------------------------------------------


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()


def _wrong_app(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('app', 'someone-else')")
    conn.commit()
    conn.close()


def _text(path: Path) -> None:
    path.write_text("this is not a database\n" * 20)


@pytest.mark.parametrize("make", [_foreign_sqlite, _wrong_app, _text])
def test_foreign_file_is_refused_untouched(tmp_path: Path, make) -> None:
    path = tmp_path / "precious.db"
    make(path)
    before = snapshot(path)
    with pytest.raises(ForeignDatabaseError) as info:
        TuningDatabase(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    assert snapshot(path) == before


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    TuningDatabase(path).close()
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'",
        [str(SCHEMA_VERSION + 1)],
    )
    conn.commit()
    conn.close()
    before = snapshot(path)
    with pytest.raises(
        SchemaVersionError,
        match=rf"newer version \(schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION}\)",
    ):
        TuningDatabase(path)
    assert snapshot(path) == before


def test_create_false_requires_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(RecordsError, match="does not exist"):
        TuningDatabase(path, create=False)
    assert not path.exists()


def test_empty_file_gets_schema(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with TuningDatabase(path) as d:
        assert d.count() == 0
    conn = sqlite3.connect(path)
    assert dict(conn.execute("SELECT key, value FROM meta")) == {
        "app": "autotune-records",
        "schema_version": str(SCHEMA_VERSION),
    }
    conn.close()


def test_wal_mode_and_busy_timeout(db: TuningDatabase) -> None:
    conn = sqlite3.connect(db.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert db.db.execute("PRAGMA busy_timeout").fetchone()[0] == 30000


def test_two_handles_writing_alternately(tmp_path: Path, db: TuningDatabase) -> None:
    with TuningDatabase(db.path) as other:
        ids = []
        for i in range(6):
            writer = db if i % 2 == 0 else other
            ids.append(writer.add_measurement(rec({"tile": i}, (1.0 + i,))))
            assert db.count() == other.count() == i + 1
        assert len(set(ids)) == 6
        assert [r.config["tile"] for r in other.measurements()] == list(range(6))
        assert db.best(W1, T1) == other.best(W1, T1)


def test_measurement_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    script = textwrap.dedent(f"""
        import os, signal
        from records import MeasurementRecord, TuningDatabase
        db = TuningDatabase({str(path)!r})
        db.add_workload("w", "n", {{}}, 1.0)
        db.add_target("t", "cpu", {{}})
        db.add_measurement(MeasurementRecord("w", "t", {{"k": 1}}, [], (0.25,), None,
                                             verified=True))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, timeout=60, check=False
    )
    assert proc.returncode == -9
    with TuningDatabase(path, create=False) as d:
        best = d.best("w", "t")
        assert best is not None and best.costs == (0.25,)


def _sqlite_utils_cli() -> list[str]:
    probe = subprocess.run(
        [sys.executable, "-m", "sqlite_utils", "--version"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if probe.returncode == 0:
        return [sys.executable, "-m", "sqlite_utils"]
    exe = Path(sys.executable).with_name("sqlite-utils")
    return [
        str(exe) if exe.exists() else shutil.which("sqlite-utils") or "sqlite-utils"
    ]


def test_sqlite_utils_cli_reads_the_file(db: TuningDatabase) -> None:
    db.add_measurement(rec({"tile": 2}, (0.5,)))
    cli = _sqlite_utils_cli()
    tables = subprocess.run(
        [*cli, "tables", str(db.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = {t["table"] for t in json.loads(tables.stdout)}
    assert names == {"meta", "workloads", "targets", "measurements", "claims", "quarantine", "module_picks"}
    rows = subprocess.run(
        [*cli, "rows", str(db.path), "measurements"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (row,) = json.loads(rows.stdout)
    assert row["config_key"] == config_key({"tile": 2}) and row["mean_s"] == 0.5


# -- schema 2: claims, confirmed-first ranking, unreadable rows, migration, read-only ---------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_claims_respect_budget_owner_and_liveness(db: TuningDatabase) -> None:
    from records.owner import process_owner

    me = process_owner()
    other = f"{me.split(':')[0]}:{os.getppid()}:?"  # a live process of this host (our parent)
    assert db.claim(W1, T1, ["a", "b", "c"], other, budget=4) == ["a", "b", "c"]
    # a, b held by another live owner; budget 4 leaves room for one more config
    assert db.claim(W1, T1, ["a", "d", "e"], me, budget=4) == ["d"]
    db.add_measurements([rec({"tile": 1})], claimed_by=me)  # measured: counts against the budget
    assert db.claim(W1, T1, ["f"], me, budget=4) == []
    # the other owner's process ends: its claims are taken over at once, no expiry wait
    dead = f"{me.split(':')[0]}:{_dead_pid()}:?"
    db.release_claims(other)
    assert db.claim(W1, T1, ["a", "b"], dead) == ["a", "b"]
    assert db.claim(W1, T1, ["a", "b"], me) == ["a", "b"]
    # an expired claim of a live owner is taken over too
    assert db.claim(W1, T1, ["x"], other, ttl_s=-1.0) == ["x"]
    assert db.claim(W1, T1, ["x"], me) == ["x"]
    # a measured config is never granted again
    measured = config_key({"tile": 1})
    assert db.claim(W1, T1, [measured], other) == []
    assert db.release_claims(me) == 4 and db.claims() == []


def test_best_never_returns_a_config_missing_confirmations(db: TuningDatabase) -> None:
    from records import CONFIRM_LABEL

    lucky, steady = {"tile": 1}, {"tile": 2}
    db.add_measurements([rec(lucky, (0.5,)), rec(steady, (0.8,)), rec({"tile": 3}, (0.9,))])
    assert db.best(W1, T1).config == lucky
    # steady and tile 3 were confirmed, lucky's confirmations are missing (a killed run)
    db.add_measurements([rec(c, (t,), tuner=CONFIRM_LABEL) for c, t in ((steady, 0.8), ({"tile": 3}, 0.95))])
    assert db.best(W1, T1).config == steady
    assert [r.config["tile"] for r in db.top(W1, T1, 3)] == [2, 3, 1]
    assert [r.config for r in db.best_per_workload(T1)] == [steady]
    assert db.search_top(W1, T1, 1)[0].config == lucky  # the finalists stay as the search found them
    assert db.confirmations(W1, T1) == {config_key(steady): 1, config_key({"tile": 3}): 1}


def test_a_config_that_once_answered_wrong_or_crashed_is_never_the_best(db: TuningDatabase) -> None:
    """A kernel that passes some runs and fails one (a race) is not compiled, however fast; a
    build error or a timeout (the machine's, not the kernel's fault) does not disqualify."""
    from autotune.measure.errors import ErrorKind
    from records import CONFIRM_LABEL
    from records.views import UNTRUSTED_ERRORS

    # the ranking names the measurement pipeline's error kinds as strings (records stands alone)
    assert set(UNTRUSTED_ERRORS) == {ErrorKind.WRONG_ANSWER.value, ErrorKind.RUNTIME_CRASH.value}

    racy, crashy, slow_build, steady = {"tile": 1}, {"tile": 2}, {"tile": 3}, {"tile": 4}
    db.add_measurements([rec(racy, (0.1,)), rec(crashy, (0.2,)), rec(slow_build, (0.3,)),
                         rec(steady, (0.5,))])
    assert db.best(W1, T1).config == racy
    db.add_measurements([rec(racy, (), error="wrong_answer", tuner=CONFIRM_LABEL, verified=False),
                         rec(racy, (0.1,), tuner=CONFIRM_LABEL),
                         rec(crashy, (), error="runtime_crash", verified=False),
                         rec(slow_build, (), error="build_timeout", verified=False)])
    assert [r.config for r in db.top(W1, T1, 4)] == [slow_build, steady]
    assert db.best(W1, T1).config == slow_build
    view = db.db.execute("SELECT config FROM best_configs WHERE workload_key = ?", [W1]).fetchall()
    assert [json.loads(c) for (c,) in view] == [slow_build]


def test_a_schema_3_file_gets_the_ranking_that_leaves_out_failed_configs(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    with TuningDatabase(path) as d:
        d.add_workload(W1, "m", {"op": "matmul"}, 1.0)
        d.add_target(T1, "cpu", {"isa": ["avx2"]})
        d.add_measurements([rec({"tile": 1}, (0.1,)), rec({"tile": 1}, (), error="wrong_answer",
                                                          verified=False), rec({"tile": 2}, (0.2,))])
    raw = sqlite3.connect(path)
    raw.execute("DROP VIEW best_configs")
    raw.execute("""CREATE VIEW best_configs AS SELECT config, workload_key FROM measurements
                   WHERE error_kind IS NULL ORDER BY mean_s LIMIT 1""")  # the old rule, in effect
    raw.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    with TuningDatabase(path) as d:
        d.add_workload(W2, "c", {"op": "conv2d"}, 1.0)  # a write migrates the file
        assert d.best(W1, T1).config == {"tile": 2}
        (cfg,) = d.db.execute("SELECT config FROM best_configs WHERE workload_key = ?", [W1]).fetchone()
        assert json.loads(cfg) == {"tile": 2}
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION)


def test_record_spread() -> None:
    assert rec({}, (1.0, 1.5, 2.0)).spread == pytest.approx(1.0 / 1.5)
    assert rec({}, (1.0,)).spread == 0.0
    assert math.isinf(rec({}, error="timeout").spread)


def test_unreadable_rows_are_skipped_counted_and_named_once(db: TuningDatabase, caplog) -> None:
    ids = db.add_measurements([rec({"tile": i}, (0.1 * (i + 1),)) for i in range(4)])
    raw = sqlite3.connect(db.path)
    raw.execute("UPDATE measurements SET config = '{not json' WHERE id = ?", [ids[0]])
    raw.execute("UPDATE measurements SET costs = 'oops' WHERE id = ?", [ids[2]])
    raw.execute("UPDATE workloads SET description = '[' WHERE key = ?", [W2])
    raw.commit()
    raw.close()
    with caplog.at_level("WARNING", logger="records"):
        assert db.best(W1, T1).config == {"tile": 1}  # the fastest row is the unreadable one
        assert [r.id for r in db.measurements()] == [ids[1], ids[3]]
        assert [w["key"] for w in db.workloads()] == [W1]
    warnings = [r for r in caplog.records if r.name == "records"]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert f"measurements {ids[0]}" in text and f"measurements {ids[2]}" in text and f"workloads {W2}" in text
    assert len(db.skipped) == 3

    from records.maintenance import check, repair

    report = check(db)
    assert not report.ok and {(t, k) for t, k, _ in report.unreadable} == set(db.skipped)
    assert repair(db) == {"quarantined": 3, "stale_claims": 0}
    after = check(db)
    assert after.ok and after.quarantined == 3 and [r.id for r in db.measurements()] == [ids[1], ids[3]]
    kept = sqlite3.connect(db.path).execute(
        "SELECT row FROM quarantine WHERE source_table = 'measurements' ORDER BY source_key").fetchall()
    assert json.loads(kept[0][0])["config"] == "{not json"  # moved verbatim


def _schema_1_file(path: Path) -> None:
    with TuningDatabase(path) as d:
        d.add_workload(W1, "m", {"op": "matmul"}, 1.0)
        d.add_target(T1, "cpu", {"isa": ["avx2"]})
        d.add_measurements([rec({"tile": 1}, (0.2,)), rec({"tile": 2}, (0.1,))])
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE claims")
    raw.execute("DROP TABLE quarantine")
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()


def test_schema_1_file_is_read_as_is_and_migrated_on_write(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _schema_1_file(path)
    before = snapshot(path)
    with TuningDatabase(path, readonly=True) as d:
        assert d.best(W1, T1).config == {"tile": 2} and d.claims() == []
    assert snapshot(path) == before
    with TuningDatabase(path) as d:
        assert d.count() == 2 and d.claim(W1, T1, ["k"], "h:1:?") == ["k"]
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION)


def test_readonly_open_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    _schema_1_file(path)
    with TuningDatabase(path, readonly=True) as d:
        with pytest.raises(RecordsError, match="read-only"):
            d.add_measurement(rec({"tile": 9}))
    with pytest.raises(RecordsError, match="does not exist"):
        TuningDatabase(tmp_path / "none.db", readonly=True)


# -- module picks ---------------------------------------------------------------


def pick(workload: str = W1, config: str = "c2", best: str = "c1", at: float = 100.0, **kw) -> dict:
    return {"module_key": "m" * 64, "target_key": T1, "workload_key": workload, "config_key": config,
            "best_config_key": best, "module_s": 1e-4, "best_module_s": 2e-4, "model": "net",
            "created_at": at, **kw}


def test_module_picks_keep_the_newer_pick_of_each_task(db: TuningDatabase) -> None:
    assert db.put_module_picks([pick(), pick(W2, "d2", "d1")]) == 2
    assert db.put_module_picks([pick(config="old", at=50.0), pick(W2, "new", "d1", at=150.0)]) == 1
    got = {p["workload_key"]: p["config_key"] for p in db.module_picks("m" * 64, T1)}
    assert got == {W1: "c2", W2: "new"}
    assert db.module_picks("x" * 64, T1) == [] and len(db.module_picks()) == 2
    from records.summary import summarize_database, summary_lines

    lines = summary_lines(summarize_database(db))
    assert any(line.startswith("  net [mmmmmmmmmmmm] on cpu")
               and line.endswith("2 tasks compared, 2 take a runner-up") for line in lines)
    with pytest.raises(RecordsError, match="module_s"):
        db.put_module_picks([pick(module_s=float("nan"))])
    with pytest.raises(RecordsError, match="best_config_key"):
        db.put_module_picks([{k: v for k, v in pick().items() if k != "best_config_key"}])


def test_an_unreadable_module_pick_is_skipped_named_by_check_and_moved_by_repair(db: TuningDatabase) -> None:
    from records.maintenance import check, repair

    db.put_module_picks([pick(), pick(W2, "d2", "d1")])
    raw = sqlite3.connect(db.path)
    raw.execute("UPDATE module_picks SET module_s = 'fast' WHERE workload_key = ?", [W2])
    raw.commit()
    (rowid,) = raw.execute("SELECT rowid FROM module_picks WHERE workload_key = ?", [W2]).fetchone()
    raw.close()
    assert [p["workload_key"] for p in db.module_picks()] == [W1]
    assert ("module_picks", str(rowid)) in db.skipped
    report = check(db)
    assert not report.ok and [(t, k) for t, k, _ in report.unreadable] == [("module_picks", str(rowid))]
    assert report.rows["module_picks"] == 2
    assert repair(db) == {"quarantined": 1, "stale_claims": 0}
    assert check(db).ok and [p["workload_key"] for p in db.module_picks()] == [W1]


def test_module_picks_travel_with_export_import_and_merge(tmp_path: Path, db: TuningDatabase) -> None:
    db.add_measurements([rec({"tile": 1}, (0.2,))])
    db.put_module_picks([pick(), pick(W2, "d2", "d1")])
    db.export_jsonl(tmp_path / "out.jsonl.gz")
    with TuningDatabase(tmp_path / "b.db") as b:
        b.import_jsonl(tmp_path / "out.jsonl.gz")
        assert b.module_picks() == db.module_picks()
    with TuningDatabase(tmp_path / "c.db") as c:
        c.put_module_picks([pick(config="newer", at=200.0)])
        assert c.merge(db.path) == 1
        assert {p["workload_key"]: p["config_key"] for p in c.module_picks()} == {W1: "newer", W2: "d2"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"type": "module_pick", **pick(module_s="fast")}) + "\n")
    with pytest.raises(RecordsError, match=r"bad.jsonl: line 1: field 'module_s'"):
        db.import_jsonl(bad)


def test_a_schema_4_file_gets_module_picks_on_write_and_reads_without(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    with TuningDatabase(path) as d:
        d.add_workload(W1, "m", {"op": "matmul"}, 1.0)
        d.add_target(T1, "cpu", {"isa": ["avx2"]})
        d.add_measurements([rec({"tile": 1}, (0.1,))])
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE module_picks")
    raw.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    with TuningDatabase(path, readonly=True) as d:
        assert d.module_picks() == [] and d.best(W1, T1).config == {"tile": 1}
    with TuningDatabase(path) as d:
        d.put_module_picks([pick()])
        assert len(d.module_picks()) == 1
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION)
