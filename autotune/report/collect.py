"""What a report shows, read from a tuning database: per (workload, target) the trials in the order
they were measured, the record compile takes and its schedule as a loop nest; per target its
provenance; with a model, its estimated latency as the budget was spent."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from records import CONFIRM_LABEL, MeasurementRecord, TuningDatabase
from records.summary import DatabaseSummary, PairSummary, summarize_database

from .. import __version__


@dataclass
class TaskCurve:
    """One (workload, target) pair: its trials in measurement order and the chosen record."""

    pair: PairSummary
    times: list[float | None]  # seconds per trial (None: failed), confirmations left out
    best_so_far: list[float | None]
    chosen: MeasurementRecord | None
    loop_nest: str  # the chosen schedule lowered and printed, or why it could not be
    errors: dict[str, list[str]] = field(default_factory=dict)  # kind -> messages (first few)


@dataclass
class ModelCurve:
    """A model's estimated latency (sum over its tasks of calls x fastest run so far) after each
    trial of its tasks, in the order they were measured, on one target."""

    name: str
    description: str
    target_key: str
    estimates: list[float | None]
    final_s: float  # by compile's rule (each task's chosen record), inf if a task has none
    tasks: list[dict[str, Any]]  # label, key, calls, trials, chosen_s


@dataclass
class Report:
    db_path: str
    summary: DatabaseSummary
    tasks: list[TaskCurve]
    provenance: list[dict[str, Any]]  # per target: name, key, fingerprint, first/last measurement
    models: list[ModelCurve] = field(default_factory=list)
    generated: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    version: str = __version__


def running_best(times: Sequence[float | None]) -> list[float | None]:
    """The fastest valid time up to each position (None until the first valid one)."""
    out: list[float | None] = []
    best = math.inf
    for t in times:
        if t is not None:
            best = min(best, t)
        out.append(None if math.isinf(best) else best)
    return out


def loop_nest(description: dict, rec: MeasurementRecord | None, workload_key: str) -> str:
    """The chosen schedule as a loop nest (lowered, before unrolling, so loops stay readable)."""
    if rec is None:
        return "(no valid measurement: compile would use the rule-based default schedule)"
    from ..ir import lower
    from ..ir.printer import format_func
    from ..schedule import apply_steps, step_from_dict
    from ..te import workload_from_description

    try:
        wl = workload_from_description(description)
        if wl.key != workload_key:
            return "(the op definition changed since tuning: the workload key differs; re-tune it)"
        sch = apply_steps(wl.outputs, [step_from_dict(s) for s in rec.steps])
        return format_func(lower(sch, wl.args, wl.name))
    except Exception as err:  # noqa: BLE001 - a schedule this code cannot lower is shown as its steps
        steps = "\n".join(f"  {s}" for s in rec.steps)
        return f"(cannot lower it here: {type(err).__name__}: {str(err)[:200]}); its steps:\n{steps}"


def collect(db: TuningDatabase) -> Report:
    summary = summarize_database(db)
    workloads = {w["key"]: w for w in db.workloads()}
    tasks = []
    for pair in summary.pairs:
        rows = [r for r in db.measurements(pair.workload_key, pair.target_key) if r.tuner != CONFIRM_LABEL]
        times = [None if r.error_kind else r.mean_s for r in rows]
        errors: dict[str, list[str]] = {}
        for r in rows:
            if r.error_kind:
                errors.setdefault(r.error_kind, []).append(r.error_msg.strip().splitlines()[0][:300]
                                                           if r.error_msg.strip() else "")
        chosen = db.best(pair.workload_key, pair.target_key)
        desc = workloads.get(pair.workload_key, {}).get("description", {})
        tasks.append(TaskCurve(pair, times, running_best(times), chosen,
                               loop_nest(desc, chosen, pair.workload_key), errors))
    provenance = []
    for t in summary.targets:
        first, last = db.db.conn.execute(
            "SELECT MIN(created_at), MAX(created_at) FROM measurements WHERE target_key = ?", [t["key"]]
        ).fetchone()
        provenance.append({**t, "first": first, "last": last,
                           "measurements": sum(p.trials + p.confirmations for p in summary.pairs
                                               if p.target_key == t["key"])})
    return Report(str(db.path), summary, tasks, provenance)


def model_curve(db: TuningDatabase, prepared: Any, target: Any) -> ModelCurve:
    """``prepared``: the model as compile would take it (graph.compiler.Prepared); ``target``: whose
    records to read."""
    from ..graph.compiler import estimated_latency

    tasks = prepared.tasks
    weight = {t.key: t.weight for t in tasks}
    rows = []
    for t in tasks:
        rows += [r for r in db.measurements(t.key, target.key) if r.tuner != CONFIRM_LABEL]
    rows.sort(key=lambda r: (r.created_at, r.id or 0))
    best: dict[str, float] = {}
    estimates: list[float | None] = []
    for r in rows:
        if r.error_kind is None:
            best[r.workload_key] = min(best.get(r.workload_key, math.inf), r.mean_s)
        estimates.append(sum(weight[k] * best[k] for k in weight) if len(best) == len(weight) else None)
    table = []
    for t in tasks:
        rec = db.best(t.key, target.key)
        table.append({"label": t.label, "key": t.key, "calls": t.weight,
                      "chosen_s": rec.mean_s if rec else None,
                      "trials": sum(1 for r in rows if r.workload_key == t.key)})
    return ModelCurve(prepared.graph.name, prepared.describe(), target.key, estimates,
                      estimated_latency(tasks, target, db), table)
