"""The ``autotune`` command: subcommands, --version, -v/-q, and --json output that is only JSON on
stdout (so ``| jq`` works). Cost: about 10 s on two cores (three tiny tuning runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import autotune

ROOT = Path(__file__).resolve().parents[1]
AUTOTUNE = [sys.executable, "-m", "autotune"]
TINY = ["--op", "matmul", "--shape", "8,16,8", "--trials", "3", "--confirm", "0", "--batch-size", "3"]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTOTUNE, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_version_and_help_name_every_command() -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"autotune {autotune.__version__}"
    r = run("--help")
    assert r.returncode == 0
    for name in ("tune", "compile", "bench", "db", "report"):
        assert f"\n  {name} " in r.stdout
    r = run("tune", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: autotune tune")


def test_unknown_command_is_one_line_exit_2() -> None:
    r = run("frobnicate")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "invalid choice" in r.stderr


def test_json_alone_on_stdout_human_lines_on_stderr(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = run("tune", *TINY, "--db", str(db), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)  # the whole of stdout is one JSON document
    assert out["trials"] == 3 and out["db"] == str(db)
    assert "new measurements to" in r.stderr and "next: autotune bench" in r.stderr
    assert "trial" in r.stderr  # the progress bar
    # the same program through the script, without --json: the human lines on stdout
    script = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune.py"), *TINY, "--trials", "4",
                             "--db", str(db), "--no-progress"], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert script.returncode == 0 and "4 trials in DB (1 new" in script.stdout


def test_quiet_has_no_progress_bar_and_verbose_has_debug_lines(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    quiet = run("-q", "tune", *TINY, "--db", str(db), cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    # -v: the library's diagnostics on stderr, named by logger: one line per tuning batch
    loud = run("-v", "tune", *TINY, "--trials", "5", "--batch-size", "2", "--db", str(db), "--no-progress",
               cwd=tmp_path)
    head = "[autotune.tune] matmul[8,16,8]: batch"
    batches = [ln for ln in loud.stderr.splitlines() if ln.startswith(head)]
    assert loud.returncode == 0 and len(batches) == 1 and "5 of 5 trials in the DB" in batches[0], loud.stderr
    plain = run("db", "check", str(db), cwd=tmp_path)
    assert plain.returncode == 0 and "[autotune" not in plain.stderr
