"""Replay mode: answer measurements from an existing records DB instead of hardware, so search
strategies can be compared in seconds and tested in CI without building or running kernels.

    replay = ReplayDB("tests/data/replay_cpu.jsonl.gz")   # a records DB file or a JSONL(.gz) export
    task = replay.tasks()[0]                              # workload, target and space of one pair
    costs = replay_tune(replay, task, "xgb", trials=64)   # seconds per trial, in measured order

``ReplayRunner`` is the measurer: ``tune_workload(..., measurer=ReplayRunner(replay, wl, target))``
runs the real tuning loop (DB commits included) on recorded results. A config the DB does not hold
comes back as an error of kind ``not_in_replay_db``.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from records import MeasurementRecord, TuningDatabase, config_key
from schedules import Config, SearchSpace, make_space

from ..schedule import Step
from ..target import Target, make_target
from ..te import Workload, workload_from_description
from .context import TuneContext
from .measure_batch import Trial
from .tuner import make_tuner

NOT_IN_REPLAY_DB = "not_in_replay_db"


@dataclass
class ReplayTask:
    """One (workload, target) pair of a replay DB, with its rebuilt space."""

    workload: Workload
    target: Target
    space: SearchSpace
    label: str
    records: dict[str, MeasurementRecord] = field(repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.workload.key, self.target.key

    @property
    def best_s(self) -> float:
        return min((r.mean_s for r in self.records.values()), default=math.inf)

    def good_count(self, fraction: float = 0.95) -> int:
        """How many recorded configs reach ``fraction`` of the best throughput."""
        best = self.best_s
        return sum(1 for r in self.records.values() if r.mean_s > 0 and best / r.mean_s >= fraction)


def open_records(source: str | Path | TuningDatabase) -> TuningDatabase:
    """A TuningDatabase from a DB file, a JSONL export (``.jsonl`` / ``.jsonl.gz``, loaded into
    memory) or an open database."""
    if isinstance(source, TuningDatabase):
        return source
    path = Path(source)
    name = path.name
    if name.endswith((".jsonl", ".jsonl.gz")):
        db = TuningDatabase(":memory:")
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            db.import_jsonl(fh)
        return db
    return TuningDatabase(path, create=False)


class ReplayDB:
    """Recorded measurements indexed by (workload, target, config)."""

    def __init__(self, source: str | Path | TuningDatabase) -> None:
        self.db = open_records(source)
        self._index: dict[tuple[str, str], dict[str, MeasurementRecord]] = {}
        for rec in self.db.measurements():
            # the first record of a config wins, as the first measurement would on hardware
            self._index.setdefault((rec.workload_key, rec.target_key), {}).setdefault(
                config_key(rec.config), rec)
        self._tasks: list[ReplayTask] | None = None

    def lookup(self, workload_key: str, target_key: str, config: Config) -> MeasurementRecord | None:
        return self._index.get((workload_key, target_key), {}).get(config_key(config))

    def tasks(self) -> list[ReplayTask]:
        """Every (workload, target) pair with records, in a stable order (by label, then keys)."""
        if self._tasks is None:
            targets = {t["key"]: make_target(t["kind"], t["fingerprint"]) for t in self.db.targets()}
            tasks = []
            for (wk, tk), recs in self._index.items():
                w = self.db.workload(wk)
                if w is None or tk not in targets:
                    continue
                wl = workload_from_description(w["description"])
                space = make_space(wl, targets[tk])
                # the replayed space is the one the records were measured in (knobs added since at
                # the value the code had before them, tiles on the axes' own extents)
                space = space.as_measured(r.config for r in recs.values())
                tasks.append(ReplayTask(wl, targets[tk], space, w["name"], recs))
            self._tasks = sorted(tasks, key=lambda t: (t.label, t.key))
        return self._tasks

    def task(self, label_or_key: str) -> ReplayTask:
        for t in self.tasks():
            if label_or_key in (t.label, t.workload.key):
                return t
        raise KeyError(f"no replay task {label_or_key!r}; have: {', '.join(t.label for t in self.tasks())}")

    def close(self) -> None:
        self.db.close()


class ReplayRunner:
    """A measurer (see WorkloadMeasurer.measure) that looks results up instead of running them."""

    repeatable = True  # the same config always answers the same: nothing to confirm

    def __init__(self, replay: ReplayDB, workload: Workload, target: Target) -> None:
        self.replay, self.workload, self.target = replay, workload, target
        self.hits = self.misses = 0
        self.seconds = {"render": 0.0, "build": 0.0, "run": 0.0}  # as WorkloadMeasurer: nothing spent

    @property
    def space(self) -> SearchSpace:
        """The space the records were measured in (tune_workload searches this one)."""
        task = next((t for t in self.replay.tasks() if t.key == (self.workload.key, self.target.key)), None)
        return task.space if task is not None else make_space(self.workload, self.target)

    def measure(self, configs: list[Config], steps: list[list[Step]]) -> Iterator[Trial]:
        for cfg, st in zip(configs, steps):
            rec = self.replay.lookup(self.workload.key, self.target.key, cfg)
            if rec is None:
                self.misses += 1
                yield Trial(cfg, st, (), NOT_IN_REPLAY_DB, "config not in the replay DB", 0.0)
                continue
            self.hits += 1
            costs = tuple(rec.costs) if rec.ok else ()
            yield Trial(cfg, st, costs, rec.error_kind, rec.error_msg, rec.build_s)


def replay_tune(replay: ReplayDB, task: ReplayTask, strategy: str, trials: int, seed: int = 0,
                batch_size: int = 8, transfer: bool = True, early_stop: int | None = None,
                transfer_samples: list | None = None, feature_cache: dict | None = None,
                tuner_options: dict | None = None,
                stop_when: Callable[[list[float]], bool] | None = None) -> list[float]:
    """Run one strategy on recorded results, without a DB; the cost (s) of each trial in order
    (``inf`` for errors and configs the DB lacks). Transfer data comes from ``transfer_samples``;
    ``stop_when(costs)`` ends the run early when it returns True (checked after every batch)."""
    # (the rules' configs are not seeded: a replay DB holds only what was measured)
    ctx = TuneContext(task.workload, task.target, None, transfer=transfer, early_stop=early_stop,
                      transfer_samples=transfer_samples, feature_cache=feature_cache,
                      options={"rules": False, **(tuner_options or {})})
    tuner = make_tuner(strategy, task.space, seed, set(), context=ctx)
    runner = ReplayRunner(replay, task.workload, task.target)
    costs: list[float] = []
    while len(costs) < trials:
        configs = tuner.next_batch(min(batch_size, trials - len(costs)))
        if not configs:
            break
        results = list(runner.measure(configs, [[] for _ in configs]))
        costs += [t.mean_s for t in results]
        tuner.update([t.config for t in results], [t.mean_s for t in results])
        if stop_when is not None and stop_when(costs):
            break
    return costs


def trials_to_reach(costs: Sequence[float], best_s: float, fraction: float = 0.95) -> int | None:
    """1-based index of the first trial within ``fraction`` of the best throughput, or None."""
    for i, c in enumerate(costs):
        if c > 0 and math.isfinite(c) and best_s / c >= fraction:
            return i + 1
    return None
