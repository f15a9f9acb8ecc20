"""Does timing graph tasks with every operand cold (inputs and outputs flushed) rank configs as the
module does better than timing with cold weights only (what tuning does)? Per task: its k best
records timed in the module (variant j = every task's j-th record, profiled call by call, three
rounds), then isolated with cold weights and isolated with everything cold (three rounds each).

    python bench/cpu_models/cold_activations/run.py MODEL DB K OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.aligned import aligned_empty  # noqa: E402
from autotune.graph.compiler import _build, choose_schedule, load_model, prepare, runner_up_schedules  # noqa: E402
from autotune.graph.feeds import random_inputs  # noqa: E402
from autotune.graph.runtime import check_inputs, make_backend  # noqa: E402
from autotune.measure import Builder, CpuRunner, RunOptions  # noqa: E402
from autotune.search.measure_batch import WorkloadMeasurer  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402
from schedules import make_space  # noqa: E402

ROUNDS = 3


def in_model(prepared, alts: dict, target) -> dict:  # noqa: ANN001
    """(task key, j) -> seconds per call of the task's j-th record inside the module, per round."""
    choices = [alts[t.key][0] for t in prepared.tasks]
    backend = make_backend(target)
    g = prepared.graph
    arrays = check_inputs(g, random_inputs(g, np.random.default_rng(0)))
    outs = [aligned_empty(g.types[o].shape, g.types[o].dtype) for o in g.outputs]
    depth = max(len(a) for a in alts.values())
    times: dict = {}
    for _ in range(ROUNDS):
        for j in range(depth):
            variant = [dataclasses.replace(alts[c.task.key][min(j, len(alts[c.task.key]) - 1)], task=c.task)
                       for c in choices]
            built = _build(prepared, variant, backend)
            med = np.median(built.executable.profile(arrays, outs, 10, len(prepared.calls)), axis=0)
            per: dict = {}
            for i, call in enumerate(prepared.calls):
                task = prepared.tasks[call.task]
                per[task.key] = per.get(task.key, 0.0) + float(med[i]) / task.weight
            for key, s in per.items():
                if j < len(alts[key]):
                    times.setdefault((key, j), []).append(s)
    return times


def isolated(wl, configs: list[dict], target, runner, builder, everything_cold: bool) -> list[float]:  # noqa: ANN001
    """Median seconds of each config timed alone: weights flushed before each call (tuning's way),
    or every input and output flushed."""
    space = make_space(wl, target)
    own = target.backend.run_options
    if everything_cold:
        n = len(wl.inputs) + len(wl.outputs)
        def every(w, o):  # noqa: ANN001, ANN202 - the backend's run_options, every operand cold
            return dataclasses.replace(o, cold_inputs=tuple(range(n)), repeat=7)

        target.backend.run_options = every
    try:
        m = WorkloadMeasurer(wl, target, builder, runner, RunOptions(repeat=7))
    finally:
        target.backend.run_options = own
    runs: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    for _ in range(ROUNDS):
        for i, t in enumerate(m.measure(configs, [space.steps(c) for c in configs])):
            runs[i].append(float(np.median(t.costs)) if t.costs and not t.error_kind else np.inf)
    return [float(np.median(runs[i])) for i in range(len(configs))]


def main() -> None:
    model, db_path, k, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    target = cpu_target()
    prepared = prepare(load_model(model), "NHWC")
    with TuningDatabase(db_path) as db:
        first = {}
        for task in prepared.tasks:
            first.setdefault(task.key, choose_schedule(task, target, db))
        alts = {key: [c] + runner_up_schedules(c.task, target, db, k) for key, c in first.items()}
    times = in_model(prepared, alts, target)
    runner, builder = CpuRunner(), Builder(workers=2)
    rows = []
    for key, a in alts.items():
        if len(a) < 3:
            continue
        configs = [c.config for c in a]
        inside = [float(np.median(times[(key, j)])) for j in range(len(configs))]
        weights = isolated(a[0].task.workload, configs, target, runner, builder, False)
        every = isolated(a[0].task.workload, configs, target, runner, builder, True)
        best = min(inside)
        row = {"task": a[0].task.label, "calls": a[0].task.weight,
               "in_model_ms": [x * 1e3 for x in inside], "cold_weights_ms": [x * 1e3 for x in weights],
               "all_cold_ms": [x * 1e3 for x in every],
               "rho_cold_weights": float(spearmanr(inside, weights)[0]),
               "rho_all_cold": float(spearmanr(inside, every)[0]),
               "regret_cold_weights": inside[int(np.argmin(weights))] / best,
               "regret_all_cold": inside[int(np.argmin(every))] / best}
        rows.append(row)
        print(f"{row['task'][:60]:60s} rho {row['rho_cold_weights']:+.2f} / {row['rho_all_cold']:+.2f}  "
              f"regret {row['regret_cold_weights']:.3f} / {row['regret_all_cold']:.3f}  first record: "
              f"in the module {inside[0] * 1e3:.3f} ms, "
              f"alone {weights[0] * 1e3:.3f} / {every[0] * 1e3:.3f} ms",
              flush=True)
    runner.close()

    def picked(col: str) -> float:
        return sum(r["calls"] * r["in_model_ms"][int(np.argmin(r[col]))] for r in rows)

    summary = {"in_model_ms_of_picks": {"cold_weights": picked("cold_weights_ms"),
                                        "all_cold": picked("all_cold_ms"),
                                        "best": sum(r["calls"] * min(r["in_model_ms"]) for r in rows)},
               "median_rho": {"cold_weights": float(np.nanmedian([r["rho_cold_weights"] for r in rows])),
                              "all_cold": float(np.nanmedian([r["rho_all_cold"] for r in rows]))}}
    result = {"model": model, "k": k, "summary": summary, "tasks": rows}
    Path(out_path).write_text(json.dumps(result, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
