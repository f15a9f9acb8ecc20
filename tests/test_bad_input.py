"""The bad-input contract of tune/compile/bench: one stderr line naming the problem, exit status 2,
nothing written. The cases are bench/faults/bad_inputs.py's (which runs every one as a subprocess);
here they run in-process through each tool's main(argv), a few as real subprocesses, plus a real
Ctrl-C (SIGINT to the process group) of a running tune and the names that must reach C cleanly."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.cli import bench, tune
from autotune.cli import compile as compile_cli
from autotune.cli.limits import available_memory
from schedules.space import divisors

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "bench" / "faults" / "bad_inputs.py")
faults = importlib.util.module_from_spec(_spec)
sys.modules["bad_inputs"] = faults  # (dataclasses look their module up there)
_spec.loader.exec_module(faults)

MAINS = {"tune": tune.main, "compile": compile_cli.main, "bench": bench.main}
# need a DB with measurements of this machine (the subprocess suite tunes one; here it is left out)
NEEDS_TUNED_ROWS = {"bench: DB with records of another machine only"}
IN_PROCESS = [c for c in faults.all_cases() if c.tool in MAINS and c.name not in NEEDS_TUNED_ROWS]
SUBPROCESS = ["tune: seed -1", "tune: shape 3000000000,1,1", "compile: missing DB",
              "bench --model: truncated file", "bench_search: tuner options not JSON"]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's fixtures without a tuning run: tuned.db is a valid DB with no rows (every case
    that names it is refused before its rows matter)."""
    where = faults.make_fixtures(tmp_path_factory.mktemp("fixtures"), tuned=False)
    shutil.copyfile(where / "schema_only.db", where / "tuned.db")
    return where


def _copy(fixtures: Path, tmp_path: Path) -> Path:
    where = tmp_path / "case"
    shutil.copytree(fixtures, where)
    return where


@pytest.mark.parametrize("case", IN_PROCESS, ids=lambda c: c.name)
def test_bad_input_in_process(case, fixtures: Path, tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    if case.needle == "memory" and available_memory() > 256 * 2**30:
        pytest.skip("this machine could hold the arrays: the case would tune them")
    where = _copy(fixtures, tmp_path)
    monkeypatch.chdir(where)
    before = faults.snapshot(where)
    with pytest.raises(SystemExit) as info:
        MAINS[case.tool](list(case.args))
    out, err = capsys.readouterr()
    problems = faults.check_result(info.value.code, out, err, faults.changes(before, faults.snapshot(where)),
                                   case.needle)
    assert not problems, f"{problems}: {err.strip()[-400:]}"


@pytest.mark.parametrize("name", SUBPROCESS)
def test_bad_input_as_a_process(name: str, fixtures: Path, tmp_path: Path) -> None:
    case = next(c for c in faults.all_cases() if c.name == name)
    result = faults.run_case(case, fixtures, tmp_path)
    assert result["ok"], result


def test_the_suite_has_at_least_100_distinct_cases() -> None:
    cases = faults.all_cases()
    assert len(cases) >= 100 and len({c.name for c in cases}) == len(cases)
    assert len({(c.tool, c.args) for c in cases}) == len(cases)
    assert {c.tool for c in cases} >= {"tune", "compile", "bench"}


def test_check_result_catches_each_breach() -> None:
    ok = faults.check_result(2, "", "error: bad seed\n", [], "seed")
    assert ok == []
    assert faults.check_result(1, "", "error: bad seed\n", [], "seed")  # exit status
    assert faults.check_result(2, "", "Traceback\n  x\nValueError: seed\n", [], "seed")  # lines
    assert faults.check_result(2, "", "error: bad shape\n", [], "seed")  # names another problem
    assert faults.check_result(2, "", "error: bad seed\n", ["created t.db"], "seed")  # wrote
    assert faults.check_result(2, "progress\n", "error: bad seed\n", [], "seed")  # stdout


def test_ctrl_c_during_tune_is_one_line_and_a_rerun_resumes(tmp_path: Path) -> None:
    db, trials = tmp_path / "t.db", 10
    r, seen = faults.interrupt_tune(db, trials)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 130 and len(lines) == 1 and "rerun" in lines[0], r.stderr
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    kept = con.execute("select count(*) from measurements").fetchone()[0]
    con.close()
    assert seen <= kept < trials
    rerun = subprocess.run(r.args, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    con = sqlite3.connect(db)
    total, distinct = con.execute("select count(*), count(distinct config_key) from measurements").fetchone()
    con.close()
    assert total == distinct == trials


def test_a_non_ascii_graph_name_compiles_and_runs(fixtures: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from onnx import helper

    model = faults._onnx_model([helper.make_node("Relu", ["x"], ["y"])], [faults._vi("x", [3, 5])],
                               [faults._vi("y", [3, 5])], name="模型 «ä»")
    path = tmp_path / "模型.onnx"
    path.write_bytes(model.SerializeToString())
    db = tmp_path / "t.db"
    shutil.copyfile(fixtures / "schema_only.db", db)
    assert compile_cli.main(["--model", str(path), "--db", str(db), "--check"]) == 0
    out = capsys.readouterr().out
    assert "check vs" in out and " ok" in out and "entry point model_" in out


def test_divisors_come_from_the_factorisation() -> None:
    for n in [1, 2, 12, 97, 360, 1024, 3 * 7 * 7 * 11, 999_983]:
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    t0 = time.perf_counter()
    assert len(divisors(3_000_000_000)) == 200 and divisors(2_147_483_647) == [1, 2_147_483_647]
    assert time.perf_counter() - t0 < 0.5
