"""Confirm a tuning run's finalists: measure each again, interleaved with a reference kernel that
tells whether the machine's timing shifted meanwhile; resumable after a kill."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from records import CONFIRM_LABEL, MeasurementRecord, TuningDatabase, config_key
from records.database import confirm_claim_key
from records.owner import process_owner
from schedules import SearchSpace

from ..target import Target
from ..te import Workload
from .measure_batch import Trial

log = logging.getLogger("autotune.confirm")

# A confirmation is kept only when the reference kernel, timed just before and just after it, ran
# within this factor of the reference's time when the confirmation began (the median of its first
# timings); otherwise the machine got busier meanwhile (another job started) and the finalist is
# measured again. A round (one
# confirmation of every finalist) is committed whole, in one transaction, once each of its timings is
# kept: finalists never hold different numbers of confirmations, so load cannot re-rank them, and
# a round that stays disturbed is dropped, leaving the ranking as it was (rerun to finish).
REFERENCE_SLOWDOWN = 1.5
# ... and the confirmation's starting point itself must be within this factor of the reference's
# search-phase time: a machine already busy when confirmation begins (every first timing slow
# alike) would otherwise set a slow baseline that every later timing passes. A shared host that
# runs at two speeds for minutes at a time (one up to twice the other) would confirm a task in its
# slow phase: its best then reads up to twice its real time against tasks confirmed in the fast
# phase, and choices between tasks (a convolution's Winograd form against its direct form) go wrong.
SEARCH_SLOWDOWN = 1.5
START_RETRIES = 1  # re-measurements of a round whose start was busy before the task is left unconfirmed
RETRIES = 4  # re-measurements of a round's disturbed finalists before the round is given up
BACKOFF_S = 1.0  # wait before a retry, doubled each time


def finalists(db: TuningDatabase, wl: Workload, target: Target, top: int,
              space: SearchSpace) -> list[MeasurementRecord]:
    """The ``top`` fastest configs by search records alone that ``space`` can build (a record
    from an older space that named its knobs otherwise is left out): fixed while their
    confirmation runs."""
    if top <= 0:
        return []
    out: list[MeasurementRecord] = []
    for rec in db.search_top(wl.key, target.key, None):
        if space.is_valid(space.completed(rec.config)):
            out.append(rec)
            if len(out) == top:
                break
    return out


def missing_confirmations(db: TuningDatabase, wl: Workload, target: Target, top: int,
                          rounds: int, space: SearchSpace) -> dict[str, int]:
    """config_key -> confirmations each finalist still lacks (empty: nothing to do)."""
    chosen = finalists(db, wl, target, top, space) if rounds > 0 else []
    if not chosen:
        return {}
    # a lone finalist (a space of one config) is confirmed too: there is nothing to choose between,
    # but its one timing may be an outlier, and the model's estimate and the task scheduler read it
    have = db.confirmations(wl.key, target.key)
    need = {config_key(r.config): rounds - have.get(config_key(r.config), 0) for r in chosen}
    return {k: n for k, n in need.items() if n > 0}


def confirm_finalists(db: TuningDatabase, wl: Workload, target: Target, space: SearchSpace, measurer: Any,
                      top: int, rounds: int) -> int:
    """Measure the ``top`` fastest configs of (wl, target) until each has ``rounds`` confirmation
    records (tuner label CONFIRM_LABEL), every round in a shuffled order with the fastest finalist
    timed between each two as a reference (see REFERENCE_SLOWDOWN); returns how many records were
    added. Confirmations already in the DB count (a killed run resumes), and finalists another
    process is confirming are left to it (claims). The fastest of hundreds of noisy measurements
    overstates its config; TuningDatabase.best ranks the confirmed finalists by their median record,
    so the best-known schedule becomes the one that is fastest on repeat."""
    need = missing_confirmations(db, wl, target, top, rounds, space)
    if not need:
        return 0
    chosen = finalists(db, wl, target, top, space)
    owner = process_owner()
    granted = set(db.claim(wl.key, target.key, [confirm_claim_key(k) for k in need], owner))
    mine = {k: n for k, n in need.items() if confirm_claim_key(k) in granted}
    by_key = {config_key(r.config): space.completed(r.config) for r in chosen}
    reference = chosen[0]
    rng = np.random.default_rng(0)
    added = 0
    baseline: list[float] = []  # the reference's time when the confirmation began
    try:
        while mine:
            keys = [k for k, n in mine.items() if n > 0]
            kept = _confirm_round(measurer, space, reference.config,
                                  [by_key[keys[i]] for i in rng.permutation(len(keys))], baseline,
                                  reference.mean_s)
            if kept is None and not baseline:
                log.warning(
                    "%s: the machine's timing shifted during confirmation (the reference kernel ran "
                    "over %.1fx its search time at the start, %d times in a row); %d finalist(s) "
                    "left unconfirmed; rerun the same command on a quieter machine to finish",
                    wl.name, SEARCH_SLOWDOWN, START_RETRIES + 1, len(keys))
                break
            if kept is None:
                log.warning(
                    "%s: the machine's timing shifted during confirmation (the reference kernel ran "
                    "over %.1fx its starting time around some finalists %d times in a row); the round "
                    "was dropped and %d finalist(s) keep the confirmations they had, not re-ranked; "
                    "rerun the same command on a quieter machine to finish",
                    wl.name, REFERENCE_SLOWDOWN, RETRIES + 1, len(keys))
                break
            db.add_measurements([_confirm_record(wl, target, t, space.version) for t in kept],
                                claimed_by=owner)
            added += len(kept)
            mine = {k: n - 1 for k, n in mine.items() if n > 1}
    finally:
        db.release_claims(owner, [confirm_claim_key(k) for k in need])
    return added


def _confirm_round(measurer: Any, space: SearchSpace, reference: dict, configs: list[dict],
                   baseline: list[float], searched_s: float = math.inf) -> list[Trial] | None:
    """One confirmation of each config, each timed between two timings of ``reference``; a config
    whose reference timings ran over REFERENCE_SLOWDOWN x ``baseline[0]`` (set from the first
    timings when empty, and only when those are within SEARCH_SLOWDOWN x ``searched_s``, the
    reference's search-phase time) is measured again, after a pause. Returns the kept trials in the
    order of ``configs``, or None when some config stayed disturbed through RETRIES re-measurements
    or the start was busy (no baseline set) START_RETRIES + 1 times in a row."""
    kept: dict[int, Trial] = {}
    todo = list(range(len(configs)))
    busy_starts = 0
    for attempt in range(RETRIES + 1):
        if attempt:
            time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        batch = [reference]
        for i in todo:
            batch += [configs[i], reference]
        trials = list(measurer.measure(batch, [space.steps(c) for c in batch]))
        refs = [t.mean_s for t in trials[0::2]]
        log.debug("reference timings %s, finalists %s", refs, [t.mean_s for t in trials[1::2]])
        if not baseline:
            finite = sorted(r for r in refs if math.isfinite(r))
            start = finite[len(finite) // 2] if finite else math.inf
            if start > SEARCH_SLOWDOWN * searched_s:
                log.debug("reference at %.3g s against %.3g s when searched: busy from the start", start,
                          searched_s)
                busy_starts += 1
                if busy_starts > START_RETRIES:
                    return None
                continue
            baseline.append(start)
        limit = baseline[0] * REFERENCE_SLOWDOWN
        for j, i in enumerate(todo):
            if max(refs[j], refs[j + 1]) <= limit:
                kept[i] = trials[2 * j + 1]
        todo = [i for i in todo if i not in kept]
        if not todo:
            return [kept[i] for i in range(len(configs))]
    return None


def _confirm_record(wl: Workload, target: Target, trial: Trial, space_version: int) -> MeasurementRecord:
    from .tune import _record

    return _record(wl, target, trial, CONFIRM_LABEL, space_version)
