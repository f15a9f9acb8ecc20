#!/usr/bin/env python3
"""Measure the whole schedule space of a few small workloads (``--strategy grid``) and export the
records as gzipped JSON lines: the fixture that replay mode (autotune.search.replay) answers from.

    python scripts/make_replay_db.py                      # the default set, into tests/data/
    python scripts/make_replay_db.py --list               # sizes of the default spaces
    python scripts/make_replay_db.py --op matmul --shape 62,136,67 --db my.db --out my.jsonl.gz
    python scripts/make_replay_db.py --target cuda        # on a GPU machine: the CUDA set
    python scripts/make_replay_db.py --target cuda --set large   # larger CUDA spaces (_large file)
    python scripts/make_replay_db.py --target cuda --export-only   # export what the DB holds

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

from autotune.cli.common import UsageError, fail, measure_tools, resolve_target  # noqa: E402
from autotune.measure import RunOptions  # noqa: E402
from autotune.measure.cuda_runner import CudaRunOptions  # noqa: E402
from autotune.search import TuneOptions, WorkloadMeasurer, tune_workload  # noqa: E402
from autotune.target import Target, offline_cuda_target  # noqa: E402
from autotune.te import make_workload  # noqa: E402
from records import MeasurementRecord, RecordsError, TuningDatabase, config_key  # noqa: E402
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
# The same ops on the GPU. CUDA spaces are larger (thread/block tiling, staging, vector fetch), so
# extents are 2^a times a large prime: 868-2480 configs per space (9188 in all; measured in 400 s of
# nvcc + runs on the H200, 0 errors), while each kernel still runs 40-500 us. (Tiny shapes with
# small spaces run ~5 us, at the launch-overhead floor, where dozens of configs tie.) GPU timings are
# stable, so no recheck is needed.
REPLAY_WORKLOADS_CUDA = [
    ("matmul", "502,514,1004"),
    ("dense", "502,514,1004"),
    ("batch_matmul", "3,254,514,251"),
    ("dense_bias_relu", "1018,502,1004"),
    ("conv2d_nhwc", "1,29,29,508,134,1,1,1,0"),
]
# Larger CUDA spaces (2,528-6,400 valid configs, 24,022 in all; measured on the H200 in ~920 s, 0
# errors), a 3x3 convolution among them: closer to the sizes real tuning searches, where random
# sampling needs around a hundred trials or more.
REPLAY_WORKLOADS_CUDA_LARGE = [
    ("dense", "254,508,1004"),
    ("dense_bias_relu", "508,502,1004"),
    ("batch_matmul", "4,254,251,502"),
    ("conv2d_nhwc", "1,29,29,254,254,3,3,1,1"),
    ("conv2d_nhwc", "1,29,29,508,268,1,1,1,0"),
]
DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data")


def replay_target(kind: str, listing: bool) -> Target:
    """The machine's target; for a CUDA listing without a device, H200-like limits."""
    if kind == "cuda" and listing:
        try:
            return resolve_target("cuda")
        except UsageError:
            return offline_cuda_target()
    return resolve_target(kind)


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
    p.add_argument("--target", default="cpu", choices=("cpu", "cuda"), help="where to measure (default cpu)")
    p.add_argument("--out", help="gzipped JSONL export (default tests/data/replay_<target>.jsonl.gz)")
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per config (default 5)")
    p.add_argument("--min-repeat-ms", type=float, default=None,
                   help="ms per repeat (default 20 on the CPU, 2 on the GPU)")
    p.add_argument("--batch-size", type=int, default=None, help="configs per batch (default 8 CPU, 64 GPU)")
    p.add_argument("--recheck", type=int, default=None,
                   help="rounds re-measuring disturbed configs (default 2 on the CPU, 0 on the GPU)")
    p.add_argument("--set", choices=("small", "large"), default="small",
                   help="default workload set: small, or the larger CUDA spaces (--target cuda)")
    p.add_argument("--list", action="store_true", help="print the space sizes and exit")
    p.add_argument("--export-only", action="store_true", help="measure nothing; export what --db holds")
    args = p.parse_args(argv)
    gpu = args.target == "cuda"
    if args.set == "large" and not gpu:
        fail("--set large is a CUDA set: add --target cuda")
    suffix = "_large" if args.set == "large" else ""
    out_path = args.out or os.path.join(DATA_DIR, f"replay_{args.target}{suffix}.jsonl.gz")
    batch = args.batch_size or (64 if gpu else 8)
    recheck = args.recheck if args.recheck is not None else (0 if gpu else 2)
    min_ms = args.min_repeat_ms if args.min_repeat_ms is not None else (2.0 if gpu else 20.0)
    default_set = (REPLAY_WORKLOADS_CUDA_LARGE if args.set == "large" else REPLAY_WORKLOADS_CUDA) if gpu \
        else REPLAY_WORKLOADS
    specs = [(args.op, args.shape)] if args.op else default_set
    try:
        target = replay_target(args.target, args.list or args.export_only)
    except UsageError as err:
        fail(str(err))
    workloads = [make_workload(o, s) for o, s in specs]
    # exact counts (no limit: size() walks the raw space instead of sampling it); the sampled estimate
    # for large raw spaces can fall short, and a grid run capped there leaves the space's tail unmeasured
    sizes = [make_space(wl, target).size(limit=sys.maxsize) for wl in workloads]
    for (o, s), n in zip(specs, sizes):
        print(f"{o} {s}: {n} valid configs", flush=True)
    if args.list:
        return 0
    if args.export_only:  # read what is there; a missing or foreign --db is refused, not created
        try:
            db = TuningDatabase(args.db, create=False)
        except RecordsError as err:
            fail(f"{err}; nothing written to {out_path}")
        return export(db, workloads, out_path)
    db = TuningDatabase(args.db)
    run_cls = CudaRunOptions if gpu else RunOptions
    run = run_cls(repeat=args.repeat, min_repeat_ms=min_ms, timeout_s=20.0)
    builder, runner = measure_tools(target)
    with builder, runner:
        for wl, n in zip(workloads, sizes):
            t0 = time.perf_counter()
            opts = TuneOptions(trials=n, strategy="grid", batch_size=batch, run=run, progress=False,
                               confirm=0)  # one record per config: a replay answers with it
            s = tune_workload(wl, target, db, opts, builder, runner)
            print(f"{s.workload}: {s.trials}/{n} measured ({s.errors} errors), best {s.best_gflops:.2f} "
                  f"GFLOP/s, {time.perf_counter() - t0:.0f} s", flush=True)
            for r in range(recheck):
                todo = disturbed(fastest(db.measurements(wl.key, target.key)))
                print(f"  recheck {r + 1}: {len(todo)} disturbed configs", flush=True)
                if not todo:
                    break
                space = make_space(wl, target)
                m = WorkloadMeasurer(wl, target, builder, runner, run)
                for i in range(0, len(todo), batch):
                    cfgs = [rec.config for rec in todo[i:i + batch]]
                    for t in m.measure(cfgs, [space.steps(c) for c in cfgs]):
                        db.add_measurement(MeasurementRecord(
                            workload_key=wl.key, target_key=target.key, config=t.config,
                            steps=[st.to_dict() for st in t.steps],
                            costs=t.costs if t.error_kind is None else (),
                            error_kind=t.error_kind, error_msg=t.error_msg[:2000], build_s=t.build_s,
                            verified=t.error_kind is None, tuner="recheck", space_version=space.version))
    return export(db, workloads, out_path)


def export(db: TuningDatabase, workloads: list, out_path: str) -> int:
    """Write each workload's fastest record per config (every target the DB holds them for)."""
    keys = {wl.key for wl in workloads}
    per_target = []  # (target, its fastest record per config), targets with records only
    for t in db.targets():
        recs = [r for key in keys for r in fastest(db.measurements(key, t["key"]))]
        if recs:
            per_target.append((t, recs))
    if not per_target:
        db.close()
        fail(f"no measurements of these workloads in the DB; nothing written to {out_path}")
    out = TuningDatabase(":memory:")
    for w in db.workloads():
        if w["key"] in keys:
            out.add_workload(w["key"], w["name"], w["description"], w["flops"])
    for t, recs in per_target:
        out.add_target(t["key"], t["kind"], t["fingerprint"])
        out.add_measurements(recs)
    db.close()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    partial = out_path + ".partial"  # renamed when complete: a killed export leaves no half file
    with gzip.open(partial, "wt", encoding="utf-8", compresslevel=9) as fh:
        lines = out.export_jsonl(fh)
    os.replace(partial, out_path)
    out.close()
    print(f"wrote {out_path}: {lines} lines, {os.path.getsize(out_path) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
