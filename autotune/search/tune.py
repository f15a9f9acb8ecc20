"""Tune one workload: propose configs, measure them, commit every result to the records DB."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from records import CONFIRM_LABEL, MeasurementRecord, TuningDatabase, config_key
from records.owner import process_owner
from schedules import make_space

from ..measure import Builder, CpuRunner, RunOptions
from ..target import Target
from ..te import Workload
from .confirm import confirm_finalists, missing_confirmations
from .context import TuneContext
from .measure_batch import Trial, WorkloadMeasurer
from .tuner import Tuner, make_tuner

log = logging.getLogger("autotune.tune")


@dataclass(frozen=True)
class TuneOptions:
    trials: int = 32  # total measurements wanted for this (workload, target) in the DB
    strategy: str = "random"
    seed: int = 0
    batch_size: int = 8
    run: RunOptions = field(default_factory=lambda: RunOptions(repeat=3, min_repeat_ms=10.0, timeout_s=20.0))
    progress: bool = True
    time_budget_s: float | None = None  # stop starting new batches after this many seconds
    transfer: bool = True  # model-guided strategies learn from other workloads/targets in the DB
    early_stop: int | None = None  # model-guided strategies stop after this many trials without gain
    # after a run that measured something: the `confirm` fastest configs are measured
    # `confirm_rounds` more times, interleaved (see confirm_finalists); 0 turns it off
    confirm: int = 3
    confirm_rounds: int = 2
    tuner_options: dict = field(default_factory=dict)  # keyword options of model-guided tuners


__all__ = ["CONFIRM_LABEL", "TuneOptions", "TuneSummary", "confirm_finalists", "tune_workload"]
CLAIM_WAIT_S = 0.5  # the budget is held by other tuners' claims: look again after this long


@dataclass
class TuneSummary:
    workload: str
    workload_key: str
    target_key: str
    trials: int  # configs measured in the DB for this (workload, target) now
    new_trials: int  # measured by this call
    valid: int
    errors: int
    best_s: float
    best_gflops: float
    best_config: dict | None
    space_size: int
    elapsed_s: float
    errors_by_kind: dict = field(default_factory=dict)
    confirmations: int = 0  # re-measurements of finalists in the DB (tuner label "confirm")
    unconfirmed: int = 0  # finalists still lacking confirmations (a rerun finishes them)
    best_spread: float | None = None  # noise figure of the best record: (max - min) / median of its runs
    seconds: dict = field(default_factory=dict)  # render / build / run / search+db of this call
    runner_busy: float = 0.0  # fraction of the wall time the runners were running kernels

    def to_json(self) -> dict:
        return {
            "workload": self.workload,
            "workload_key": self.workload_key,
            "target": self.target_key,
            "trials": self.trials,
            "new_trials": self.new_trials,
            "valid": self.valid,
            "errors": self.errors,
            "errors_by_kind": self.errors_by_kind,
            "confirmations": self.confirmations,
            "unconfirmed_finalists": self.unconfirmed,
            "best_spread": None if self.best_spread is None else round(self.best_spread, 4),
            "best_gflops": round(self.best_gflops, 3),
            "best_s": None if math.isinf(self.best_s) else self.best_s,
            "best_config": self.best_config,
            "space_size": self.space_size,
            "elapsed_s": round(self.elapsed_s, 2),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "runner_busy": round(self.runner_busy, 3),
        }


def workload_label(wl: Workload) -> str:
    return f"{wl.name}[{','.join(str(v) for v in wl.params.values())}]"


def register(db: TuningDatabase, wl: Workload, target: Target) -> None:
    db.add_workload(wl.key, workload_label(wl), wl.description(), wl.flops)
    db.add_target(target.key, target.kind, target.fingerprint)


def tune_workload(
    wl: Workload,
    target: Target,
    db: TuningDatabase,
    options: TuneOptions,
    builder: Builder | None,
    runner: CpuRunner | None,
    measurer: WorkloadMeasurer | None = None,
) -> TuneSummary:
    """Measure until the DB holds ``options.trials`` results for (wl, target) or the space runs out
    (or a model-guided tuner stops early). ``measurer`` replaces building and running on this
    machine: anything with WorkloadMeasurer's ``measure`` method, e.g. a replay.ReplayRunner that
    answers from recorded measurements (a measurer with a ``space`` attribute is searched in that
    space: the one its records were measured in)."""
    start = time.perf_counter()
    register(db, wl, target)
    space = getattr(measurer, "space", None) or make_space(wl, target)
    known = db.measured_config_keys(wl.key, target.key)
    todo = max(0, options.trials - len(known))
    context = TuneContext(wl, target, db, transfer=options.transfer, early_stop=options.early_stop,
                          options=dict(options.tuner_options), budget=options.trials)
    tuner = make_tuner(options.strategy, space, options.seed, set(known), context=context)
    label = getattr(tuner, "name", options.strategy)  # e.g. xgb-no-transfer
    best = db.best(wl.key, target.key)
    best_s = best.mean_s if best else math.inf
    new = 0
    bar = _progress(options.progress, todo, workload_label(wl))
    counts = {"valid": 0, "errors": 0}
    owner = process_owner()
    if measurer is None and todo:
        measurer = WorkloadMeasurer(wl, target, builder, runner, options.run)

    def store(trial: Trial) -> None:
        """Commit one result as it arrives (the database is written by this one process)."""
        nonlocal new, best_s
        db.add_measurements([_record(wl, target, trial, label, space.version)], claimed_by=owner)
        new += 1
        counts["errors" if trial.error_kind else "valid"] += 1
        best_s = min(best_s, trial.mean_s)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                valid=counts["valid"],
                errors=counts["errors"],
                best_gflops=f"{wl.flops / best_s / 1e9:.1f}" if best_s < math.inf else "-",
            )

    try:
        if getattr(measurer, "pipelined", False) and todo:
            _tune_pipelined(db, wl, target, tuner, space, measurer, options, owner, known, store, start)
        # Other tuners may share the DB: what is measured and claimed is read again every batch,
        # and a config is measured only once this process holds its claim (see TuningDatabase.claim).
        while not getattr(measurer, "pipelined", False):
            if _out_of_time(options, start):
                break
            measured = db.measured_config_keys(wl.key, target.key, search_only=True)
            _absorb(db, tuner, wl, target, measured - known)
            known |= measured
            left = options.trials - len(measured) - _claimed_by_others(db, wl, target, owner, measured)
            if len(measured) >= options.trials:
                break
            if left <= 0:  # the rest of the budget is being measured by other tuners
                time.sleep(CLAIM_WAIT_S)
                continue
            configs = tuner.next_batch(min(options.batch_size, left))
            if not configs:
                break  # space exhausted
            keys = [config_key(c) for c in configs]
            granted = set(db.claim(wl.key, target.key, keys, owner, budget=options.trials))
            mine = [c for c, k in zip(configs, keys) if k in granted]
            if not mine:
                continue
            trials: list[Trial] = []
            for trial in measurer.measure(mine, [space.steps(c) for c in mine]):
                store(trial)
                trials.append(trial)
            tuner.update([t.config for t in trials], [t.mean_s for t in trials])
            known |= {config_key(t.config) for t in trials}
            log.debug("%s: batch of %d measured (%d failed), %d of %d trials in the DB, best %.1f GFLOP/s",
                      workload_label(wl), len(trials), sum(1 for t in trials if t.error_kind), len(known),
                      options.trials, wl.flops / best_s / 1e9 if best_s < math.inf else 0.0)
        if bar is not None:
            bar.close()
        # other tuners still measuring this pair would load the machine and may still find new
        # finalists: confirmation waits for them
        while _claimed_by_others(db, wl, target, owner, set()) and not _out_of_time(options, start):
            time.sleep(CLAIM_WAIT_S)
        # finalists missing confirmations (this run's, or a killed run's) are confirmed now
        if not getattr(measurer, "repeatable", False) and missing_confirmations(
                db, wl, target, options.confirm, options.confirm_rounds, space):
            if measurer is None:
                measurer = WorkloadMeasurer(wl, target, builder, runner, options.run)
            confirm_finalists(db, wl, target, space, measurer, options.confirm, options.confirm_rounds)
    finally:
        db.release_claims(owner)
    elapsed = time.perf_counter() - start
    summary = summarize(db, wl, target, new, space.size(), elapsed)
    summary.unconfirmed = len(missing_confirmations(db, wl, target, options.confirm, options.confirm_rounds,
                                                    space))
    if measurer is not None:
        summary.seconds, summary.runner_busy = where_time_went([measurer], elapsed)
    return summary


def where_time_went(measurers: Sequence[Any], elapsed: float) -> tuple[dict, float]:
    """Seconds of a tuning run by stage (render / build / run, summed over the measurers; the rest
    of the wall time ``search_and_db``: proposing, the cost model, the database) and the fraction
    of the wall time the runners were running kernels. A pipelined measurer's stages overlap, so
    its seconds are sums with no remainder."""
    seconds: dict[str, float] = {"render": 0.0, "build": 0.0, "run": 0.0}
    for m in measurers:
        for k, v in getattr(m, "seconds", {}).items():
            seconds[k] = seconds.get(k, 0.0) + v
    if not any(getattr(m, "pipelined", False) for m in measurers):
        seconds["search_and_db"] = max(0.0, elapsed - sum(seconds.values()))
    runners = max([getattr(m, "runners", 1) for m in measurers], default=1)
    return seconds, seconds["run"] / (elapsed * runners) if elapsed > 0 else 0.0


def _tune_pipelined(db: TuningDatabase, wl: Workload, target: Target, tuner: Tuner, space: Any, measurer: Any,
                    options: TuneOptions, owner: str, known: set[str], store: Callable[[Trial], None],
                    start: float) -> None:
    """The tuning loop with batches in flight (a DaskMeasurer): up to ``measurer.depth`` batches are
    queued, so while one runs the next is built and the one after is proposed; each result is
    committed as it arrives, and the tuner learns from a batch (its model refit) once all of it is
    in, while the workers go on with the batches queued behind it. Budget and claims as in the
    serial loop: a config is measured only under this process's claim, never twice."""
    inflight: dict[int, list[Trial]] = {}  # batch -> its results so far
    sizes: dict[int, int] = {}
    queued: set[str] = set()  # keys of configs in flight (a claim of this process may be granted again)
    exhausted = False
    while True:
        while not exhausted and len(inflight) < measurer.depth and not _out_of_time(options, start):
            measured = db.measured_config_keys(wl.key, target.key, search_only=True)
            _absorb(db, tuner, wl, target, measured - known - queued)  # (queued: stored here, batch not done)
            known |= measured
            pending = sum(sizes[b] - len(inflight[b]) for b in inflight)
            if len(measured) >= options.trials:
                exhausted = True
                break
            others = _claimed_by_others(db, wl, target, owner, measured)
            left = options.trials - len(measured) - pending - others
            if left <= 0:
                break  # the rest of the budget is in flight here or with other tuners
            configs = tuner.next_batch(min(options.batch_size, left))
            if not configs:
                exhausted = True
                break
            keys = [config_key(c) for c in configs]
            granted = set(db.claim(wl.key, target.key, keys, owner, budget=options.trials)) - queued
            mine = [c for c, k in zip(configs, keys) if k in granted]
            if mine:
                batch = measurer.submit(mine, [space.steps(c) for c in mine])
                inflight[batch], sizes[batch] = [], len(mine)
                queued |= granted
        if not inflight:
            if exhausted or _out_of_time(options, start):
                return
            time.sleep(CLAIM_WAIT_S)  # other tuners hold the rest of the budget
            continue
        for batch, trial in measurer.completed():
            store(trial)
            inflight[batch].append(trial)
            if len(inflight[batch]) == sizes[batch]:
                trials = inflight.pop(batch)
                tuner.update([t.config for t in trials], [t.mean_s for t in trials])
                done = {config_key(t.config) for t in trials}
                known |= done
                queued -= done


