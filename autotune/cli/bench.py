"""``bench.py``: build the best-known kernel of every workload in a records DB, check it, and time
it against the obvious numpy float32 implementation in the same run."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from records import MeasurementRecord, TuningDatabase

from ..compile import CompileError, build_kernel
from ..measure import Builder
from ..search.measure_batch import tolerances
from ..search.tune import workload_label
from ..target import Target
from ..te import Workload, WorkloadError, workload_from_description
from .common import (
    TARGETS,
    ArgParser,
    UsageError,
    add_db_arg,
    add_exact_target_arg,
    float_at_least,
    int_in,
    open_records,
    resolve_target,
    run_cli,
)
from .output import add_output_args, emit_json, with_output


def build_parser(prog: str = "bench.py") -> argparse.ArgumentParser:
    p = ArgParser(
        prog=prog,
        description="For every workload tuned on this machine in the records DB: build its best-known "
        "kernel, check it against the float64 reference, and time it against numpy (float32) "
        "in the same run. With --model: the whole compiled model against onnxruntime instead. "
        "Exit status 1 if some kernel failed, 2 on bad input.",
    )
    p.add_argument("--target", default="cpu", help=f"where kernels run: {', '.join(TARGETS)} (default cpu)")
    add_db_arg(p)
    add_exact_target_arg(p)
    p.add_argument(
        "--repeat", type=int_in(1), default=5, help="timed repeats per side; the median is kept (default 5)"
    )
    p.add_argument(
        "--min-repeat-ms",
        type=float_at_least(0),
        default=200.0,
        help="minimum duration of one repeat, in ms (default 200)",
    )
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (every other line goes to stderr)")
    add_output_args(p)
    from .model import add_model_args, add_rerank_arg

    add_model_args(p)
    add_rerank_arg(p)
    p.add_argument("--torch-compile-mode", choices=("max-autotune", "default", "none"),
                   default="max-autotune",
                   help="--model --target cuda: the torch.compile baseline's mode (default max-autotune: "
                   "Inductor's autotuned kernels with CUDA graphs; none: eager only)")
    return p


def main(argv: list[str] | None = None, prog: str = "bench.py") -> int:
    return run_cli(build_parser(prog), with_output(_main), argv)


def _main(args: argparse.Namespace) -> int:
    if args.model is not None:
        from .model import run_model_bench

        return run_model_bench(args)
    return _run(args)


def numpy_baseline(workload: Workload) -> Callable[..., Any]:
    """The workload's numpy float32 baseline, or its reference run on float32 inputs."""
    return workload.baseline or workload.reference


def time_callable(
    fn: Callable[..., Any], args: Sequence[Any], repeat: int = 5, min_repeat_ms: float = 200.0
) -> list[float]:
    """Seconds per call, one value per repeat: a warm-up call, then ``number`` calls per repeat,
    ``number`` grown until a repeat lasts ``min_repeat_ms`` (as the C harness does)."""
    fn(*args)
    min_s = min_repeat_ms * 1e-3
    number, costs = 1, []
    while len(costs) < repeat:
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        elapsed = time.perf_counter() - t0
        if elapsed < min_s:
            scale = min(1000.0, 1.1 * min_s / elapsed) if elapsed > 0 else 1000.0
            number = max(number + 1, int(number * scale) + 1)
            continue
        costs.append(elapsed / number)
    return costs


@dataclass
class BenchRow:
    """One benchmarked workload (``error`` set when it could not be built or was wrong)."""

    workload: str
    workload_key: str
    flops: float
    config: dict | None = None
    tuned: bool = False
    ours_s: float | None = None
    numpy_s: float | None = None
    max_abs_err: float | None = None
    error: str | None = None

    @property
    def ours_gflops(self) -> float | None:
        return self.flops / self.ours_s / 1e9 if self.ours_s else None

    @property
    def numpy_gflops(self) -> float | None:
        return self.flops / self.numpy_s / 1e9 if self.numpy_s else None

    @property
    def speedup(self) -> float | None:
        return self.numpy_s / self.ours_s if self.ours_s and self.numpy_s else None

    def to_json(self) -> dict:
        def r(v: float | None, nd: int = 3) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "workload": self.workload,
            "workload_key": self.workload_key,
            "flops": self.flops,
            "ours_s": self.ours_s,
            "ours_gflops": r(self.ours_gflops),
            "numpy_s": self.numpy_s,
            "numpy_gflops": r(self.numpy_gflops),
            "speedup": r(self.speedup, 4),
            "max_abs_err": self.max_abs_err,
            "config": self.config,
            "tuned": self.tuned,
            "ok": self.error is None,
            "error": self.error,
        }


