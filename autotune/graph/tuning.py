"""Tune every task of a model under one trial budget with the gradient task scheduler; every
measurement goes to the records database like single-op tuning (so runs resume and the compiler
finds the results)."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from records import TuningDatabase, config_key
from records.owner import process_owner
from schedules import SearchSpace, make_space

from ..search import TuneOptions, make_tuner
from ..search.confirm import confirm_finalists, missing_confirmations
from ..search.context import TuneContext
from ..search.measure_batch import Trial, WorkloadMeasurer
from ..search.tune import TuneSummary, _progress, _record, register, summarize, where_time_went
from ..target import Target
from .compiler import Prepared, node_forms
from .scheduler import Form, GradientScheduler
from .tasks import Task

logger = logging.getLogger("autotune.tune")


@dataclass
class ModelTask:
    """A task of the tuning run (deduplicated across layouts) and how it went."""

    task: Task
    weight: int
    summary: TuneSummary | None = None
    new_trials: int = 0
    rounds: int = 0


@dataclass
class ModelTuneSummary:
    model: str
    layouts: list[str]
    target_key: str
    budget: int
    trials: int
    new_trials: int
    elapsed_s: float
    estimated_s: float
    tasks: list[ModelTask] = field(default_factory=list)
    rounds: int = 0
    seconds: dict = field(default_factory=dict)  # render / build / run / search_and_db of the run
    runner_busy: float = 0.0  # fraction of the wall time the runners were running kernels
    tasks_in_flight: int = 1  # most tasks whose batches were being measured at once (a cluster's)
    module_picks: dict | None = None  # the rerank at the end of the run (cli/model.py), if one ran

    def task_json(self, mt: ModelTask) -> dict:
        base = (
            mt.summary.to_json() if mt.summary else {"workload": mt.task.label, "workload_key": mt.task.key}
        )
        best = base.get("best_s")
        base.update(
            weight=mt.weight,
            new_trials=mt.new_trials,
            rounds=mt.rounds,
            flops=mt.task.workload.flops,
            weighted_s=None if best is None else best * mt.weight,
        )
        return base

    def to_json(self) -> dict:
        rows = [self.task_json(t) for t in self.tasks]
        return {
            "model": self.model,
            "layout": self.layouts[0] if len(self.layouts) == 1 else "auto",
            "workload": [r["workload"] for r in rows],
            "trials": self.trials,
            "budget": self.budget,
            "new_trials": self.new_trials,
            "valid": sum(r.get("valid", 0) for r in rows),
            "errors": sum(r.get("errors", 0) for r in rows),
            "unconfirmed_tasks": sum(bool(r.get("unconfirmed_finalists")) for r in rows),
            "best_gflops": {r["workload"]: r.get("best_gflops", 0.0) for r in rows},
            "best_config": {r["workload"]: r.get("best_config") for r in rows},
            "estimated_latency_s": None if math.isinf(self.estimated_s) else self.estimated_s,
            "rounds": self.rounds,
            "elapsed_s": round(self.elapsed_s, 2),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "runner_busy": round(self.runner_busy, 3),
            "tasks_in_flight": self.tasks_in_flight,
            "module_picks": self.module_picks,
            "tasks": rows,
        }


def model_tasks(prepared: Sequence[Prepared]) -> list[ModelTask]:
    """Tasks of one or more preparations (layouts) of a model, one per workload key."""
    out: dict[str, ModelTask] = {}
    for p in prepared:
        for t in p.tasks:
            if t.key in out:
                out[t.key].weight = max(out[t.key].weight, t.weight)
            else:
                out[t.key] = ModelTask(t, t.weight)
    return list(out.values())


def scheduler_weights(
    prepared: Sequence[Prepared], tasks: Sequence[ModelTask]
) -> tuple[list[float], list[list[Form]]]:
    """The scheduler's view of ``tasks`` (``model_tasks(prepared)``): each task's calls outside
    alternative forms, and the ways of each node that has forms (direct, Winograd, Strassen; see
    ``compiler.node_forms``) as lists of (task index, calls). Preparations in several layouts are
    alternatives of the whole model: there every task counts with its calls and there are no
    per-convolution choices."""
    if len({p.layout for p in prepared}) > 1 or not any(p.forms for p in prepared):
        return [float(mt.weight) for mt in tasks], []
    index = {mt.task.key: i for i, mt in enumerate(tasks)}
    forms, shared = node_forms(prepared)
    weights = [0.0] * len(tasks)
    for k in shared:
        weights[index[k]] += 1.0
    choices = [[list(Counter(index[k] for k in form).items()) for form in alternatives]
               for alternatives in forms.values()]
    return weights, choices


class _TaskSession:
    """One task's search, kept across rounds: its space, tuner (model-guided tuners keep learning)
    and measurer (inputs and reference computed once)."""

    def __init__(
        self,
        mt: ModelTask,
        target: Target,
        db: TuningDatabase,
        options: TuneOptions,
        make_measurer: Callable[[Any], Any],
        transfer_cache: dict | None = None,
    ) -> None:
        wl = mt.task.workload
        self.wl, self.target, self.db, self.options = wl, target, db, options
        register(db, wl, target)
        self.space = make_space(wl, target)
        done = db.measured_config_keys(wl.key, target.key)
        # the scheduler hands out a task's trials as it goes: no per-task budget to plan with
        context = TuneContext(wl, target, db, transfer=options.transfer, early_stop=options.early_stop,
                              options=dict(options.tuner_options), transfer_cache=transfer_cache)
        # a space without knobs (one config: a softmax, a pool) needs no model to search it
        self.strategy = options.strategy if self.space.knobs else "random"
        self.tuner = make_tuner(self.strategy, self.space, options.seed, done, context=context)
        self.measurer = make_measurer(wl)
        self.owner = process_owner()
        self.errors = 0  # failed measurements of the last run()

    def run(self, n: int, budget: int | None = None, shared_with: Sequence[str] = ()) -> int:
        """Measure up to ``n`` new configs; returns how many were measured (0: space exhausted, or
        ``budget`` reached by the configs of this task and the ``shared_with`` ones). Configs another
        tuner of the same DB measured or holds a claim on are skipped."""
        self.errors = 0
        configs = self.propose(n, budget, shared_with)
        if not configs:
            return 0
        trials: list[Trial] = []
        for trial in self.measurer.measure(configs, [self.space.steps(c) for c in configs]):
            self.store(trial)
            trials.append(trial)
        self.learn(trials)
        return len(trials)

    def propose(self, n: int, budget: int | None = None, shared_with: Sequence[str] = ()) -> list[dict]:
        """Up to ``n`` new configs this process now holds the claims on ([]: space exhausted, or
        the budget reached; see ``run``)."""
        for _ in range(8):  # proposals all taken by other tuners: ask again, a few times
            proposed = self.tuner.next_batch(n)
            if not proposed:
                return []
            keys = [config_key(c) for c in proposed]
            granted = set(self.db.claim(self.wl.key, self.target.key, keys, self.owner,
                                        budget=budget, shared_with=shared_with))
            configs = [c for c, k in zip(proposed, keys) if k in granted]
            if configs:
                return configs
        return []

    def store(self, trial: Trial) -> None:
        """Commit one result as it arrives (its claim released in the same transaction)."""
        rec = _record(self.wl, self.target, trial, self.options.strategy, self.space.version)
        self.db.add_measurements([rec], claimed_by=self.owner)

    def learn(self, trials: list[Trial]) -> None:
        """The tuner learns from a whole batch; its failures are counted."""
        self.errors = sum(1 for t in trials if t.error_kind)
        self.tuner.update([t.config for t in trials], [t.mean_s for t in trials])

    def confirm(self) -> int:
        """Measure this task's finalists again (see confirm_finalists); returns the records added."""
        return confirm_finalists(self.db, self.wl, self.target, self.space, self.measurer,
                                 self.options.confirm, self.options.confirm_rounds)


