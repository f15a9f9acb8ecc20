#!/usr/bin/env python3
"""Figures of measuring on a Dask cluster, on this host's CPU; writes run.json next to this file.

For one workload and budget (random search, so the configs do not depend on timings) the tuning
loop runs

- local: the local path, builds over ``--parallel`` compiler threads (equal parallelism to the
  2-worker cluster), then kernels run one at a time;
- dask-1, dask-2: the pipelined loop on a LocalCluster of 1 and of 2 worker processes, one thread
  and one runner each;

first with an empty build cache (every candidate compiled: the cold figures, trials/s), then again
into a fresh database with the same seed, so every library is in the cache and what is left is the
loop, the runs and the machinery around them: (dask-2 - local) / trials is the distributed
path's overhead per trial at equal parallelism. Everything runs ``--repeats`` times (new seeds
each time) and the figures take each mode's median wall time: on a 2-core machine one run moves by
10% with what else the machine does. Each run's runner-busy fraction is reported. The
host's load average is recorded before and after: on a shared machine the figures move with it.
Kernels run with one OpenMP thread."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = Path(__file__).with_name("run.json")


def _tune(mode: str, db_path: Path, args: argparse.Namespace) -> dict:
    from autotune.distributed import DaskMeasurer, connect
    from autotune.distributed.cluster import close
    from autotune.measure import Builder, CpuRunner, RunOptions
    from autotune.search import TuneOptions, tune_workload
    from autotune.target import cpu_target
    from autotune.te import make_workload
    from records import TuningDatabase

    wl, target = make_workload(args.op, args.shape), cpu_target()
    run = RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0)
    options = TuneOptions(trials=args.trials, strategy="random", seed=args.seed, batch_size=args.batch_size,
                          progress=False, confirm=0, run=run)
    with TuningDatabase(db_path) as db:
        if mode == "local":
            with Builder(workers=args.parallel) as b, CpuRunner() as r:
                s = tune_workload(wl, target, db, options, b, r)
        else:
            client = connect(workers=int(mode.split("-")[1]), resource="measure-cpu")
            try:
                m = DaskMeasurer(client, wl, target, run)
                s = tune_workload(wl, target, db, options, None, None, measurer=m)
                m.close()
            finally:
                close(client)
    wall = s.elapsed_s  # the tuning itself (not the cluster's start, nor the space's size counted after)
    return {"mode": mode, "trials": s.new_trials, "valid": s.valid, "errors": s.errors,
            "wall_s": round(wall, 2), "trials_per_s": round(s.new_trials / wall, 3),
            "runner_busy": round(s.runner_busy, 3),
            "seconds": {k: round(v, 2) for k, v in s.seconds.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--op", default="matmul")
    p.add_argument("--shape", default="64,64,64")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", type=int, default=2, help="compiler threads of the local path")
    p.add_argument("--repeats", type=int, default=3,
                   help="times each mode runs, interleaved; the figures take each mode's median wall time")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    work = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    os.environ["HOME"] = str(work)  # a build cache of its own (~/.cache/autotune/builds), workers too
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {"cold": [], "cached": []}
    modes = ("local", "dask-1", "dask-2")
    for r in range(args.repeats):
        for phase in ("cold", "cached"):
            for i, mode in enumerate(modes):
                # cold: each mode and repeat its own seed (its own configs, none in the cache); cached:
                # the same seeds again into fresh databases, every library already built
                seeded = argparse.Namespace(**{**vars(args), "seed": args.seed + 10 * r + i})
                row = _tune(mode, work / f"{phase}-{mode}-{r}.db", seeded)
                print(phase, json.dumps(row), flush=True)
                results[phase].append(row)

    def wall(phase: str, mode: str) -> float:  # the median over the repeats
        return statistics.median(r["wall_s"] for r in results[phase] if r["mode"] == mode)

    def ratio(phase: str, a: str, b: str) -> float:
        return round(wall(phase, b) / wall(phase, a), 3)  # trials/s of a over those of b

    def overhead_ms(phase: str) -> float:
        return round(1000 * (wall(phase, "dask-2") - wall(phase, "local")) / args.trials, 2)

    summary = {
        "speedup_2_vs_1_workers_cold": ratio("cold", "dask-2", "dask-1"),
        "dask2_vs_local_cold": ratio("cold", "dask-2", "local"),
        "overhead_ms_per_trial_cached": overhead_ms("cached"),
        "overhead_ms_per_trial_cold": overhead_ms("cold"),
    }
    out = {"workload": f"{args.op}[{args.shape}]", "trials": args.trials, "batch_size": args.batch_size,
           "repeats": args.repeats,
           "median_wall_s": {f"{ph}/{m}": wall(ph, m) for ph in results for m in modes},
           "local_build_threads": args.parallel, "cpu_count": os.cpu_count(),
           "loadavg_before": [round(v, 2) for v in load_before],
           "loadavg_after": [round(v, 2) for v in os.getloadavg()],
           "summary": summary, "runs": results}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
