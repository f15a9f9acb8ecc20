"""``tune.py``: tune workloads on a target and store every measurement in the records DB."""

from __future__ import annotations

import argparse

from ..search import STRATEGIES, TuneOptions, tune_workload
from ..search.tune import workload_label
from ..te import make_workload, op_names, op_spec
from .common import (
    SEED_MAX,
    TARGETS,
    ArgParser,
    UsageError,
    add_db_arg,
    float_at_least,
    int_in,
    measuring,
    open_db,
    run_cli,
)
from .limits import check_workload
from .output import add_output_args, emit_json, with_output

# The embedded default: small but representative (a GEMM, a fused dense epilogue, a convolution),
# so a first run on a fresh machine finishes in a couple of minutes.
DEFAULT_WORKLOADS = [
    ("matmul", "256,256,256"),
    ("dense_bias_relu", "64,512,256"),
    ("conv2d", "1,32,28,28,32,3,3,1,1"),
]
DEFAULT_TRIALS = 24
# With no arguments at all: the embedded default model (autotune.graph.zoo: a 3-layer MLP, 4 tasks),
# tuned under one budget; about a minute or two on two cores.
DEFAULT_MODEL = "zoo:mlp"
DEFAULT_MODEL_TRIALS = 160


def build_parser(prog: str = "tune.py") -> argparse.ArgumentParser:
    ops = ", ".join(f"{op_spec(n).usage()}" for n in op_names())
    p = ArgParser(
        prog=prog,
        description="Tune tensor workloads by measuring generated kernels; results go to a SQLite DB. "
        "With --model, tunes every fused subgraph of an ONNX model under one --trials budget. "
        f"With no arguments, tunes the embedded default model ({DEFAULT_MODEL}, "
        f"{DEFAULT_MODEL_TRIALS} trials); "
        "--default-ops tunes the embedded op set instead: "
        + "; ".join(f"{o} {s}" for o, s in DEFAULT_WORKLOADS),
    )
    p.add_argument("--default-ops", action="store_true", help="tune the embedded op set (see above)")
    p.add_argument("--target", default="cpu", help=f"where kernels run: {', '.join(TARGETS)} (default cpu); "
                   "with --cluster also all: every target the cluster's workers measure, each into its own "
                   "records")
    p.add_argument("--op", help=f"tune one workload of this op; ops and their --shape values: {ops}")
    p.add_argument("--shape", help="comma-separated integers of the op (see --op), e.g. 1024,1024,1024")
    p.add_argument(
        "--trials",
        type=int_in(0),
        default=None,
        help=f"measurements wanted per workload in the DB; a rerun tops up to this number "
        f"(resume after a kill) (default {DEFAULT_TRIALS})",
    )
    add_db_arg(p)
    p.add_argument("--strategy", default="xgb",
                   help=f"search strategy: {', '.join(STRATEGIES)} (default xgb: the XGBoost-guided search, "
                   "seeded from the DB's other records; it beat random search on real hardware, "
                   "see docs/cost_model.md)")
    p.add_argument("--seed", type=int_in(0, SEED_MAX), default=0, help="seed of the search (default 0)")
    p.add_argument(
        "--batch-size", type=int_in(1), default=8, help="configs built in parallel per batch (default 8)"
    )
    p.add_argument("--time-budget", type=float_at_least(0), default=None, metavar="SECONDS",
                   help="per workload: start no new batch after this many seconds (default: none)")
    p.add_argument("--no-transfer", action="store_true",
                   help="model-guided strategies (xgb, sklearn) learn only from this workload's own "
                   "records, not from other workloads / targets in the DB")
    p.add_argument("--early-stop", type=int_in(1), default=None, metavar="N",
                   help="model-guided strategies stop a workload after N trials without a new best "
                   "(default: never)")
    p.add_argument("--confirm", type=int_in(0), default=3, metavar="K",
                   help="after measuring, time the K fastest configs twice more each, interleaved; a "
                   "config measured several times counts by its median, so the best-known schedule is "
                   "the one fastest on repeat, not the luckiest run (default 3; 0: off)")
    p.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="build and run candidates on the Dask cluster whose scheduler is at ADDRESS "
                   "(e.g. tcp://host:8786; its workers declare what they measure, see README)")
    p.add_argument("--workers", type=int_in(1), default=None, metavar="N",
                   help="build and run candidates on a Dask LocalCluster of N worker processes started "
                   "here (one thread and one runner each)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object on stdout (every other line goes to stderr)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_output_args(p)
    from .model import add_model_args, add_rerank_arg

    add_model_args(p)
    add_rerank_arg(p, tuning=True)
    return p


# Ctrl-C: every measurement is committed as it is taken, so a rerun tops up to --trials
INTERRUPTED = "; the measurements stored so far are kept, rerun the same command to resume"


def main(argv: list[str] | None = None, prog: str = "tune.py") -> int:
    return run_cli(build_parser(prog), with_output(_main), argv, INTERRUPTED)


def _main(args: argparse.Namespace) -> int:
    if args.model is None and args.op is None and args.shape is None and not args.default_ops:
        args.model = DEFAULT_MODEL
        if args.trials is None:
            args.trials = DEFAULT_MODEL_TRIALS
    if args.model is not None:
        from .model import run_model_tuning

        return run_model_tuning(args)
    return _run(args)


def _workloads(args: argparse.Namespace) -> list:
    if args.op is None:
        if args.shape is not None:
            raise UsageError("--shape needs --op")
        return [make_workload(o, s) for o, s in DEFAULT_WORKLOADS]
    if not args.shape:
        spec = op_spec(args.op)
        raise UsageError(f"--op {args.op} needs --shape {','.join(spec.params)}")
    if args.precision != "fp32":
        from ..te.gemm import gemm_workload
        from ..te.registry import parse_shape

        if args.target != "cuda":
            raise UsageError(f"--precision {args.precision} runs on tensor cores: it needs --target cuda")
        return [gemm_workload(args.op, parse_shape(args.shape), args.precision)]
    return [make_workload(args.op, args.shape)]


def _run(args: argparse.Namespace) -> int:
    if args.strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {args.strategy!r}; valid: {', '.join(STRATEGIES)}")
    trials = DEFAULT_TRIALS if args.trials is None else args.trials
    workloads = _workloads(args)
    for wl in workloads:
        check_workload(wl, workload_label(wl))
    options = TuneOptions(
        trials=trials,
        strategy=args.strategy,
        seed=args.seed,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        time_budget_s=args.time_budget,
        transfer=not args.no_transfer,
        early_stop=args.early_stop,
        confirm=args.confirm,
    )
    per_target: list[tuple] = []
    # (a kind or a cluster that cannot measure: nothing written)
    with measuring(args.target, options.run, args.cluster, args.workers) as places:
        db = open_db(args.db)
        for target, builder, runner, make in places:
            if len(places) > 1:
                print(f"target {target.key}: {target.describe()}", flush=True)
            summaries = []
            for wl in workloads:
                s = tune_workload(wl, target, db, options, builder, runner, make(wl) if make else None)
                summaries.append(s)
                print(
                    f"{s.workload}: {s.trials} trials in DB ({s.new_trials} new, {s.valid} valid, "
                    f"{s.errors} errors), "
                    f"best {s.best_gflops:.1f} GFLOP/s, {s.elapsed_s:.1f} s",
                    flush=True,
                )
                print(f"{s.workload}: runner busy {s.runner_busy:.0%} of the wall time", flush=True)
            per_target.append((target, summaries))
    db.close()
    new = sum(s.new_trials for _, summaries in per_target for s in summaries)
    print(f"wrote {new} new measurements to {args.db}; "
          f"next: autotune bench --db {args.db}  (best-known kernels against numpy), "
          f"autotune report --db {args.db} -o report.html", flush=True)
    if args.json:
        outs = [_json_summary(summaries, target, args.db) for target, summaries in per_target]
        emit_json(outs[0] if len(outs) == 1 else {"targets": outs, "db": args.db})
    return 0


def _json_summary(summaries: list, target, db_path: str) -> dict:  # noqa: ANN001
    if len(summaries) == 1:
        out = summaries[0].to_json()
    else:
        out = {
            "workload": [s.workload for s in summaries],
            "trials": sum(s.trials for s in summaries),
            "new_trials": sum(s.new_trials for s in summaries),
            "valid": sum(s.valid for s in summaries),
            "errors": sum(s.errors for s in summaries),
            "best_gflops": {s.workload: round(s.best_gflops, 3) for s in summaries},
            "best_config": {s.workload: s.best_config for s in summaries},
            "tasks": [s.to_json() for s in summaries],
        }
    out["target"] = target.key
    out["target_kind"] = target.kind
    out["db"] = db_path
    return out