def bench_workload(
    wl: Workload, target: Target, db: TuningDatabase, builder: Builder, repeat: int, min_repeat_ms: float
) -> BenchRow:
    """Build, check once against the float64 reference, then time ours and numpy on the same inputs."""
    row = BenchRow(workload_label(wl), wl.key, wl.flops)
    try:
        kernel = build_kernel(wl, target, db, builder)
    except CompileError as err:
        row.error = str(err)
        return row
    row.config, row.tuned = kernel.config, kernel.tuned
    inputs = wl.random_inputs(np.random.default_rng())
    reference = wl.run_reference(inputs)
    outputs = kernel(*inputs)
    rtol, atol = tolerances(reference)
    errs = [
        float(np.max(np.abs(o.astype(np.float64) - r))) if r.size else 0.0 for o, r in zip(outputs, reference)
    ]
    row.max_abs_err = max(errs, default=0.0)
    if not all(np.allclose(o, r, rtol=rtol, atol=atol) for o, r in zip(outputs, reference)):
        row.error = f"wrong output: max abs error {row.max_abs_err:.3g} (rtol {rtol:g}, atol {atol:.3g})"
        return row
    row.ours_s = statistics.median(kernel.time(*inputs, repeat=repeat, min_repeat_ms=min_repeat_ms))
    row.numpy_s = statistics.median(time_callable(numpy_baseline(wl), inputs, repeat, min_repeat_ms))
    return row


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(rows: Sequence[BenchRow]) -> str:
    """The human-readable result table."""
    head = ("workload", "ours GFLOP/s", "numpy GFLOP/s", "ours/numpy", "max abs err", "schedule")
    body = []
    for r in rows:
        status = ("tuned" if r.tuned else "DEFAULT") if r.error is None else f"FAILED: {r.error}"
        body.append(
            (
                r.workload,
                _fmt(r.ours_gflops, ".2f"),
                _fmt(r.numpy_gflops, ".2f"),
                _fmt(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
                _fmt(r.max_abs_err, ".2e"),
                status,
            )
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for cells in [head, *body]:
        left = cells[0].ljust(widths[0])
        mid = "  ".join(c.rjust(w) for c, w in zip(cells[1:-1], widths[1:]))
        lines.append(f"{left}  {mid}  {cells[-1]}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    target = resolve_target(args.target)
    db, target, _ = open_records(args.db, target, args.exact_target)
    try:
        if not db.workloads():
            raise UsageError(f"{args.db} holds no tuned workloads; run scripts/tune.py --db {args.db} first")
        best: list[MeasurementRecord] = db.best_per_workload(target.key)
        if not best:
            raise UsageError(
                f"{args.db} has no verified records for this machine "
                f"({target.kind} {target.key}); run scripts/tune.py --db {args.db} here first"
            )
        print(f"target: {target.describe()} [{target.key}]", flush=True)
        if target.backend.benched_against_torch:
            return _run_cuda(best, target, db, args)
        rows = []
        with Builder(workers=1) as builder:
            for rec in best:
                rows.append(_bench_record(rec, target, db, builder, args))
    finally:
        db.close()
    print(format_table(rows), flush=True)
    if args.json:
        emit_json({"target": target.key, "db": args.db, "results": [r.to_json() for r in rows]})
    return 0 if all(r.error is None for r in rows) else 1


def _bench_record(
    rec: MeasurementRecord, target: Target, db: TuningDatabase, builder: Builder, args: argparse.Namespace
) -> BenchRow:
    info = db.workload(rec.workload_key) or {}
    label = info.get("name", rec.workload_key)
    try:
        wl = workload_from_description(info["description"])
    except (KeyError, TypeError, WorkloadError) as err:
        return BenchRow(
            label,
            rec.workload_key,
            float(info.get("flops") or 0.0),
            error=f"cannot rebuild the workload: {err}",
        )
    if wl.key != rec.workload_key:
        return BenchRow(
            label,
            rec.workload_key,
            wl.flops,
            error="the op definition changed since tuning (workload key differs); re-tune it",
        )
    return bench_workload(wl, target, db, builder, args.repeat, args.min_repeat_ms)


def _run_cuda(
    best: list[MeasurementRecord], target: Target, db: TuningDatabase, args: argparse.Namespace
) -> int:
    from .bench_cuda import bench_cuda_record, format_cuda_table
    from .common import measure_tools

    builder, runner = measure_tools(target)
    with builder, runner:
        rows = [bench_cuda_record(rec, target, db, builder, runner, args) for rec in best]
    print(format_cuda_table(rows), flush=True)
    if args.json:
        emit_json({"target": target.key, "target_kind": "cuda", "device": target.fingerprint,
                   "db": args.db, "results": rows})
    return 0 if all(r.get("ok") for r in rows) else 1
