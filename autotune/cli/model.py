"""Command-line pieces shared by ``tune.py --model``, ``compile.py`` and ``bench.py --model``:
model arguments, loading with one-line errors, the model tuning and benchmark runs."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..graph.compiler import (
    LAYOUTS,
    Prepared,
    choose_forms,
    choose_layout,
    compile_model,
    estimated_latency,
    prepare_forms,
)
from ..graph.forms import default_forms
from ..graph.frontend import from_onnx
from ..graph.ir import Graph, GraphError
from ..graph.precision import output_tolerance
from ..graph.winograd import TILE_SIZES
from .common import UsageError, backend_of, int_in, measuring, open_db, open_records, resolve_target
from .limits import check_graph, check_workload
from .output import emit_json

DEFAULT_MODEL_TRIALS = 200
TUNE_RERANK = 4  # tune.py --model: each task's best records timed inside the module at the end
QUIET_GAP_S = 0.2  # idle time before each timed block of bench.py --model (CPU)


PRECISION_HELP = ("matrix products (convolutions, dense layers, attention; with --op: matmul, dense, "
                  "batch_matmul, conv2d) on tensor cores: tf32, or float16/bfloat16 operands summed in "
                  "float32; every other operator and the values between kernels stay float32; --target "
                  "cuda only (default fp32)")


def add_precision_arg(p: argparse.ArgumentParser) -> None:
    """--precision (tune.py, compile.py, bench.py, report)."""
    from ..graph.ops.products import PRECISIONS

    p.add_argument("--precision", choices=PRECISIONS, default="fp32", help=PRECISION_HELP)


def add_model_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """--model, --input-shape, --layout, --winograd, --strassen, --precision."""
    add_precision_arg(p)
    from ..graph.zoo import MODELS

    p.add_argument(
        "--model",
        required=required,
        help=f"an ONNX file, or zoo:NAME for a built-in model ({', '.join(MODELS)}; e.g. zoo:resnet18, "
        "zoo:bert_layer?seq=64)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="fix the dims of a model input with dynamic dims (repeatable)",
    )
    p.add_argument(
        "--layout",
        default="NHWC",
        choices=LAYOUTS,
        help="data layout of convolutions and pools; auto = tune both / compile the one with the lower "
        "estimated latency (default NHWC)",
    )
    p.add_argument(
        "--winograd",
        type=winograd_sizes,
        default=None,
        metavar="M[,M]",
        help="3x3 convolutions of stride 1 or 2 (NHWC) also as Winograd F(MxM,3x3), M = 2 and/or 4: tune.py "
        "tunes every form, compile.py / bench.py take the fastest per convolution; 0 = direct only "
        "(default 2,4)",
    )
    p.add_argument(
        "--strassen",
        type=strassen_levels,
        default=None,
        metavar="on|off|2",
        help="large products by a constant matrix (dense layers) also by one level of Strassen's "
        "algorithm (7/8 of the multiply-adds, rounding a few times the product's), and with 2 also "
        "by two nested levels (49/64): tune.py tunes every way, compile.py / bench.py take the "
        "fastest per product (default: on for cpu, off for cuda)",
    )


def strassen_levels(text: str) -> int:
    """``on`` / ``off`` / ``2`` (also 1 / 0): the most levels of Strassen's algorithm to try."""
    value = {"on": 1, "1": 1, "off": 0, "0": 0, "2": 2}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: on, off or 2")
    return value