def tune_model(
    prepared: Sequence[Prepared],
    target: Target,
    db: TuningDatabase,
    trials: int,
    options: TuneOptions,
    builder: Any,
    runner: Any,
    log: Callable[[str], None] = logger.info,
    make_measurer: Callable[[Any], Any] | None = None,
) -> ModelTuneSummary:
    """Tune the tasks of ``prepared`` until the DB holds ``trials`` measurements for them in all
    (so a rerun tops up, like ``--trials`` for one op), one batch at a time where the scheduler
    expects the model's latency to drop most. Candidates are built and run by ``builder`` and
    ``runner`` on this machine, or by the measurer ``make_measurer(workload)`` gives for each task
    (anything with WorkloadMeasurer's ``measure``: a Dask cluster's, ``distributed.measurer``). With
    ``options.progress``, one progress bar for the budget (ETA, the model's estimated latency,
    errors); each batch is a debug line on the ``autotune.tune`` logger."""
    start = time.perf_counter()
    if make_measurer is None:
        def make_measurer(wl: Any) -> WorkloadMeasurer:
            return WorkloadMeasurer(wl, target, builder, runner, options.run)
    tasks = model_tasks(prepared)
    weights, choices = scheduler_weights(prepared, tasks)
    sched = GradientScheduler(weights, options.batch_size, seed=options.seed, choices=choices)
    for i, mt in enumerate(tasks):
        n = len(db.measured_config_keys(mt.task.key, target.key))  # (confirmations are no trials)
        if n:
            best = db.best(mt.task.key, target.key)
            sched.observe(i, n, best.mean_s if best else math.inf)
    existing = sum(t.trials for t in sched.tasks)
    budget = max(0, trials - existing)
    log(
        f"{prepared[0].graph.name}: {len(tasks)} tasks, {existing} trials in the DB, "
        f"{budget} to spend (batches of {options.batch_size})"
    )
    sessions: dict[int, _TaskSession] = {}
    transfer_cache: dict = {}  # features of the records every task's transfer reads, lowered once
    spent = rounds = errors = 0
    bar = _progress(options.progress, budget, prepared[0].graph.name)
    keys = [mt.task.key for mt in tasks]

    def session(i: int) -> _TaskSession:
        if i not in sessions:
            sessions[i] = _TaskSession(tasks[i], target, db, options, make_measurer, transfer_cache)
        return sessions[i]

    def drop(i: int, err: Exception) -> None:
        """One task's tuner failing must not end the model's run: the task is dropped."""
        log(f"{tasks[i].task.label}: the {options.strategy} tuner failed ({type(err).__name__}: {err}); "
            "dropping the task")
        logger.debug("tuner failure", exc_info=err)
        sched.finished_round(i)
        sched.observe(i, sched.tasks[i].trials, sched.tasks[i].best_s, exhausted=True)

    def finished_round(i: int, new: int, want: int) -> None:
        nonlocal spent, rounds, errors
        mt, st = tasks[i], sched.tasks[i]
        mt.new_trials += new
        mt.rounds += 1
        spent += new
        rounds += 1
        errors += sessions[i].errors
        best = db.best(mt.task.key, target.key)
        sched.finished_round(i)
        sched.observe(i, st.trials + new, best.mean_s if best else math.inf, exhausted=new < want)
        gflops = mt.task.workload.flops / best.mean_s / 1e9 if best else 0.0
        estimate = _ms(sched.estimated_latency())
        if bar is not None:
            waiting = sum(1 for t in sched.tasks if math.isinf(t.best_s))
            bar.update(new)
            bar.set_postfix_str(f"model estimate {estimate}"
                                + (f" ({waiting} of {len(tasks)} tasks not measured yet)" if waiting else "")
                                + f", failed trials {errors}")
        logger.debug(
            "trials %d/%d: task %s (called %dx per run) has %d trials, best %s (%.1f GFLOP/s); "
            "estimated model latency %s", spent, budget, mt.task.label, mt.weight, st.trials,
            _ms(st.best_s), gflops, estimate if estimate != "-" else "- (a task has no valid result yet)",
        )

    def out_of_time() -> bool:
        if options.time_budget_s is not None and time.perf_counter() - start > options.time_budget_s:
            log(f"time budget of {options.time_budget_s:g} s used up")
            return True
        return False

    # Other tuners may share the DB: the model's budget is read again every round, and claims
    # count every task's measured and claimed configs against it, so together they never exceed it.
    most_in_flight = 1
    if getattr(make_measurer, "pipelined", False):  # a cluster's measurers (distributed.measurer)
        most_in_flight = _pipelined_rounds(sched, session, drop, finished_round, out_of_time, db, target,
                                           keys, trials, options)
    else:
        while (left := trials - db.budget_used(keys, target.key)) > 0 and not out_of_time():
            i = sched.next_task()
            if i is None:
                break
            want = min(options.batch_size, left)
            try:
                new = session(i).run(want, budget=trials, shared_with=keys)
            except Exception as err:  # noqa: BLE001 - one task's tuner failing must not end the run
                drop(i, err)
                continue
            finished_round(i, new, want)
    if bar is not None:
        bar.close()
    spaces: dict[int, SearchSpace] = {}  # of the tasks without a session, made once each

    def space_of(i: int) -> SearchSpace:
        if i in sessions:
            return sessions[i].space
        if i not in spaces:
            spaces[i] = make_space(tasks[i].task.workload, target)
        return spaces[i]

    confirmed = 0
    for i, mt in enumerate(tasks):  # finalists missing confirmations (this run's or a killed run's)
        if not missing_confirmations(db, mt.task.workload, target, options.confirm, options.confirm_rounds,
                                     space_of(i)):
            continue
        try:
            if i not in sessions:
                sessions[i] = _TaskSession(mt, target, db, options, make_measurer, transfer_cache)
            confirmed += sessions[i].confirm()
        except Exception as err:  # noqa: BLE001 - as in the rounds: the task keeps its records
            log(f"{mt.task.label}: confirming its finalists failed ({type(err).__name__}: {err})")
    for session in sessions.values():
        db.release_claims(session.owner)
    if confirmed:
        log(f"confirmed the finalists: {confirmed} re-measurements")
    elapsed = time.perf_counter() - start
    for i, mt in enumerate(tasks):
        mt.summary = summarize(db, mt.task.workload, target, mt.new_trials, 0, elapsed)
        mt.summary.unconfirmed = len(missing_confirmations(db, mt.task.workload, target, options.confirm,
                                                           options.confirm_rounds, space_of(i)))
    waiting = sum(bool(mt.summary.unconfirmed) for mt in tasks)
    if waiting:
        log(f"{waiting} task(s) left with unconfirmed finalists; rerun the same command to confirm them")
    seconds, busy = where_time_went([s.measurer for s in sessions.values()], elapsed)
    return ModelTuneSummary(
        model=prepared[0].graph.name,
        layouts=[p.layout for p in prepared],
        target_key=target.key,
        budget=trials,
        trials=sum(mt.summary.trials for mt in tasks if mt.summary),
        new_trials=spent,
        elapsed_s=elapsed,
        estimated_s=_estimate(tasks),
        tasks=tasks,
        rounds=rounds,
        seconds=seconds,
        runner_busy=busy,
        tasks_in_flight=most_in_flight,
    )


