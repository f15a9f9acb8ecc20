#!/usr/bin/env python3
"""Compare search strategies: trials needed to reach 95% of the best-known config.

Replay (default): every workload of a fully measured records DB (tests/data/replay_cpu.jsonl.gz,
made by scripts/make_replay_db.py), several seeds, strategies
  random         uniform sampling
  xgb            XGBoost ranker + simulated annealing, no transfer
  xgb+transfer   the same, seeded with the records of the *other* workloads (leave-one-out)
  sklearn        random-forest regressor + the same search, no transfer
prints per-workload and overall medians, the ranking quality (Spearman of predicted vs measured
throughput on each held-out workload), the feature-extraction time, and writes a tuning-curve PNG.

Real hardware (--real): tunes one workload (default matmul 1024x1024x1024) on this CPU with each
strategy into its own fresh DB, e.g. xgb for 200 trials against random for 600:
    python scripts/bench_search.py --real --trials 200 --random-trials 600
That takes a long time (hours for 1024^3 on a small machine); it is not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from autotune.cli.common import ArgParser  # noqa: E402
from autotune.parallel import fork_map  # noqa: E402
from autotune.search.replay import ReplayDB, ReplayTask, replay_tune, trials_to_reach  # noqa: E402
from cost_model import Sample, make_model, spearman  # noqa: E402
from cost_model.features import extract  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPLAY = ROOT / "tests" / "data" / "replay_cpu.jsonl.gz"
STRATEGIES = {  # name -> (tuner strategy, transfer)
    "random": ("random", False),
    "xgb": ("xgb", False),
    "xgb+transfer": ("xgb", True),
    "sklearn": ("sklearn", False),
}


def _json_object(text: str) -> dict:
    """--tuner-options: a JSON object, read once when the arguments are parsed."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("a JSON object is needed, e.g. '{\"eps\": 0.2}'")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="bench_search.py", description=__doc__,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replay", default=str(DEFAULT_REPLAY), help="fully measured records (DB or .jsonl.gz)")
    p.add_argument("--workloads", help="';'-separated labels (or op names) of the replay workloads to use "
                   "(default all), e.g. 'matmul;dense[74,88,53]'")
    p.add_argument("--seeds", type=int, default=5, help="seeds per workload and strategy (default 5)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds run from this one (default 0): a "
                   "second run with fresh seeds checks the first")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help=f"of {', '.join(STRATEGIES)}")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--fraction", type=float, default=0.95, help="target: this fraction of the best (0.95)")
    p.add_argument("--curve", type=int, default=96, help="trials on the tuning curve (default 96)")
    p.add_argument("--max-transfer", type=int, default=1500, help="transfer samples per run (default 1500)")
    p.add_argument("--transfer-extra", help="records of more workloads (DB or .jsonl.gz) that join every "
                   "run's transfer pool, as a tuning DB holding more workloads would (the benchmark's own "
                   "workload/target pairs are skipped)")
    p.add_argument("--tuner-options", default="{}", type=_json_object,
                   help='JSON keyword options of the model-guided tuners, e.g. \'{"eps": 0.2}\'')
    p.add_argument("--png", default="bench_search.png", help="tuning-curve plot (default bench_search.png)")
    p.add_argument("--json", help="write every run's costs and the summary here")
    p.add_argument("--quiet", action="store_true", help="no per-run lines")
    p.add_argument("--jobs", type=int, default=1, help="replay runs in this many processes (default 1)")
    real = p.add_argument_group("real hardware")
    real.add_argument("--real", action="store_true", help="tune on this CPU instead of replaying")
    real.add_argument("--op", default="matmul")
    real.add_argument("--shape", default="1024,1024,1024")
    real.add_argument("--trials", type=int, default=200, help="trials of the model-guided strategies")
    real.add_argument("--random-trials", type=int, default=600, help="trials of random search")
    real.add_argument("--transfer-db", default=str(DEFAULT_REPLAY),
                      help="records that seed xgb+transfer (DB or .jsonl.gz)")
    real.add_argument("--seed", type=int, default=0, help="tuning seed of every strategy (default 0): "
                      "a second run with another seed checks the first")
    real.add_argument("--db-dir", help="keep each strategy's DB here (default: a temporary folder)")
    real.add_argument("--remeasure", type=int, default=5,
                      help="after tuning, re-measure each strategy's fastest configs this many rounds, "
                           "interleaved, and compare those times (default 5; 0: compare the tuning "
                           "measurements only)")
    real.add_argument("--finalists", type=int, default=3,
                      help="fastest configs per strategy that are re-measured (default 3)")
    return p


