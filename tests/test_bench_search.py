"""scripts/bench_search.py. Replay mode: runs spread over worker processes give the same results
as one process, more workloads can join the transfer pool, and a workload the replay set lacks is
refused by name. Real mode: each strategy's fastest configs are measured again, interleaved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "bench_search.py")


def bench(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, SCRIPT, "--workloads", "dense_bias_relu", "--seeds", "2", "--first-seed", "3",
           "--strategies", "random,xgb", "--curve", "8", "--quiet", "--png", str(tmp_path / f"{name}.png"),
           "--json", str(out), "--tuner-options", '{"chains": 16, "sa_steps": 6}', *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_parallel_runs_match_serial_runs(tmp_path: Path) -> None:
    serial = bench(tmp_path, "serial")
    parallel = bench(tmp_path, "parallel", "--jobs", "2")
    key = [(r["strategy"], r["seed"], r["trials_to_target"], r["costs"]) for r in serial["runs"]]
    assert [(r["strategy"], r["seed"], r["trials_to_target"], r["costs"]) for r in parallel["runs"]] == key
    assert sorted({r["seed"] for r in serial["runs"]}) == [3, 4]
    assert all(r["trials_to_target"] is not None for r in serial["runs"]), "every run reaches 95%"
    medians = serial["summary"]["medians"]["overall"]
    assert set(medians) == {"random", "xgb", "random_exact"} and all(v > 0 for v in medians.values())


def test_tuner_options_that_are_not_a_json_object_are_refused_at_once() -> None:
    for bad, says in (("{bad", "not JSON"), ("[1]", "a JSON object is needed")):
        r = subprocess.run([sys.executable, SCRIPT, "--real", "--tuner-options", bad],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_unknown_workload_is_refused_by_name() -> None:
    r = subprocess.run([sys.executable, SCRIPT, "--workloads", "matmul;nope", "--seeds", "1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0 and "no replay workload nope" in r.stderr and "matmul[62,136,67]" in r.stderr


def test_transfer_extra_adds_the_other_workloads_of_a_records_file(tmp_path: Path) -> None:
    replay = str(ROOT / "tests" / "data" / "replay_cpu.jsonl.gz")
    doc = bench(tmp_path, "extra", "--strategies", "xgb+transfer", "--transfer-extra", replay)
    # the benchmark's own workload is not transfer data for itself; the other four are
    assert len(doc["transfer_extra"]) == 4
    assert not any(label.startswith("dense_bias_relu") for label in doc["transfer_extra"])
    assert {r["strategy"] for r in doc["runs"]} == {"xgb+transfer"}
    assert all(r["trials_to_target"] is not None for r in doc["runs"])


def test_real_mode_re_measures_each_strategys_finalists(tmp_path: Path) -> None:
    out = tmp_path / "real.json"
    cmd = [sys.executable, SCRIPT, "--real", "--shape", "24,40,32", "--strategies", "random,xgb",
           "--trials", "6", "--random-trials", "8", "--remeasure", "2", "--finalists", "2",
           "--db-dir", str(tmp_path / "dbs"), "--png", str(tmp_path / "real.png"), "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    results = json.loads(out.read_text())["results"]
    assert results["random"]["trials"] == 8 and results["xgb"]["trials"] == 6
    for name in ("random", "xgb"):
        rows = results[name]["remeasured"]
        assert len(rows) == 2 and all(len(row["rounds_gflops"]) == 2 for row in rows)
        assert all(g > 0 for row in rows for g in row["rounds_gflops"]), "every finalist runs again"
        assert results[name]["remeasured_best_gflops"] == max(row["gflops"] for row in rows)
    assert "finalists re-measured 2x interleaved" in r.stdout


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_search", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_search_median_is_exact() -> None:
    import numpy as np

    bs = _bench_module()
    assert bs.random_search_median([(10, 1)]) == 5  # P(hit within t) = t / 10
    assert bs.random_search_median([(7, 7)]) == 1
    assert bs.random_search_median([(10, 1), (2, 2)]) == 1  # (0.1 + 1) / 2 >= 0.5 at t = 1
    # against sampled runs: uniform orders of a space of 300 configs, 4 of them good
    rng = np.random.default_rng(0)
    hits = [int(np.flatnonzero(rng.permutation(300) < 4)[0]) + 1 for _ in range(20_000)]
    assert abs(np.median(hits) - bs.random_search_median([(300, 4)])) <= 2


def test_median_interval_brackets_the_pooled_median_and_narrows_with_more_runs() -> None:
    import numpy as np

    bs = _bench_module()
    assert bs.median_interval([[7, 7, 7], [7]]) == (7.0, 7.0)  # no spread, no interval
    rng = np.random.default_rng(1)
    few = [list(rng.geometric(1 / 40, 20)), list(rng.geometric(1 / 80, 20))]
    many = [list(rng.geometric(1 / 40, 400)), list(rng.geometric(1 / 80, 400))]
    lo_few, hi_few = bs.median_interval(few)
    lo_many, hi_many = bs.median_interval(many)
    assert lo_few <= np.median(np.concatenate(few)) <= hi_few
    assert lo_many <= np.median(np.concatenate(many)) <= hi_many
    assert hi_many - lo_many < (hi_few - lo_few) / 2
