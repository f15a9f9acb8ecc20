"""Training samples from a records DB: rebuild each workload, replay each record's steps, extract."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from autotune.schedule import step_from_dict
from autotune.target import make_target
from autotune.te import workload_from_description

from .features import extract
from .model import Sample


def group_key(workload_key: str, target_key: str) -> str:
    return f"{workload_key}/{target_key}"


def samples_from_db(db: Any, exclude: Iterable[tuple[str, str]] = (), limit: int | None = None,
                    seed: int = 0, workload_keys: Iterable[str] | None = None,
                    cache: dict | None = None) -> list[Sample]:
    """Samples of every (workload, target) group in ``db`` except ``exclude``. With ``limit``, at
    most that many in all, split evenly over groups: each group keeps its best few and a random rest.
    Records whose workload cannot be rebuilt or whose steps no longer apply are skipped. ``cache``
    keeps each record's features (by its id) and each rebuilt workload for the next call: the tasks
    of one model's tuning read the same records for transfer, and lowering them is the cost."""
    cache = {} if cache is None else cache
    skip = set(exclude)
    only = set(workload_keys) if workload_keys is not None else None
    targets = {t["key"]: make_target(t["kind"], t["fingerprint"]) for t in db.targets()}
    groups: dict[tuple[str, str], list] = {}
    for w in db.workloads():
        if only is not None and w["key"] not in only:
            continue
        for rec in db.measurements(w["key"]):
            if (rec.workload_key, rec.target_key) not in skip:
                groups.setdefault((rec.workload_key, rec.target_key), []).append(rec)
    rng = np.random.default_rng(seed)
    per_group = None if limit is None or not groups else max(2, limit // len(groups))
    out: list[Sample] = []
    for (wk, tk), recs in sorted(groups.items()):
        if ("workload", wk) not in cache:
            try:
                cache["workload", wk] = workload_from_description(db.workload(wk)["description"])
            except Exception:  # noqa: BLE001 - an op this build does not know: nothing to learn from
                cache["workload", wk] = None
        wl = cache["workload", wk]
        if wl is None:
            continue
        if per_group is not None and len(recs) > per_group:
            recs = sorted(recs, key=lambda r: r.mean_s)
            top = max(1, per_group // 8)
            rest = rng.choice(len(recs) - top, size=per_group - top, replace=False) + top
            recs = recs[:top] + [recs[i] for i in sorted(rest)]
        for rec in recs:
            key = ("record", rec.id)
            f = cache[key] if key in cache else _features(wl, rec, targets.get(tk))
            if rec.id is not None:  # (a DB's records all have their row id)
                cache[key] = f
            if f is not None:
                cost = rec.mean_s if math.isfinite(rec.mean_s) else math.inf
                out.append(Sample(f, group_key(wk, tk), cost))
    return out


def _features(wl: Any, rec: Any, target: Any) -> Any:
    """The IR features of a record's schedule, or None where its steps no longer apply."""
    try:
        return extract(wl, [step_from_dict(s) for s in rec.steps], target)
    except Exception:  # noqa: BLE001 - steps today's code cannot replay: no sample
        return None