def model_forms(kind: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The algorithm forms ``--winograd`` and ``--strassen`` ask for on a target of ``kind``."""
    return default_forms(kind, args.winograd, getattr(args, "strassen", None))


def winograd_sizes(text: str) -> tuple[int, ...]:
    """``--winograd 2,4`` -> (2, 4); ``0`` or empty -> ()."""
    try:
        sizes = tuple(sorted({int(x) for x in text.replace(" ", "").split(",") if x and x != "0"}))
    except ValueError:
        sizes = (-1,)
    if any(m not in TILE_SIZES for m in sizes):
        raise argparse.ArgumentTypeError(
            f"{text!r}: tile sizes are {' and '.join(map(str, TILE_SIZES))}, comma-separated (0: none)"
        )
    return sizes


def add_rerank_arg(p: argparse.ArgumentParser, tuning: bool = False) -> None:
    """--rerank (tune.py: stored picks; compile.py, bench.py: timed at every compile)."""
    if tuning:
        p.add_argument(
            "--rerank",
            type=int_in(1),
            default=TUNE_RERANK,
            metavar="K",
            help="CPU models: at the end, time each subgraph's K best records inside the compiled "
            "module and store in the DB which one it takes there; compile.py takes those picks while "
            f"they hold (default {TUNE_RERANK}; 1: off)",
        )
        return
    p.add_argument(
        "--rerank",
        type=int_in(1),
        default=1,
        metavar="K",
        help="CPU models: each subgraph takes the fastest of its K best records timed inside the "
        "compiled module now, not its best isolated one or the pick tune.py stored (default 1: off)",
    )


def parse_input_shapes(items: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        parts = [d.strip() for d in dims.replace("x", ",").split(",")]
        if not sep or not name or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(
                f"malformed --input-shape {item!r}: expected NAME=D0,D1,... with positive integers"
            )
        out[name.strip()] = [int(p) for p in parts]
    return out


@dataclass
class LoadedModel:
    """A model named on the command line: its graph and the ONNX form (for onnxruntime)."""

    spec: str
    graph: Graph
    onnx: Any  # ModelProto, or a path
    input_shapes: dict[str, list[int]]


def load(
    spec: str, input_shapes: list[str], precision: str = "fp32", target: str | None = None
) -> LoadedModel:
    """Import ``spec`` (path or zoo:NAME) to compile its products in ``precision`` (on tensor
    cores: a ``target`` of kind cuda); any problem is a UsageError (one line, exit 2)."""
    if precision != "fp32" and target is not None and not target.startswith("cuda"):
        raise UsageError(f"--precision {precision} runs on tensor cores: it needs --target cuda")
    shapes = parse_input_shapes(input_shapes)
    try:
        if spec.startswith("zoo:"):
            from ..graph.zoo import make_model

            try:
                proto: Any = make_model(spec)
            except ValueError as err:
                raise UsageError(str(err)) from None
        else:
            if not spec:
                raise UsageError("--model is empty: name an ONNX file or zoo:NAME")
            if Path(spec).is_dir():
                raise UsageError(f"--model {spec} is a directory, not an ONNX file")
            if Path(spec).exists() and not Path(spec).is_file():
                raise UsageError(f"--model {spec} is not a regular file")
            proto = spec
        graph = from_onnx(proto, shapes)
    except GraphError as err:
        raise UsageError(str(err)) from None
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - whatever a malformed file trips in onnx: it is the input's fault
        why = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise UsageError(f"cannot import {spec}: {type(err).__name__}{': ' + why if why else ''}") from None
    check_graph(graph)
    graph.precision = precision
    return LoadedModel(spec, graph, proto, shapes)


def prepare_layouts(model: LoadedModel, layout: str, forms: Sequence[str] = (),
                    in_place: bool = False) -> list[Prepared]:
    """Every way of the model to tune: each layout, and each algorithm form (Winograd sizes,
    Strassen) of the nodes it fits; ``in_place``: concatenations written in place (as the
    target's compile does)."""
    try:
        layouts = ["NHWC", "NCHW"] if layout == "auto" else [layout]
        ways = [prepare_forms(model.graph, lay, forms, in_place) for lay in layouts]
        # --winograd, --strassen: tune every form of each node; compile takes the fastest
        forms_of = [p for *_, every in ways for p in every.values() if p.forms]
        return [direct for _, direct, _ in ways] + forms_of
    except GraphError as err:
        raise UsageError(str(err)) from None


# --- tune --model -----------------------------------------------------------------------------------
def run_model_tuning(args: argparse.Namespace) -> int:
    """``tune.py --model``: every task of the model under one budget (``--trials``, default
    DEFAULT_MODEL_TRIALS), scheduled by the gradient task scheduler."""
    from ..graph.tuning import tune_model
    from ..search import STRATEGIES, TuneOptions

    if args.op is not None or args.shape is not None:
        raise UsageError("--model and --op/--shape are exclusive")
    if args.strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {args.strategy!r}; valid: {', '.join(STRATEGIES)}")
    trials = DEFAULT_MODEL_TRIALS if args.trials is None else args.trials
    options = TuneOptions(
        trials=trials,
        strategy=args.strategy,
        seed=args.seed,
        batch_size=args.batch_size,
        progress=not getattr(args, "no_progress", False),
        time_budget_s=getattr(args, "time_budget", None),
        transfer=not getattr(args, "no_transfer", False),
        early_stop=getattr(args, "early_stop", None),
        confirm=getattr(args, "confirm", 3),
    )
    # a model that cannot be compiled is refused before a cluster is reached
    known = {args.target: _load_and_prepare(args, args.target)} if args.target != "all" else {}
    cluster, workers = getattr(args, "cluster", None), getattr(args, "workers", None)
    with measuring(args.target, options.run, cluster, workers) as places:
        for target, *_ in places:  # every target's forms before anything is written
            known.setdefault(target.kind, _load_and_prepare(args, target.kind))
        db = open_db(args.db)
        outs = []
        try:
            for target, builder, runner, make in places:
                model, prepared = known[target.kind]
                print(prepared[0].describe() + (f" on {target.describe()}" if len(places) > 1 else ""),
                      flush=True)
                summary = tune_model(prepared, target, db, trials, options, builder, runner,
                                     make_measurer=make)
                chosen = prepared[0]
                if len(prepared) > 1:  # alternatives (layouts, convolution forms): the one compile takes
                    chosen = chosen_form(model, target, db, args)
                    summary.estimated_s = estimated_latency(chosen.tasks, target, db)
                if getattr(args, "rerank", 1) > 1 and cluster is None and target.backend.profiles_modules:
                    summary.module_picks = _store_picks(chosen, target, db, args.rerank)
                outs.append(_report_model_tuning(args, target, summary))
        finally:
            db.close()
    if args.json:  # one JSON document: the target's summary, or every target's
        emit_json(outs[0] if len(outs) == 1 else {"targets": outs, "db": args.db})
    return 0


def _store_picks(prepared: Prepared, target: Any, db: Any, k: int) -> dict:
    """The rerank at the end of a model tuning run (graph/rerank.py), unless the stored picks
    still hold; printed, and returned for the JSON summary."""
    from ..graph.rerank import picks_hold, store_picks

    if picks_hold(prepared, target, db, k):
        print(f"{prepared.graph.name}: module picks: those stored still hold", flush=True)
        return {"k": k, "reranked": False}
    done = store_picks(prepared, target, db, k)
    whole = ""
    if done.module_s is not None:
        base, picked, ratio = done.module_s
        whole = (f" (the module: {picked * 1e3:.3f} against {base * 1e3:.3f} ms with every best record, "
                 f"{ratio:.3f} of its time round by round"
                 + ("" if done.changed else ", too little to keep them") + ")")
    print(f"{prepared.graph.name}: module picks: {len(done.rows)} tasks' {k} best records timed inside the "
          f"module, {len(done.changed)} take a runner-up there{whole}, {done.seconds:.1f} s", flush=True)
    return {"k": k, "reranked": True, "tasks": len(done.rows), "runner_ups": done.changed,
            "module_s": done.module_s, "seconds": round(done.seconds, 2)}


def _load_and_prepare(args: argparse.Namespace, kind: str) -> tuple[LoadedModel, list]:
    """The model loaded and its forms prepared for a target of ``kind``, every task checked against
    the size limits (a UsageError before anything is written)."""
    in_place = backend_of(kind).concat_in_place
    model = load(args.model, args.input_shape, args.precision, kind)
    prepared = prepare_layouts(model, args.layout, model_forms(kind, args), in_place)
    for task in (t for form in prepared for t in form.tasks):  # as each is tuned (layouts, Winograd)
        check_workload(task.workload, task.label)
    return model, prepared


def _report_model_tuning(args: argparse.Namespace, target: Any, summary: Any) -> dict:
    """Print a target's tuning summary and next steps; return its JSON form."""
    est = summary.estimated_s
    print(
        f"{summary.model}: {summary.trials} trials in DB for {len(summary.tasks)} tasks "
        f"({summary.new_trials} new), estimated model latency "
        f"{'-' if est == float('inf') else f'{est * 1e3:.3f} ms'} (the sum of each task's best "
        f"kernel time times its calls), {summary.elapsed_s:.1f} s",
        flush=True,
    )
    if summary.new_trials:
        split = ", ".join(f"{k.replace('_and_', ' and ').replace('_', ' ')} {v:.1f} s"
                          for k, v in summary.seconds.items())
        overlap = (f"; batches of up to {summary.tasks_in_flight} tasks measured at once"
                   if summary.tasks_in_flight > 1 else "")
        print(f"{summary.model}: where the time went: {split}; runner busy {summary.runner_busy:.0%} "
              f"of the wall time{overlap}", flush=True)
    for line in next_steps(args):
        print(line, flush=True)
    out = summary.to_json()
    out.update(target=target.key, target_kind=target.kind, db=args.db)
    return out


def next_steps(args: argparse.Namespace) -> list[str]:
    """The last lines of a model tuning run: what it wrote and the commands that use it."""
    model = args.model if " " not in args.model else repr(args.model)
    target = "" if args.target == "cpu" else f" --target {args.target}"
    return [
        f"wrote: {args.db} (every measurement; a rerun of this command tops it up to --trials)",
        f"next:  autotune compile --model {model} --db {args.db}{target} --check   "
        "(build the model from the best schedules and check it)",
        f"       autotune bench --model {model} --db {args.db}{target}   (time it against the baseline)",
        f"       autotune report --db {args.db} --model {model} -o report.html   (tuning curves, "
        "schedules)",
    ]


def chosen_form(model: LoadedModel, target: Any, db: Any, args: argparse.Namespace) -> Prepared:
    """The preparation compile.py would take from ``db`` (layout and convolution forms)."""
    forms = model_forms(target.kind, args)
    if args.layout == "auto":
        return choose_layout(model.graph, target, db, forms=forms)
    return choose_forms(model.graph, target, db, args.layout, forms)


# --- compile ------------------------------------------------------------------------------------------
def build_module(
    model: LoadedModel,
    target: Any,
    db: Any,
    layout: str,
    rerank: int = 1,
    winograd: Sequence[int] | None = None,
    strassen: int | None = None,
) -> Any:
    if rerank < 1:
        raise UsageError(f"--rerank must be >= 1, got {rerank}")
    try:
        return compile_model(
            model.graph, target, db, layout=layout, verbose=False, rerank=rerank, winograd=winograd,
            strassen=strassen,
        )
    except GraphError as err:
        raise UsageError(str(err)) from None


def onnxruntime_session(model: LoadedModel, threads: int | None = None) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise UsageError("onnxruntime is not installed (pip install onnxruntime)") from None
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    src = model.onnx.SerializeToString() if hasattr(model.onnx, "SerializeToString") else str(model.onnx)
    try:
        return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types for models it cannot run
        why = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise UsageError(f"onnxruntime cannot run {model.spec}: {why}") from None


def reference_outputs(model: LoadedModel, feeds: dict) -> tuple[list[np.ndarray], str]:
    """The model's outputs from onnxruntime, or from the numpy reference interpreter where
    onnxruntime is not installed (the GPU machine's image) or cannot run the model; and which one
    it was."""
    if importlib.util.find_spec("onnxruntime") is not None:
        try:
            session = onnxruntime_session(model)
        except UsageError:
            session = None
        try:
            if session is not None:
                return session.run(None, feeds), "onnxruntime"
        except Exception:  # noqa: BLE001 - e.g. an element type onnxruntime's numpy bridge lacks (int4)
            pass
    from ..graph.interpreter import run_graph

    return run_graph(model.graph, feeds), "numpy reference interpreter"


def compare(outputs: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    """(max abs error, the same relative to the largest reference magnitude)."""
    err = max(
        (float(np.max(np.abs(o.astype(np.float64) - r))) for o, r in zip(outputs, reference)), default=0.0
    )
    scale = max((float(np.max(np.abs(r))) for r in reference if r.size), default=1.0)
    return err, err / max(scale, 1e-30)


# --- bench --model ------------------------------------------------------------------------------------
def _compile_and_run(args: argparse.Namespace, model: LoadedModel, target: Any) -> tuple[Any, dict, list]:
    """The module built from the DB's best schedules, its random inputs, and its outputs on them."""
    db, target, nearest = open_records(args.db, target, getattr(args, "exact_target", False))
    try:
        module = build_module(model, target, db, args.layout, getattr(args, "rerank", 1), args.winograd,
                              args.strassen)
    finally:
        db.close()
    print(f"target: {target.describe()} [{target.key}]", flush=True)
    print(module.summary.line() + nearest, flush=True)
    feeds = module.random_inputs(np.random.default_rng(getattr(args, "seed", 0)))
    return module, feeds, module.run(feeds)


def run_model_bench(args: argparse.Namespace) -> int:
    """``bench.py --model``: compile with the best-known schedules, check against onnxruntime on the
    same random inputs, time both in one run."""
    from .bench import time_callable

    model = load(args.model, args.input_shape, args.precision, args.target)
    target = resolve_target(args.target)
    if target.backend.benched_against_torch:
        return run_model_bench_cuda(args, model, target)
    session = onnxruntime_session(model)  # before compiling: a model it cannot run is refused at once
    module, feeds, ours = _compile_and_run(args, model, target)
    ref = session.run(None, feeds)
    err, rel = compare(ours, ref)
    # repeats interleaved (ours, onnxruntime, ours, ...) so a change in machine load hits both sides;
    # a quiet gap before each: onnxruntime's pool threads spin on after a run (and OpenMP's after
    # ours), and on a small machine they would take the cores from the other side's first runs
    ours_t: list[float] = []
    ort_t: list[float] = []
    ours_c_t: list[float] = []
    for _ in range(args.repeat):
        time.sleep(QUIET_GAP_S)
        ours_t += time_callable(module.run, [feeds], 1, args.min_repeat_ms)
        time.sleep(QUIET_GAP_S)
        ort_t += time_callable(lambda f: session.run(None, f), [feeds], 1, args.min_repeat_ms)
        time.sleep(QUIET_GAP_S)
        ours_c_t += module.time(feeds, repeat=1, min_repeat_ms=args.min_repeat_ms)
    ours_s, ort_s, ours_c = (statistics.median(t) for t in (ours_t, ort_t, ours_c_t))
    ok = rel <= output_tolerance(model.graph.precision)
    print(
        f"{model.graph.name}: ours {ours_s * 1e3:.3f} ms, onnxruntime {ort_s * 1e3:.3f} ms, "
        f"ours/onnxruntime speedup {ort_s / ours_s:.2f}x; max abs err {err:.2e} (relative {rel:.1e})"
        + ("" if ok else "  WRONG OUTPUT"),
        flush=True,
    )
    if args.json:
        s = module.summary
        emit_json({
            "model": model.graph.name,
            "model_spec": model.spec,
            "target": target.key,
            "target_kind": target.kind,
            "db": args.db,
            "layout": s.layout,
            "latency_s": ours_s,
            "latency_c_s": ours_c,
            "baseline": "onnxruntime",
            "baseline_version": _ort_version(),
            "baseline_latency_s": ort_s,
            "speedup": ort_s / ours_s,
            "tuned_subgraphs": s.tuned_calls,
            "fallback_subgraphs": s.calls - s.tuned_calls,
            "fallback": s.fallback,
            "tasks": s.tasks,
            "tuned_tasks": s.tuned_tasks,
            "peak_arena_bytes": s.arena_bytes,
            "naive_intermediate_bytes": s.naive_bytes,
            "max_abs_err": err,
            "max_rel_err": rel,
            "ok": ok,
        })
    return 0 if ok else 1


def run_model_bench_cuda(args: argparse.Namespace, model: LoadedModel, target: Any) -> int:
    """``bench.py --model --target cuda``: our CUDA module (one CUDA graph per run) against PyTorch
    eager and ``torch.compile`` on the same device and inputs; outputs checked against onnxruntime
    (the numpy reference interpreter where onnxruntime is not installed)."""
    from ..graph.torch_eager import CUDNN_BENCHMARK_MODES, TorchModel, faster_mode

    module, feeds, ours = _compile_and_run(args, model, target)
    ref, ref_name = reference_outputs(model, feeds)
    err, rel = compare(ours, ref)
    torch_model = TorchModel(model.graph, "cuda", model.graph.precision)
    t_err, _ = compare(torch_model.run(feeds), ref)
    cudnn = torch_model.torch.backends.cudnn
    ours_t: list[float] = []
    eager_by_mode: dict[bool, list[float]] = {m: [] for m in CUDNN_BENCHMARK_MODES}
    for _ in range(args.repeat):  # interleaved, as on the CPU; eager under both cuDNN settings
        ours_t += module.time(feeds, repeat=1, min_repeat_ms=args.min_repeat_ms)
        for mode in CUDNN_BENCHMARK_MODES:
            cudnn.benchmark = mode
            eager_by_mode[mode] += torch_model.time(feeds, repeat=1, min_repeat_ms=args.min_repeat_ms)
    mode = faster_mode(eager_by_mode)
    cudnn.benchmark = mode
    eager_t = eager_by_mode[mode]
    compile_mode = getattr(args, "torch_compile_mode", "max-autotune")
    compiled_s: float | None = None
    compile_note = "not timed (--torch-compile-mode none)"
    if compile_mode != "none":
        try:
            compiled_s = statistics.median(torch_model.time(
                feeds, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, compiled=True,
                mode=None if compile_mode == "default" else compile_mode))
            compile_note = ""
        except Exception as exc:  # noqa: BLE001 - torch.compile is optional: report why it is missing
            compile_note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    ours_s, eager_s = statistics.median(ours_t), statistics.median(eager_t)
    ok = rel <= output_tolerance(model.graph.precision)
    print(
        f"{model.graph.name}: ours {ours_s * 1e3:.3f} ms, PyTorch eager {eager_s * 1e3:.3f} ms "
        f"(speedup {eager_s / ours_s:.2f}x)"
        + (f", torch.compile {compile_mode} {compiled_s * 1e3:.3f} ms ({compiled_s / ours_s:.2f}x)"
           if compiled_s else
           f", torch.compile unavailable ({compile_note})")
        + f"; max abs err {err:.2e} vs {ref_name} (relative {rel:.1e})" + ("" if ok else "  WRONG OUTPUT"),
        flush=True,
    )
    if args.json:
        s = module.summary
        emit_json({
            "model": model.graph.name, "model_spec": model.spec, "target": target.key,
            "target_kind": target.kind, "db": args.db, "layout": s.layout,
            "latency_s": ours_s, "baseline": "torch_eager", "baseline_latency_s": eager_s,
            "precision": model.graph.precision,
            "baseline_settings": _torch_settings(model.graph.precision) + ", cudnn.benchmark "
                                 + ("on" if mode else "off") + " (the faster of both)",
            "torch_compile_mode": compile_mode,
            "eager_latency_s_by_cudnn_benchmark": {
                ("on" if m else "off"): statistics.median(c) for m, c in eager_by_mode.items()
            },
            "speedup": eager_s / ours_s, "torch_compile_latency_s": compiled_s,
            "torch_compile_speedup": compiled_s / ours_s if compiled_s else None,
            "torch_compile_note": compile_note,
            "tuned_subgraphs": s.tuned_calls, "fallback_subgraphs": s.calls - s.tuned_calls,
            "fallback": s.fallback, "tasks": s.tasks, "tuned_tasks": s.tuned_tasks,
            "peak_arena_bytes": s.arena_bytes, "naive_intermediate_bytes": s.naive_bytes,
            "max_abs_err": err, "max_rel_err": rel, "reference": ref_name,
            "torch_max_abs_err": t_err, "ok": ok,
        })
    return 0 if ok else 1


def _torch_settings(precision: str) -> str:
    return {"fp32": "fp32 (TF32 off in cuBLAS and cuDNN)", "tf32": "fp32 with TF32 on in cuBLAS and cuDNN",
            "fp16": "the whole model in float16", "bf16": "the whole model in bfloat16"}[precision]


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def eprint(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