def _estimate(tasks: Sequence[ModelTask]) -> float:
    """The model's estimated latency from each task's best-known time (its summary's, read once
    its finalists are confirmed)."""
    return sum(mt.weight * mt.summary.best_s for mt in tasks if mt.summary is not None)


def _pipelined_rounds(sched: GradientScheduler, session: Callable[[int], _TaskSession],
                      drop: Callable[[int, Exception], None], finished_round: Callable[[int, int, int], None],
                      out_of_time: Callable[[], bool], db: TuningDatabase, target: Target, keys: list[str],
                      trials: int, options: TuneOptions) -> int:
    """The model's rounds with batches of several tasks in flight on a cluster (pipelined
    measurers sharing its runners): up to the measurers' depth of batches, one a task at a time,
    so while one task's batch runs the next tasks' are built and proposed. Each result is
    committed as it arrives; a task's tuner and the scheduler learn from a batch once all of it is
    in. Budget and claims as in the serial rounds: claims in flight count against the budget.
    Returns the most tasks that had batches in flight at once."""
    from ..distributed.measurer import wait_any

    inflight: dict[int, tuple[int, int, list[Trial]]] = {}  # task -> (configs, asked for, results)
    depth = 1  # the measurers' depth, once one is made
    timed_out = False
    most = 0
    while True:
        while len(inflight) < depth and not timed_out:
            timed_out = out_of_time()
            left = trials - db.budget_used(keys, target.key)  # (claims in flight included)
            i = sched.next_task(busy=set(inflight)) if left > 0 and not timed_out else None
            if i is None:
                break
            want = min(options.batch_size, left)
            try:
                s = session(i)
                configs = s.propose(want, budget=trials, shared_with=keys)
            except Exception as err:  # noqa: BLE001 - as in the serial rounds
                drop(i, err)
                continue
            depth = max(depth, int(getattr(s.measurer, "depth", 1)))
            if not configs:
                finished_round(i, 0, want)
                continue
            s.measurer.submit(configs, [s.space.steps(c) for c in configs], batch=i)
            inflight[i] = (len(configs), want, [])
            most = max(most, len(inflight))
        if not inflight:
            return most
        for _, i, trial in wait_any([session(i).measurer for i in inflight]):
            session(i).store(trial)
            n, want, got = inflight[i]
            got.append(trial)
            if len(got) < n:
                continue
            del inflight[i]
            try:
                session(i).learn(got)
            except Exception as err:  # noqa: BLE001 - as in the serial rounds
                drop(i, err)
                continue
            finished_round(i, n, want)


def _ms(seconds: float) -> str:
    return "-" if math.isinf(seconds) else f"{seconds * 1e3:.3f} ms"