def _out_of_time(options: TuneOptions, start: float) -> bool:
    return options.time_budget_s is not None and time.perf_counter() - start > options.time_budget_s


def _claimed_by_others(db: TuningDatabase, wl: Workload, target: Target, owner: str,
                       measured: set[str]) -> int:
    """Configs of the pair that other live tuners hold claims on and have not stored yet."""
    return sum(
        1 for c in db.claims()
        if c["workload_key"] == wl.key and c["target_key"] == target.key and c["live"]
        and c["owner"] != owner and not c["config_key"].startswith("confirm:")
        and c["config_key"] not in measured
    )


def _absorb(db: TuningDatabase, tuner: Tuner, wl: Workload, target: Target, keys: set[str]) -> None:
    """Tell the tuner about configs other tuners measured since it last looked (it learns from their
    results and never proposes them)."""
    if not keys:
        return
    recs = [r for r in db.measurements(wl.key, target.key)
            if r.tuner != CONFIRM_LABEL and config_key(r.config) in keys]
    tuner.update([r.config for r in recs], [r.mean_s for r in recs])


def summarize(
    db: TuningDatabase, wl: Workload, target: Target, new: int, space_size: int, elapsed: float
) -> TuneSummary:
    every = db.measurements(wl.key, target.key)
    rows = [r for r in every if r.tuner != CONFIRM_LABEL]
    errors = [r for r in rows if r.error_kind]
    by_kind: dict[str, int] = {}
    for r in errors:
        by_kind[r.error_kind] = by_kind.get(r.error_kind, 0) + 1
    best = db.best(wl.key, target.key)
    best_s = best.mean_s if best else math.inf
    return TuneSummary(
        workload=workload_label(wl),
        workload_key=wl.key,
        target_key=target.key,
        trials=len(rows),
        new_trials=new,
        valid=len(rows) - len(errors),
        errors=len(errors),
        best_s=best_s,
        best_gflops=wl.flops / best_s / 1e9 if best else 0.0,
        best_config=best.config if best else None,
        space_size=space_size,
        elapsed_s=elapsed,
        errors_by_kind=by_kind,
        confirmations=len(every) - len(rows),
        best_spread=best.spread if best else None,
    )


def _record(wl: Workload, target: Target, t: Trial, tuner: str, space_version: int) -> MeasurementRecord:
    return MeasurementRecord(
        workload_key=wl.key,
        target_key=target.key,
        config=t.config,
        steps=[s.to_dict() for s in t.steps],
        costs=t.costs if t.error_kind is None else (),
        error_kind=t.error_kind,
        error_msg=t.error_msg[:2000],
        build_s=t.build_s,
        verified=t.error_kind is None,
        tuner=tuner,
        space_version=space_version,
    )


def _progress(enabled: bool, total: int, label: str):  # noqa: ANN202
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="trial", dynamic_ncols=True, leave=True)