# --- replay ---------------------------------------------------------------------------------------
def _config_features(tasks: list[ReplayTask], item: tuple[int, str]) -> np.ndarray | None:
    task = tasks[item[0]]
    try:
        return extract(task.workload, task.space.steps(task.records[item[1]].config), task.target)
    except Exception:  # noqa: BLE001 - an illegal schedule: no features
        return None


def tasks_features(tasks: list[ReplayTask]) -> dict[str, tuple[dict[str, np.ndarray | None], list[Sample]]]:
    """Per task key: features of every recorded config (the tuner's cache) and its samples;
    lowered in forked workers where the machine has cores to spare."""
    items = [(i, key) for i, t in enumerate(tasks) for key in t.records]
    rows = iter(fork_map(_config_features, tasks, items))
    out = {}
    for task in tasks:
        cache: dict[str, np.ndarray | None] = {}
        samples = []
        group = f"{task.workload.key}/{task.target.key}"
        for key, rec in task.records.items():
            f = cache[key] = next(rows)
            if f is not None:
                samples.append(Sample(f, group, rec.mean_s))
        out[task.key] = (cache, samples)
    return out


def subsample(samples: list[Sample], limit: int, seed: int) -> list[Sample]:
    """At most ``limit`` samples, split evenly over groups, each group's best kept."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    per = max(2, limit // max(1, len(groups)))
    rng = np.random.default_rng(seed)
    out = []
    for g in sorted(groups):
        ss = sorted(groups[g], key=lambda s: s.cost_s)
        if len(ss) > per:
            top = max(1, per // 8)
            rest = rng.choice(len(ss) - top, size=per - top, replace=False) + top
            ss = ss[:top] + [ss[i] for i in sorted(rest)]
        out += ss
    return out


def best_so_far(costs: list[float], best_s: float, n: int) -> list[float]:
    """Normalized throughput of the best config found after 1..n trials (flat after the run ends)."""
    out, cur = [], math.inf
    for i in range(n):
        if i < len(costs):
            cur = min(cur, costs[i])
        out.append(best_s / cur if math.isfinite(cur) else 0.0)
    return out


def run_replay(args: argparse.Namespace) -> dict:
    replay = ReplayDB(args.replay)
    tasks = replay.tasks()
    if args.workloads:
        wanted = [w for w in args.workloads.split(";") if w]
        missing = [w for w in wanted if not any(w in (t.label, t.workload.name) for t in tasks)]
        if missing:
            raise SystemExit(f"error: no replay workload {', '.join(missing)}; "
                             f"have: {'; '.join(t.label for t in tasks)}")
        tasks = [t for t in tasks if t.label in wanted or t.workload.name in wanted]
    strategies = args.strategies.split(",")
    for s in strategies:
        if s not in STRATEGIES:
            raise SystemExit(f"error: unknown strategy {s!r}; valid: {', '.join(STRATEGIES)}")
    print(f"replay {args.replay}: {len(tasks)} workloads, {args.seeds} seeds, "
          f"strategies {', '.join(strategies)}")

    t0 = time.perf_counter()
    feats = tasks_features(tasks)
    n_feat = sum(len(c) for c, _ in feats.values())
    extra: list[Sample] = []
    more: list[ReplayTask] = []
    if args.transfer_extra:
        more = [t for t in ReplayDB(args.transfer_extra).tasks() if t.key not in feats]
        extra = [s for _, ss in tasks_features(more).values() for s in ss]
        n_feat += sum(len(t.records) for t in more)
        print(f"transfer pool: the other benchmark workloads and {len(more)} of {args.transfer_extra}")
    dt = time.perf_counter() - t0
    each = dt / max(1, n_feat)
    print(f"features: {n_feat} candidates lowered + extracted in {dt:.1f} s ({1000 * each:.1f} ms each; "
          f"a batch of 512 ~ {512 * each:.1f} s)")
    global _RUN_CONTEXT
    _RUN_CONTEXT = (replay, {t.key: t for t in tasks}, feats, extra, args)
    # fork the workers before this process trains any model: xgboost's OpenMP runtime does not
    # survive a fork once started (the children hang)
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    runs: list[dict] = []
    try:
        ranking = ranking_quality(tasks, feats, extra, args.max_transfer)
        for task in tasks:
            best = task.best_s
            size = len(task.records)
            top = task.good_count(args.fraction)
            print(f"\n{task.label}: {size} configs, {top} within {args.fraction:.0%} of the best "
                  f"({task.workload.flops / best / 1e9:.1f} GFLOP/s)")
            for name in strategies:
                seeds = range(args.first_seed, args.first_seed + args.seeds)
                items = [(task.key, name, seed) for seed in seeds]
                results = pool.imap(_one_run, items) if pool is not None else map(_one_run, items)
                hits = []
                for run in results:
                    hit = run["trials_to_target"]
                    hits.append(hit if hit is not None else size + 1)
                    runs.append(run)
                    if not args.quiet:
                        shown = hit if hit is not None else "never"
                        print(f"  {name:13s} seed {run['seed']}: {shown} trials ({run['seconds']:.1f} s)",
                              flush=True)
                print(f"  {name:13s} median {statistics.median(hits):6.1f}  runs {hits}", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        _RUN_CONTEXT = None
    summary = summarize(runs, tasks, strategies, args.fraction)
    curves = {}
    for name in strategies:
        per = [best_so_far([c if c is not None else math.inf for c in r["costs"]],
                           next(t.best_s for t in tasks if t.label == r["workload"]), args.curve)
               for r in runs if r["strategy"] == name]
        curves[name] = np.mean(per, axis=0).tolist() if per else []
    plot(curves, args.png, f"replay: {len(tasks)} workloads x {args.seeds} seeds", args.fraction)
    return {"mode": "replay", "summary": summary, "ranking": ranking, "curves": curves, "runs": runs,
            "transfer_extra": [t.label for t in more],
            "feature_ms": 1000 * dt / max(1, n_feat)}


_RUN_CONTEXT: tuple | None = None  # (replay, tasks by key, features, extra samples, args), set before forking


def _one_run(item: tuple) -> dict:
    """One strategy on one replay task with one seed (runs in a worker with --jobs)."""
    replay, tasks, feats, extra, args = _RUN_CONTEXT  # type: ignore[misc]
    key, name, seed = item
    task = tasks[key]
    strategy, transfer = STRATEGIES[name]
    start = time.perf_counter()
    others = [s for k, (_, ss) in feats.items() if k != key for s in ss] + extra
    samples = subsample(others, args.max_transfer, seed) if transfer else None

    def done(costs: list[float]) -> bool:
        reached = trials_to_reach(costs, task.best_s, args.fraction) is not None
        return reached and len(costs) >= args.curve

    costs = replay_tune(replay, task, strategy, len(task.records), seed=seed, batch_size=args.batch_size,
                        transfer=transfer, transfer_samples=samples, feature_cache=dict(feats[key][0]),
                        tuner_options=args.tuner_options, stop_when=done)
    return {"workload": task.label, "strategy": name, "seed": seed,
            "trials_to_target": trials_to_reach(costs, task.best_s, args.fraction),
            "costs": [c if math.isfinite(c) else None for c in costs],
            "seconds": round(time.perf_counter() - start, 2)}


def random_search_cdf(size: int, good: int, t: int) -> float:
    """P(uniform sampling without replacement from ``size`` configs, ``good`` of them on target,
    hits one within ``t`` trials)."""
    miss = 1.0
    for i in range(min(t, size)):
        miss *= max(0, size - good - i) / (size - i)
    return 1.0 - miss


def random_search_median(spaces: list[tuple[int, int]]) -> int:
    """The exact median trials-to-target of random search pooled over equally weighted spaces
    ((size, good) each): the value that sampled random runs estimate, free of their luck."""
    top = max(size for size, _ in spaces)
    return next(t for t in range(1, top + 1)
                if statistics.fmean(random_search_cdf(n, k, t) for n, k in spaces) >= 0.5)


def median_interval(groups: list[list[float]], level: float = 0.9, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval of the median of all values pooled over ``groups`` (workloads): each
    resample redraws every group's runs with replacement, so every workload keeps its weight."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    if not arrays:
        return math.nan, math.nan
    meds = np.array([np.median(np.concatenate([a[rng.integers(len(a), size=len(a))] for a in arrays]))
                     for _ in range(resamples)])
    lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def summarize(runs: list[dict], tasks: list[ReplayTask], strategies: list[str],
              fraction: float = 0.95) -> dict:
    print(f"\nmedian trials to reach {fraction:.0%} of the best (unreached runs count as space size + 1; "
          "'exact': random search's median computed from the space)")
    labels = [t.label for t in tasks]
    sizes = {t.label: len(t.records) for t in tasks}
    good = {t.label: t.good_count(fraction) for t in tasks}
    width = max(len(x) for x in labels + ["overall"])
    print(" " * width + "".join(f"{s:>14s}" for s in strategies) + f"{'exact':>14s}")
    hits = {(s, w): [r["trials_to_target"] or sizes[w] + 1 for r in runs
                     if r["strategy"] == s and r["workload"] == w] for s in strategies for w in labels}
    table: dict[str, dict[str, float]] = {}
    for label in labels + ["overall"]:
        row = {}
        for s in strategies:
            trials = [t for w in labels if label in ("overall", w) for t in hits[s, w]]
            row[s] = statistics.median(trials) if trials else math.nan
        spaces = [(sizes[w], good[w]) for w in labels if label in ("overall", w) and good[w]]
        exact = row["random_exact"] = random_search_median(spaces) if spaces else math.nan
        table[label] = row
        print(f"{label:{width}s}" + "".join(f"{row[s]:14.1f}" for s in strategies) + f"{exact:14.1f}")
    base = table["overall"].get("random")
    ratios = {}
    intervals = {}
    exact = table["overall"]["random_exact"]
    for s in strategies:
        if s != "random":
            lo, hi = median_interval([hits[s, w] for w in labels])
            intervals[s] = [lo, hi]
            print(f"{s}: {table['overall'][s] / exact:.2f} x random search's exact median trials (overall; "
                  f"90% bootstrap interval of its median over these runs {lo:g}-{hi:g} trials, "
                  f"{lo / exact:.2f}-{hi / exact:.2f} x)")
    if base:
        for s in strategies:
            if s != "random":
                ratios[s] = table["overall"][s] / base
                print(f"{s}: {ratios[s]:.2f} x random's median trials (overall)")
        # also the median over workloads of the per-workload ratio
        for s in strategies:
            if s != "random":
                per = [table[w][s] / table[w]["random"] for w in labels if table[w]["random"]]
                print(f"{s}: median over workloads of (its median / random's median) = "
                      f"{statistics.median(per):.2f}")
    if "xgb" in strategies and "xgb+transfer" in strategies:
        helped = [w for w in labels if table[w]["xgb+transfer"] < table[w]["xgb"]]
        hurt = [w for w in labels if table[w]["xgb+transfer"] > table[w]["xgb"]]
        print(f"transfer helped on: {', '.join(helped) or '-'}; hurt on: {', '.join(hurt) or '-'}")
    return {"medians": table, "ratios_vs_random": ratios, "median_intervals": intervals}


def ranking_quality(tasks: list[ReplayTask], feats: dict, extra: list[Sample], limit: int) -> dict:
    """Spearman of predicted vs measured throughput on each workload, trained on the others (and
    the extra transfer pool)."""
    if len(tasks) < 2:
        return {}
    print("\nranking quality on a held-out workload (Spearman, predicted vs measured throughput)")
    out: dict[str, dict[str, float]] = {}
    for task in tasks:
        train = subsample([s for k, (_, ss) in feats.items() if k != task.key for s in ss] + extra, limit, 0)
        test = feats[task.key][1]
        X = np.stack([s.features for s in test])
        y = np.array([1.0 / s.cost_s if math.isfinite(s.cost_s) and s.cost_s > 0 else 0.0 for s in test])
        row = {}
        for name in ("xgb", "sklearn"):
            model = make_model(name)
            model.fit(train)
            row[name] = spearman(model.predict(X), y)
        out[task.label] = row
        print(f"  {task.label}: " + ", ".join(f"{k} {v:+.3f}" for k, v in row.items()))
    for name in ("xgb", "sklearn"):
        print(f"  mean {name}: {statistics.mean(r[name] for r in out.values()):+.3f}")
    return out


def plot(curves: dict[str, list[float]], path: str, title: str, fraction: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install matplotlib, or the 'plot' extra): no {path}")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name)
    ax.axhline(fraction, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("trials")
    ax.set_ylabel("best so far / best known (throughput)")
    ax.set_title(title)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


# --- real hardware --------------------------------------------------------------------------------
def run_real(args: argparse.Namespace) -> dict:
    from autotune.measure import Builder, CpuRunner
    from autotune.search import TuneOptions, tune_workload
    from autotune.search.replay import open_records
    from autotune.target import cpu_target
    from autotune.te import make_workload
    from records import TuningDatabase

    wl = make_workload(args.op, args.shape)
    target = cpu_target()
    strategies = args.strategies.split(",")
    folder = Path(args.db_dir or tempfile.mkdtemp(prefix="bench_search_"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"real: {args.op} {args.shape} on {target.describe()}, seed {args.seed}; DBs in {folder}")
    curves_s: dict[str, list[float]] = {}
    finalists: dict[str, list[dict]] = {}
    results = {}
    with Builder() as builder, CpuRunner() as runner:
        for name in strategies:
            strategy, transfer = STRATEGIES[name]
            trials = args.random_trials if name == "random" else args.trials
            path = folder / f"{name.replace('+', '_')}.db"
            db = TuningDatabase(path)
            if transfer:  # seed the fresh DB with the transfer records (other workloads)
                src = open_records(args.transfer_db)
                for w in src.workloads():
                    db.add_workload(w["key"], w["name"], w["description"], w["flops"])
                for t in src.targets():
                    db.add_target(t["key"], t["kind"], t["fingerprint"])
                db.add_measurements(r for r in src.measurements() if r.workload_key != wl.key)
                src.close()
            start = time.perf_counter()
            # confirm=0: the finalists are re-measured below, all strategies' together
            opts = TuneOptions(trials=trials, strategy=strategy, seed=args.seed, transfer=transfer,
                               progress=True, confirm=0, tuner_options=args.tuner_options)
            s = tune_workload(wl, target, db, opts, builder, runner)
            rows = db.measurements(wl.key, target.key)
            curves_s[name] = [r.mean_s for r in rows]
            finalists[name] = [r.config for r in sorted(rows, key=lambda r: r.mean_s)[: args.finalists]]
            results[name] = {"trials": s.trials, "best_gflops": s.best_gflops,
                             "seconds": round(time.perf_counter() - start, 1)}
            print(f"{name}: {s.trials} trials, best {s.best_gflops:.2f} GFLOP/s, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
            db.close()
        again = remeasure(wl, target, builder, runner, finalists, args.remeasure)
    best = min(min(c) for c in curves_s.values() if c)
    for name, costs in curves_s.items():
        hit = trials_to_reach(costs, best, args.fraction)
        results[name]["trials_to_target"] = hit
        at = {n: wl.flops / min(costs[:n]) / 1e9 for n in (args.trials, args.random_trials)
              if len(costs) >= n}
        when = f"after {hit} trials" if hit is not None else f"never in its {len(costs)} trials"
        print(f"{name}: reaches {args.fraction:.0%} of the best found by any strategy {when}; "
              + ", ".join(f"best at {n}: {g:.2f} GFLOP/s" for n, g in at.items()))
    for name, per_config in again.items():
        results[name]["remeasured"] = per_config
        results[name]["remeasured_best_gflops"] = max(c["gflops"] for c in per_config)
    if "xgb" in results and "random" in results:
        for key, what in (("best_gflops", "best tuning measurement"),
                          ("remeasured_best_gflops", f"finalists re-measured {args.remeasure}x interleaved")):
            if key not in results["xgb"] or key not in results["random"]:
                continue
            x, r = results["xgb"][key], results["random"][key]
            print(f"{what}: xgb at {args.trials} trials {x:.2f} GFLOP/s {'>=' if x >= r else '<'} "
                  f"random at {args.random_trials} {r:.2f} GFLOP/s ({x / r:.3f}x)")
    n = max(len(c) for c in curves_s.values())
    curves = {k: best_so_far(c, best, n) for k, c in curves_s.items()}
    plot(curves, args.png, f"real: {args.op} {args.shape}", args.fraction)
    return {"mode": "real", "seed": args.seed, "target": target.describe(), "results": results,
            "curves": curves}


def remeasure(wl: Any, target: Any, builder: Any, runner: Any, finalists: dict[str, list[dict]],
              rounds: int) -> dict[str, list[dict]]:
    """Measure every strategy's finalist configs again, ``rounds`` times in a shuffled interleaved
    order, so that all are timed under the same conditions. The best of hundreds of noisy tuning
    measurements overstates a config (the more trials, the more it does); the median of these
    rounds does not. Timed with the runner's default options (3 repeats of at least 50 ms each,
    against tuning's 10 ms: longer, steadier runs). Per strategy: [{"config", "gflops" (median over
    rounds), "rounds_gflops"}]."""
    from autotune.search.measure_batch import WorkloadMeasurer
    from records import config_key
    from schedules import make_space

    if rounds <= 0:
        return {}
    space = make_space(wl, target)
    configs = {config_key(c): c for cs in finalists.values() for c in cs}
    keys = list(configs)
    times: dict[str, list[float]] = {k: [] for k in keys}
    measurer = WorkloadMeasurer(wl, target, builder, runner)
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        order = [keys[i] for i in rng.permutation(len(keys))]
        batch = [configs[k] for k in order]
        for trial in measurer.measure(batch, [space.steps(c) for c in batch]):
            times[config_key(trial.config)].append(trial.mean_s)
    out: dict[str, list[dict]] = {}
    for name, cs in finalists.items():
        rows = []
        for c in cs:
            g = [wl.flops / t / 1e9 if math.isfinite(t) and t > 0 else 0.0 for t in times[config_key(c)]]
            rows.append({"config": c, "gflops": float(np.median(g)), "rounds_gflops": g})
        out[name] = rows
        print(f"{name}: finalists re-measured {rounds}x: "
              + ", ".join(f"{r['gflops']:.2f}" for r in rows) + " GFLOP/s (medians)")
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = run_real(args) if args.real else run_replay(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
