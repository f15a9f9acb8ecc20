#!/usr/bin/env python3
"""Measure the whole schedule space of a few small workloads (``--strategy grid``) and export the
records as gzipped JSON lines: the fixture that replay mode (autotune.search.replay) answers from.

    python scripts/make_replay_db.py                      # the default set, into tests/data/
    python scripts/make_replay_db.py --list               # sizes of the default spaces
    python scripts/make_replay_db.py --op matmul --shape 62,136,67 --db my.db --out my.jsonl.gz

Tuning is resumable: the working DB (``--db``) keeps every measurement, a rerun tops it up.

On a shared machine a run that loses its core for a time slice reads as a kernel 100-1000x slower
(OpenMP threads wait for the descheduled one). ``--recheck`` rounds re-measure the configs that look
disturbed (far slower than the space's median, or repeats that disagree by more than 50%), and the
export keeps each config's fastest measurement: interference only ever slows a kernel down.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.measure import Builder, CpuRunner, RunOptions  # noqa: E402
from autotune.search import TuneOptions, WorkloadMeasurer, tune_workload  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from autotune.te import make_workload  # noqa: E402
from records import MeasurementRecord, TuningDatabase, config_key  # noqa: E402
from schedules import make_space  # noqa: E402

# Extents with few divisors keep the valid spaces at a few hundred configs (on an 8-lane CPU),
# small enough to measure exhaustively, and the ops differ enough for transfer to be tested.
REPLAY_WORKLOADS = [
    ("matmul", "62,136,67"),
    ("dense", "74,88,53"),
    ("batch_matmul", "3,29,40,31"),
    ("dense_bias_relu", "53,72,61"),
    ("conv2d_nhwc", "1,7,7,97,56,1,1,1,0"),
]
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data",
                           "replay_cpu.jsonl.gz")


def fastest(records: list[MeasurementRecord]) -> list[MeasurementRecord]:
    """One record per config: its fastest successful measurement (else its first)."""
    best: dict[str, MeasurementRecord] = {}
    for rec in records:
        k = config_key(rec.config)
        if k not in best or rec.mean_s < best[k].mean_s:
            best[k] = rec
    return list(best.values())


def disturbed(records: list[MeasurementRecord], outlier: float = 20.0, spread: float = 1.5) -> list:
    """Records that look slowed down by other processes: far slower than the median config, or
    timed repeats that disagree."""
    ok = sorted(r.mean_s for r in records if r.ok)
    if not ok:
        return []
    median = ok[len(ok) // 2]
    return [r for r in records
            if r.ok and (r.mean_s > outlier * median or max(r.costs) > spread * min(r.costs))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", help="measure one workload of this op instead of the default set")
    p.add_argument("--shape", help="its shape (with --op)")
    p.add_argument("--db", default="replay_work.db", help="working records DB (default ./replay_work.db)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"gzipped JSONL export (default {DEFAULT_OUT})")
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per config (default 5)")
    p.add_argument("--min-repeat-ms", type=float, default=20.0, help="ms per repeat (default 20)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--recheck", type=int, default=2, help="rounds re-measuring disturbed configs (default 2)")
    p.add_argument("--list", action="store_true", help="print the space sizes and exit")
    args = p.parse_args(argv)
    specs = [(args.op, args.shape)] if args.op else REPLAY_WORKLOADS
    target = cpu_target()
    workloads = [make_workload(o, s) for o, s in specs]
    sizes = [make_space(wl, target).size() for wl in workloads]
    for (o, s), n in zip(specs, sizes):
        print(f"{o} {s}: {n} valid configs", flush=True)
    if args.list:
        return 0
    db = TuningDatabase(args.db)
    run = RunOptions(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=20.0)
    with Builder() as builder, CpuRunner() as runner:
        for wl, n in zip(workloads, sizes):
            t0 = time.perf_counter()
            opts = TuneOptions(trials=n, strategy="grid", batch_size=args.batch_size, run=run, progress=False)
            s = tune_workload(wl, target, db, opts, builder, runner)
            print(f"{s.workload}: {s.trials}/{n} measured ({s.errors} errors), best {s.best_gflops:.2f} "
                  f"GFLOP/s, {time.perf_counter() - t0:.0f} s", flush=True)
            for r in range(args.recheck):
                todo = disturbed(fastest(db.measurements(wl.key, target.key)))
                print(f"  recheck {r + 1}: {len(todo)} disturbed configs", flush=True)
                if not todo:
                    break
                space = make_space(wl, target)
                m = WorkloadMeasurer(wl, target, builder, runner, run)
                for i in range(0, len(todo), args.batch_size):
                    cfgs = [rec.config for rec in todo[i:i + args.batch_size]]
                    for t in m.measure(cfgs, [space.steps(c) for c in cfgs]):
                        db.add_measurement(MeasurementRecord(
                            workload_key=wl.key, target_key=target.key, config=t.config,
                            steps=[st.to_dict() for st in t.steps],
                            costs=t.costs if t.error_kind is None else (),
                            error_kind=t.error_kind, error_msg=t.error_msg[:2000], build_s=t.build_s,
                            verified=t.error_kind is None, tuner="recheck", space_version=space.version))
    keys = {wl.key for wl in workloads}
    out = TuningDatabase(":memory:")
    for w in db.workloads():
        if w["key"] in keys:
            out.add_workload(w["key"], w["name"], w["description"], w["flops"])
    out.add_target(target.key, target.kind, target.fingerprint)
    for key in keys:
        out.add_measurements(fastest(db.measurements(key, target.key)))
    db.close()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as fh:
        lines = out.export_jsonl(fh)
    out.close()
    print(f"wrote {args.out}: {lines} lines, {os.path.getsize(args.out) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
