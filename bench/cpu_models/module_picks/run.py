"""Do the stored module picks make the compiled model faster? Two copies of a tuning database: one
without module picks, one with the picks ``tune.py --model`` stores at its end (``store_picks``,
K best records per task). The model compiled from each is checked against onnxruntime and the two
modules and onnxruntime are timed in interleaved rounds in one process.

    python bench/cpu_models/module_picks/run.py MODEL DB OUT.json [K] [ROUNDS]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interleaved import check_and_time  # noqa: E402

from autotune.cli.model import build_module, chosen_form, load  # noqa: E402
from autotune.graph.rerank import store_picks  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    k = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    target, model = cpu_target(), load(spec, [])
    tmp = Path(tempfile.mkdtemp())
    without, with_picks = tmp / "without.db", tmp / "with.db"
    shutil.copy(db_path, without)
    TuningDatabase(without).close()  # a writer brings an older file up to date
    con = sqlite3.connect(without)
    con.execute("DELETE FROM module_picks")
    con.commit()
    con.close()
    shutil.copy(without, with_picks)
    with TuningDatabase(with_picks) as db:
        prepared = chosen_form(model, target, db, argparse.Namespace(winograd=None, layout="NHWC"))
        done = store_picks(prepared, target, db, k)
    labels = {t.key: t.label for t in prepared.tasks}
    modules = {}
    for name, path in (("best_records", without), ("module_picks", with_picks)):
        with TuningDatabase(path, readonly=True) as db:
            modules[name] = build_module(model, target, db, "NHWC")
    shutil.rmtree(tmp)
    assert modules["module_picks"].summary.picked == done.changed
    runs = {k: m.executable for k, m in modules.items()}
    done_ab = check_and_time(model, modules["best_records"].graph, runs, rounds)
    errors, times = done_ab["max_abs_err"], done_ab["times"]
    med = {name: float(np.median(v)) for name, v in times.items()}
    ratio = [a / b for a, b in zip(times["module_picks"], times["best_records"])]
    result = {
        "model": spec, "db": db_path, "k": k, "rounds": rounds,
        "runner_ups": done.changed, "tasks_compared": len(done.rows),
        "rerank_s": round(done.seconds, 2),
        "whole_module_check": None if done.module_s is None else {
            "best_records_ms": round(done.module_s[0] * 1e3, 4),
            "runner_ups_ms": round(done.module_s[1] * 1e3, 4), "per_round_ratio": round(done.module_s[2], 4)},
        "max_abs_err": errors,
        "median_ms": {name: round(v * 1e3, 4) for name, v in med.items()},
        "picks_over_best_records_per_round_median": round(float(np.median(ratio)), 4),
        "onnxruntime_over_best_records": round(med["onnxruntime"] / med["best_records"], 4),
        "onnxruntime_over_module_picks": round(med["onnxruntime"] / med["module_picks"], 4),
        "rounds_ms": {name: [round(x * 1e3, 4) for x in v] for name, v in times.items()},
        "picks": [{"task": labels[p["workload_key"]], "runner_up": p["config_key"] != p["best_config_key"],
                   "module_ms": round(p["module_s"] * 1e3, 4),
                   "best_module_ms": round(p["best_module_s"] * 1e3, 4)} for p in done.rows],
    }
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({key: result[key] for key in (
        "runner_ups", "whole_module_check", "median_ms", "picks_over_best_records_per_round_median",
        "onnxruntime_over_best_records", "onnxruntime_over_module_picks")}))


if __name__ == "__main__":
    main()
