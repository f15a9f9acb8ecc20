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

# A confirmation is kept only when the reference kernel timed just before and just after it ran
# within this factor of the reference's quietest time (its search record or any quieter timing
# during confirmation); otherwise the machine was busier than when the finalists were found (another
# job started), the finalist's timing would demote it unfairly, and it is measured again.
REFERENCE_SLOWDOWN = 1.5
RETRIES = 3  # rounds in a row with every confirmation disturbed before giving up (rerun to finish)
BACKOFF_S = 1.0  # wait before a retry, doubled each time


def finalists(db: TuningDatabase, wl: Workload, target: Target, top: int) -> list[MeasurementRecord]:
    """The ``top`` fastest configs by search records alone: fixed while their confirmation runs."""
    return db.search_top(wl.key, target.key, top) if top > 0 else []


def missing_confirmations(db: TuningDatabase, wl: Workload, target: Target, top: int,
                          rounds: int) -> dict[str, int]:
    """config_key -> confirmations each finalist still lacks (empty: nothing to do)."""
    chosen = finalists(db, wl, target, top) if rounds > 0 else []
    if len(chosen) < 2:  # nothing to choose between
        return {}
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
    need = missing_confirmations(db, wl, target, top, rounds)
    if not need:
        return 0
    chosen = finalists(db, wl, target, top)
    owner = process_owner()
    granted = set(db.claim(wl.key, target.key, [confirm_claim_key(k) for k in need], owner))
    mine = {k: n for k, n in need.items() if confirm_claim_key(k) in granted}
    by_key = {config_key(r.config): r.config for r in chosen}
    reference = chosen[0]
    baseline = reference.mean_s
    rng = np.random.default_rng(0)
    added = retries = 0
    try:
        while mine:
            keys = [k for k in mine if mine[k] > 0]
            order = [keys[i] for i in rng.permutation(len(keys))]
            configs = [reference.config]
            for k in order:
                configs += [by_key[k], reference.config]
            trials = list(measurer.measure(configs, [space.steps(c) for c in configs]))
            refs = [t.mean_s for t in trials[0::2]]
            baseline = min([baseline] + [r for r in refs if math.isfinite(r)])
            limit = baseline * REFERENCE_SLOWDOWN
            kept = 0
            for i, k in enumerate(order):
                if max(refs[i], refs[i + 1]) > limit:
                    continue  # the machine was busier around this timing: measure it again
                db.add_measurements([_confirm_record(wl, target, trials[2 * i + 1], space.version)],
                                    claimed_by=owner)
                mine[k] -= 1
                kept += 1
                added += 1
            mine = {k: n for k, n in mine.items() if n > 0}
            if not mine:
                break
            if kept:
                retries = 0
                continue
            retries += 1
            if retries > RETRIES:
                log.warning(
                    "%s: the machine's timing shifted during confirmation (reference kernel over "
                    "%.1fx its quiet time in %d rounds); %d finalist(s) left unconfirmed and not "
                    "re-ranked; rerun the same command on a quieter machine to finish",
                    wl.name, REFERENCE_SLOWDOWN, retries, len(mine),
                )
                break
            time.sleep(BACKOFF_S * 2 ** (retries - 1))
    finally:
        db.release_claims(owner, [confirm_claim_key(k) for k in need])
    return added


def _confirm_record(wl: Workload, target: Target, trial: Trial, space_version: int) -> MeasurementRecord:
    from .tune import _record

    return _record(wl, target, trial, CONFIRM_LABEL, space_version)
