#!/usr/bin/env python3
"""The host's float32 FMA peak on every core, and what it bounds: the time a model's kernels need
at that peak for the floating-point operations they compute (each task's flops times its calls).
A ratio to a baseline above (baseline time / that floor) is out of reach for float32 kernels on
this host that compute those operations, however well they are scheduled (an algorithm with fewer
operations, such as a Winograd convolution, moves the floor: without ``--db`` the model is
prepared with direct convolutions).

    python bench/cpu_models/fma_peak/run.py --model zoo:bert_layer [--baseline-ms 10.9 | --time-onnxruntime]
        [--db DB --out FILE]

writes peak.json next to this file (or ``--out``). With ``--db`` the model is prepared as compile.py
prepares it with that database (each convolution in the Winograd form its records favour), and the
output also lists every task's operations, calls and best recorded time against the peak. The
peak comes from a C loop of independent fused multiply-adds on the widest float vectors gcc
targets here (-march=native), one OpenMP thread per core, best of 5."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

KERNEL = r"""
#include <omp.h>
#include <stdio.h>
typedef float vf __attribute__((vector_size(%(bytes)d)));
#define ACC 12
int main(void) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    long iters = 20000000;
    float sink = 0;
    double t0 = omp_get_wtime();
    #pragma omp parallel reduction(+ : sink)
    {
      vf a[ACC], b, c;
      for (int l = 0; l < %(lanes)d; ++l) { b[l] = 1.0000001f; c[l] = 1e-7f; }
      for (int i = 0; i < ACC; ++i) for (int l = 0; l < %(lanes)d; ++l) a[i][l] = (float)(i + l);
      for (long it = 0; it < iters; ++it) {
        #pragma GCC unroll 12
        for (int i = 0; i < ACC; ++i) a[i] = a[i] * b + c;
      }
      for (int i = 0; i < ACC; ++i) for (int l = 0; l < %(lanes)d; ++l) sink += a[i][l];
    }
    double t = omp_get_wtime() - t0;
    double gflops = 2.0 * %(lanes)d * ACC * iters * omp_get_max_threads() / t / 1e9;
    if (gflops > best) best = gflops;
    if (sink == 1234.5f) printf("#");
  }
  printf("%%.2f %%d\n", best, omp_get_max_threads());
  return 0;
}
"""


def fma_peak(lanes: int) -> tuple[float, int]:
    """(GFLOP/s, threads) of independent float32 FMAs on ``lanes``-wide vectors, every core."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(KERNEL % {"bytes": 4 * lanes, "lanes": lanes})
        subprocess.run(["gcc", "-O2", "-march=native", "-ffp-contract=fast", "-fopenmp", str(src), "-o",
                        str(exe)], check=True, timeout=120)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=300).stdout
    gflops, threads = out.split()
    return float(gflops), int(threads)


def model_tasks(model: str, db_path: str | None) -> list:
    """The tasks of the model's compiled kernels: as compile.py prepares the model with the database
    ``db_path`` (Winograd and Strassen forms by its records), or with direct kernels only when
    there is none."""
    from autotune.graph.compiler import choose_forms, prepare
    from autotune.graph.forms import default_forms
    from autotune.target import cpu_target

    if db_path is None:
        return prepare(model).tasks
    from records import TuningDatabase

    with TuningDatabase(db_path, readonly=True) as db:
        return choose_forms(model, cpu_target(), db, "NHWC", default_forms("cpu")).tasks


def task_table(tasks: list, db_path: str, peak: float) -> list[dict]:
    """Per task: operations, calls, best recorded time and its GFLOP/s (slowest share first)."""
    from autotune.target import cpu_target
    from records import TuningDatabase

    rows = []
    with TuningDatabase(db_path, readonly=True) as db:
        for t in tasks:
            rec = db.best(t.key, cpu_target().key)
            ms = rec.mean_s * 1e3 if rec else None
            floor = t.workload.flops / peak / 1e6
            mflop = t.workload.flops / 1e6
            rows.append({"task": t.workload.name, "calls": t.weight, "mflop": round(mflop, 2),
                         "best_ms": ms and round(ms, 4), "floor_ms": round(floor, 4),
                         "gflops": ms and round(t.workload.flops / ms / 1e6, 1)})
    return sorted(rows, key=lambda r: -(r["best_ms"] or 0) * r["calls"])


def onnxruntime_ms(model: str) -> float:
    """onnxruntime's median milliseconds per call of the model, on random inputs, every core."""
    import statistics

    from autotune.cli.bench import time_callable
    from autotune.cli.model import load, onnxruntime_session
    from autotune.graph.feeds import random_inputs

    loaded = load(model, [])
    session = onnxruntime_session(loaded)
    feeds = random_inputs(loaded.graph)
    return 1e3 * statistics.median(time_callable(lambda f: session.run(None, f), [feeds], 7, 200.0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="zoo:bert_layer")
    p.add_argument("--baseline-ms", type=float, help="a baseline's time for the model (e.g. onnxruntime's)")
    p.add_argument("--time-onnxruntime", action="store_true",
                   help="time onnxruntime on the model here (median of 7) and use that as the baseline")
    p.add_argument("--db", help="prepare the model as compile.py does with this records database")
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("peak.json"))
    args = p.parse_args()
    from autotune.target import cpu_target

    lanes = cpu_target().vector_lanes
    peak, threads = fma_peak(lanes)
    tasks = model_tasks(args.model, args.db)
    gflop = sum(t.workload.flops * t.weight for t in tasks) / 1e9
    floor_ms = 1e3 * gflop / peak
    out = {"cpu": cpu_target().describe(), "lanes": lanes, "threads": threads, "fma_peak_gflops": peak,
           "model": args.model, "model_gflop": round(gflop, 4), "floor_ms_at_peak": round(floor_ms, 3)}
    if args.time_onnxruntime:
        args.baseline_ms = onnxruntime_ms(args.model)
        out["baseline"] = "onnxruntime, timed here"
    if args.baseline_ms:
        out["baseline_ms"] = args.baseline_ms
        out["max_speedup_over_baseline"] = round(args.baseline_ms / floor_ms, 3)
    if args.db:
        rows = task_table(tasks, args.db, peak)
        out["tuned_ms"] = round(sum((r["best_ms"] or math.nan) * r["calls"] for r in rows), 3)
        out["tasks"] = rows
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "tasks"}))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    raise SystemExit(main())
