"""Per task of a model, configs timed together (fresh random inputs checked against the float64
reference, interleaved rounds); the sums weigh each task by its calls.

    python bench/cpu_models/rules_seed/run.py rules MODEL DB   # the rules' configs vs DB's best
    python bench/cpu_models/rules_seed/run.py bests MODEL DB... # the best record of each DB
    python bench/cpu_models/rules_seed/run.py modules MODEL DB... # whole compiled modules

``--winograd M`` takes the tasks of the Winograd form F(M x M, 3 x 3) (default 0: direct).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from autotune.cli.common import resolve_target  # noqa: E402
from autotune.cli.model import load  # noqa: E402
from autotune.graph.compiler import prepare  # noqa: E402
from autotune.measure import Builder, CpuRunner, RunOptions  # noqa: E402
from autotune.search.measure_batch import WorkloadMeasurer  # noqa: E402
from records import TuningDatabase  # noqa: E402
from schedules import make_space  # noqa: E402


class Timer:
    """Times lists of configs of one task: each config's median over ``rounds`` rounds."""

    def __init__(self, target: Any, rounds: int) -> None:
        self.target, self.rounds = target, rounds
        self.runner, self.builder = CpuRunner(), Builder(workers=2)

    def time(self, task: Any, configs: Sequence[dict]) -> np.ndarray:
        wl = task.workload
        space = make_space(wl, self.target)
        options = RunOptions(repeat=3, min_repeat_ms=30)
        m = WorkloadMeasurer(wl, self.target, self.builder, self.runner, options)
        runs: dict[int, list[float]] = {}
        for _ in range(self.rounds):
            for i, t in enumerate(m.measure(list(configs), [space.steps(c) for c in configs])):
                ok = t.costs and not t.error_kind
                runs.setdefault(i, []).append(float(np.median(t.costs)) if ok else np.inf)
        return np.array([np.median(runs[i]) for i in range(len(configs))])


def rules(tasks: list, target: Any, db_path: str) -> None:
    db = TuningDatabase(db_path)
    timer = Timer(target, rounds=2)
    best_sum = rules_sum = 0.0
    for task in tasks:
        best = db.best(task.workload.key, target.key)
        if best is None:
            continue
        proposed = make_space(task.workload, target).default_configs()
        t = timer.time(task, [best.config] + [c for c in proposed if c != best.config])
        rules_t = min(t[1:]) if len(t) > 1 else t[0]
        best_sum += t[0] * task.weight
        rules_sum += rules_t * task.weight
        print(f"{task.label[:66]:66s} x{task.weight}  best record {t[0] * 1e3:.4f} ms  "
              f"rules {rules_t * 1e3:.4f} ms  best/rules {t[0] / rules_t:.2f}", flush=True)
    print(f"sums: best records {best_sum * 1e3:.3f} ms, rules {rules_sum * 1e3:.3f} ms")


def bests(tasks: list, target: Any, db_paths: list[str]) -> None:
    dbs = [TuningDatabase(d) for d in db_paths]
    names = [Path(d).name for d in db_paths]
    timer = Timer(target, rounds=3)
    sums = np.zeros(len(dbs))
    for task in tasks:
        found = [d.best(task.workload.key, target.key) for d in dbs]
        if any(b is None for b in found):
            continue
        t = timer.time(task, [b.config for b in found])
        sums += t * task.weight
        cells = "  ".join(f"{n} {v * 1e3:.4f}" for n, v in zip(names, t))
        print(f"{task.label[:66]:66s} x{task.weight}  {cells}", flush=True)
    print("sums (ms): " + "  ".join(f"{n} {v * 1e3:.3f}" for n, v in zip(names, sums)))


def modules(model: str, target: Any, db_paths: list[str], rounds: int = 7) -> None:
    """The module each DB compiles to (its fastest forms and best records), timed in C by rounds,
    the modules one after the other in every round."""
    from autotune.cli.common import open_records
    from autotune.cli.model import build_module

    loaded = load(model, [], "fp32", "cpu")
    built = []
    for d in db_paths:
        db, tgt, _ = open_records(d, target, False)
        built.append(build_module(loaded, tgt, db, "NHWC"))
    feeds = built[0].random_inputs(np.random.default_rng(0))
    times: list[list[float]] = [[] for _ in built]
    for _ in range(rounds):
        for i, m in enumerate(built):
            times[i].append(float(np.median(m.time(feeds, repeat=5, min_repeat_ms=200))))
    for d, t in zip(db_paths, times):
        print(f"{Path(d).name}: median {np.median(t) * 1e3:.3f} ms, min {min(t) * 1e3:.3f} ms, "
              f"rounds {[round(x * 1e3, 3) for x in t]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("rules", "bests", "modules"))
    p.add_argument("model")
    p.add_argument("dbs", nargs="+")
    p.add_argument("--winograd", type=int, default=0)
    args = p.parse_args()
    target = resolve_target("cpu")
    if args.what == "modules":
        modules(args.model, target, args.dbs)
        return
    prepared = prepare(load(args.model, [], "fp32", "cpu").graph, winograd=args.winograd)
    if args.what == "rules":
        if len(args.dbs) != 1:
            p.error("rules takes one DB")
        rules(prepared.tasks, target, args.dbs[0])
    else:
        bests(prepared.tasks, target, args.dbs)


if __name__ == "__main__":
    main()
