"""Choosing each task's record by its time inside the compiled module, and the picks a tuning run
stores for compile to take (the database's ``module_picks`` table, records/schema.py).

Tuning times a kernel alone, with its inputs hot in the caches; in a model it runs after other
kernels, on data they wrote. A runner-up can then be faster than the best isolated record. The
rerank times the module with each task's runner-ups and keeps, per task, the record whose calls
took the least. ``tune.py --model`` reranks once at its end and stores the picks; compile takes a
pick while the task's best record is still the one it was compared with, so compiles stay
deterministic and a later tuning run that finds a new best makes the old pick void.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.aligned import aligned_empty
from autotune.target import Target
from records import TuningDatabase
from records.record import config_key

from .compiler import (
    _REPLAY_ERRORS,
    KernelChoice,
    Prepared,
    _build,
    _replay,
    choose_schedule,
    runner_up_schedules,
)
from .feeds import random_inputs
from .runtime import CpuExecutable, check_inputs, make_backend

MARGIN = 0.03  # a runner-up replaces the best only when its calls take this much less in the module
MODULE_MARGIN = 0.01  # and the module with every such runner-up must run this much faster as a whole
CHECKS = 3  # whole-module checks at most: all the runner-ups, the better half, its better half
PROFILE_S = 0.3  # about this long per profile of a variant (runs of the module, each call timed)
CHECK_S = 0.1  # and per block of runs of one variant in a whole-module check


def module_key(prepared: Prepared) -> str:
    """What a module's picks are keyed by: its calls' workloads, in order (the layout, the
    convolution forms and the fusion are all in them)."""
    text = "\n".join(prepared.tasks[c.task].workload.key for c in prepared.calls)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Reranked:
    """The outcome of one rerank: the choices per task, the labels of the tasks that took a
    runner-up, and one module_picks row per task that had runner-ups to compare."""

    choices: list[KernelChoice]
    changed: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    # the whole module: seconds with the best records, with the runner-ups, and the median over
    # rounds of the second over the first (what decides: robust to the host changing speed)
    module_s: tuple[float, float, float] | None = None


def rerank_in_module(prepared: Prepared, choices: list[KernelChoice], target: Target, db: TuningDatabase,
                     backend: Any, k: int, rounds: int = 3, repeat: int = 10, margin: float = MARGIN
                     ) -> Reranked:
    """Per task, the fastest of its ``k`` best records *inside the module*: variant j of the module
    uses every task's j-th record (its best where it has fewer), each variant is profiled call by
    call in ``rounds`` interleaved rounds, and a task takes the record whose calls took the least
    (median over rounds), if that beats its best record's by ``margin``. The runner-ups are kept
    only if the module with them then runs faster as a whole, by MODULE_MARGIN, than the module of
    best records (interleaved rounds): the tasks' times are not independent, since each kernel's
    time depends on what the one before it left in the caches. Where all of them together fail
    that check, the half that saved the most in the profile is tried, then its half
    (CHECKS in all); where none passes, every task keeps its best record."""
    t0 = time.perf_counter()
    alts: dict[str, list[KernelChoice]] = {}
    for c in choices:
        if c.task.key not in alts:
            alts[c.task.key] = [c] + (runner_up_schedules(c.task, target, db, k) if c.tuned else [])
    depth = max(len(a) for a in alts.values())
    if depth < 2:
        return Reranked(choices, [], [], time.perf_counter() - t0)

    def taking(pick: dict[str, int]) -> list[KernelChoice]:
        """The choices with each task's ``pick[key]``-th record (its last where it has fewer)."""
        return [dataclasses.replace(alts[c.task.key][min(pick[c.task.key], len(alts[c.task.key]) - 1)],
                                    task=c.task) for c in choices]

    times: dict[tuple[str, int], list[float]] = {}
    types = prepared.graph.types
    arrays = check_inputs(prepared.graph, random_inputs(prepared.graph, np.random.default_rng(0)))
    outs = [aligned_empty(types[o].shape, types[o].dtype) for o in prepared.graph.outputs]
    variants = [_build(prepared, taking(dict.fromkeys(alts, j)), backend).executable for j in range(depth)]
    # fewer runs per profile for a model that runs long (ViT-B/16: 0.18 s a run), at least three
    one_run = float(np.median(variants[0].time(arrays, outs, 3, 0.0)))
    repeat = max(3, min(repeat, int(PROFILE_S / one_run)))
    for _ in range(rounds):
        for j, variant in enumerate(variants):
            med = np.median(variant.profile(arrays, outs, repeat, len(prepared.calls)), axis=0)
            per_task: dict[str, float] = {}
            for i, call in enumerate(prepared.calls):
                key = choices[call.task].task.key
                per_task[key] = per_task.get(key, 0.0) + float(med[i])
            for key, s in per_task.items():
                if j < len(alts[key]):
                    times.setdefault((key, j), []).append(s)
    median = {kj: float(np.median(v)) for kj, v in times.items()}
    pick: dict[str, int] = {}
    for key, a in alts.items():
        j = min(range(len(a)), key=lambda j, key=key: median[(key, j)])
        pick[key] = j if median[(key, j)] < (1 - margin) * median[(key, 0)] else 0
    whole = None
    accepted = dict.fromkeys(pick, 0)
    # the runner-ups, the largest saving in the profile first
    wanted = sorted((key for key in pick if pick[key]),
                    key=lambda key: median[(key, pick[key])] - median[(key, 0)])
    for _ in range(CHECKS):
        if not wanted:
            break
        trial = {key: pick[key] if key in wanted else 0 for key in pick}
        whole = _whole_module_s(variants[0], _build(prepared, taking(trial), backend).executable, arrays,
                                outs, repeat=max(2, min(10, int(CHECK_S / one_run))))
        if whole[2] <= 1 - MODULE_MARGIN:
            accepted = trial
            break
        wanted = wanted[: len(wanted) // 2]
    pick = accepted
    rows: list[dict[str, Any]] = []
    now = time.time()
    mkey = module_key(prepared)
    for key, a in alts.items():
        if len(a) > 1:
            rows.append({
                "module_key": mkey, "target_key": target.key, "workload_key": key,
                "config_key": config_key(a[pick[key]].config or {}),
                "best_config_key": config_key(a[0].config or {}),
                "module_s": median[(key, pick[key])], "best_module_s": median[(key, 0)],
                "model": prepared.graph.name, "created_at": now,
            })
    changed = sorted({c.task.label for c in choices if pick[c.task.key] != 0})
    return Reranked(taking(pick), changed, rows, time.perf_counter() - t0, whole)


def _whole_module_s(base: CpuExecutable, other: CpuExecutable, arrays: list[np.ndarray],
                    outs: list[np.ndarray], rounds: int = 12, repeat: int = 10) -> tuple[float, float, float]:
    """Median seconds of a whole run of two loaded variants of the module, timed in interleaved
    rounds, and the median over rounds of the second's time over the first's."""
    runs = [base, other]
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            times[i].append(float(np.median(runs[i].time(arrays, outs, repeat, 0.0))))
    ratio = float(np.median([b / a for a, b in zip(*times)]))
    return float(np.median(times[0])), float(np.median(times[1])), ratio


def picks_hold(prepared: Prepared, target: Target, db: TuningDatabase, k: int) -> bool:
    """Whether ``db`` holds a pick for every task of the module that has runner-ups, each made
    against the task's best record of now (a rerun of a finished tuning run reranks nothing)."""
    stored = db.module_picks(module_key(prepared), target.key)
    picks = {p["workload_key"]: p["best_config_key"] for p in stored}
    for task in prepared.tasks:
        top = db.top(task.key, target.key, min(k, 2))
        if len(top) > 1 and picks.get(task.key) != config_key(top[0].config):
            return False
    return True


def store_picks(prepared: Prepared, target: Target, db: TuningDatabase, k: int, *,
                workers: int | None = None, cache_dir: str | None = None) -> Reranked:
    """Rerank the module compile would build from ``db`` and store its picks there."""
    choices = [choose_schedule(t, target, db) for t in prepared.tasks]
    backend = make_backend(target, workers=workers, cache_dir=cache_dir)
    # five rounds: the picks are kept, so they are worth more time than compile's live rerank
    out = rerank_in_module(prepared, choices, target, db, backend, k, rounds=5)
    db.put_module_picks(out.rows)
    return out


def apply_picks(prepared: Prepared, choices: list[KernelChoice], target: Target, db: TuningDatabase
                ) -> tuple[list[KernelChoice], list[str]]:
    """The choices with the stored picks of this module taken where they still hold: the task's
    best record is the one the pick was compared with, and the picked record still replays."""
    picks = {p["workload_key"]: p for p in db.module_picks(module_key(prepared), target.key)}
    taken: dict[str, KernelChoice] = {}
    for c in choices:
        p = picks.get(c.task.key)
        if (p is None or c.task.key in taken or not c.tuned or p["config_key"] == p["best_config_key"]
                or config_key(c.config or {}) != p["best_config_key"]):
            continue
        record = db.config_record(c.task.key, target.key, p["config_key"])
        if record is None:
            continue
        try:
            taken[c.task.key] = _replay(c.task, record, target)
        except _REPLAY_ERRORS:
            continue
    new = [dataclasses.replace(taken[c.task.key], task=c.task) if c.task.key in taken else c for c in choices]
    return new, sorted({c.task.label for c in choices if c.task.key in taken})
