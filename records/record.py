"""The measurement record and the canonical encodings shared by DB and JSONL."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import RecordsError

# The tuner label of re-measurements of a tuning run's finalists (autotune/search/confirm.py); the
# best-known config of a pair is ranked by these as well as by the search's own records.
CONFIRM_LABEL = "confirm"


def canonical_json(value: Any) -> str:
    """Encode ``value`` as compact, key-sorted, strict JSON (stable across runs)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RecordsError(f"value is not JSON-serialisable: {exc}") from None


def config_key(config: Mapping[str, Any]) -> str:
    """Return the sha256 hex digest of the canonical JSON of ``config``."""
    return hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()


@dataclass(frozen=True)
class MeasurementRecord:
    """One measured (workload, target, config) point, successful or not."""

    workload_key: str
    target_key: str
    config: dict[str, Any]
    steps: list[Any]
    costs: tuple[float, ...]
    error_kind: str | None
    error_msg: str = ""
    build_s: float = 0.0
    verified: bool = False
    tuner: str = ""
    space_version: int = 1
    created_at: float = 0.0
    id: int | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when the run succeeded and produced at least one timing."""
        return self.error_kind is None and len(self.costs) > 0

    @property
    def mean_s(self) -> float:
        """Mean seconds per run, or ``math.inf`` for errors and empty costs."""
        if not self.ok:
            return math.inf
        return math.fsum(self.costs) / len(self.costs)

    @property
    def spread(self) -> float:
        """The record's noise figure: (slowest - fastest) / median of its repeated timings; 0.0 for
        one timing, ``math.inf`` for a failed run."""
        if not self.ok:
            return math.inf
        ordered = sorted(self.costs)
        median = ordered[len(ordered) // 2]
        return (ordered[-1] - ordered[0]) / median if median > 0 else 0.0


def _expect(cond: bool, what: str) -> None:
    if not cond:
        raise RecordsError(what)


def _is_number(x: object) -> bool:
    # bool is an int subclass but never a meaningful timing
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_record(rec: MeasurementRecord) -> None:
    """Raise RecordsError if ``rec`` cannot be stored faithfully."""
    _expect(
        isinstance(rec.workload_key, str) and rec.workload_key != "",
        "workload_key must be a non-empty string",
    )
    _expect(
        isinstance(rec.target_key, str) and rec.target_key != "",
        "target_key must be a non-empty string",
    )
    _expect(isinstance(rec.config, Mapping), "config must be a dict")
    _expect(all(isinstance(k, str) for k in rec.config), "config keys must be strings")
    _expect(
        isinstance(rec.steps, Sequence) and not isinstance(rec.steps, (str, bytes)),
        "steps must be a list",
    )
    _expect(
        isinstance(rec.costs, Sequence) and not isinstance(rec.costs, (str, bytes)),
        "costs must be a sequence of numbers",
    )
    _expect(
        all(_is_number(c) and math.isfinite(c) and c >= 0 for c in rec.costs),
        "costs must be finite non-negative numbers",
    )
    _expect(
        rec.error_kind is None
        or (isinstance(rec.error_kind, str) and rec.error_kind != ""),
        "error_kind must be None or a non-empty string",
    )
    _expect(isinstance(rec.error_msg, str), "error_msg must be a string")
    _expect(
        _is_number(rec.build_s) and math.isfinite(rec.build_s),
        "build_s must be a finite number",
    )
    _expect(isinstance(rec.verified, bool), "verified must be a bool")
    _expect(isinstance(rec.tuner, str), "tuner must be a string")
    _expect(
        isinstance(rec.space_version, int) and not isinstance(rec.space_version, bool),
        "space_version must be an int",
    )
    _expect(
        _is_number(rec.created_at)
        and math.isfinite(rec.created_at)
        and rec.created_at >= 0,
        "created_at must be a finite number >= 0",
    )


def record_to_row(rec: MeasurementRecord) -> dict[str, Any]:
    """Column values for the ``measurements`` table (without ``id``)."""
    mean = rec.mean_s
    return {
        "workload_key": rec.workload_key,
        "target_key": rec.target_key,
        "space_version": rec.space_version,
        "config": canonical_json(dict(rec.config)),
        "config_key": config_key(rec.config),
        "steps": canonical_json(list(rec.steps)),
        # float() so 1 and 1.0 encode identically; duplicate detection compares text
        "costs": canonical_json([float(c) for c in rec.costs]),
        "mean_s": mean if math.isfinite(mean) else None,
        "error_kind": rec.error_kind,
        "error_msg": rec.error_msg,
        "build_s": float(rec.build_s),
        "verified": int(rec.verified),
        "tuner": rec.tuner,
        "created_at": float(rec.created_at),
    }


def record_from_row(row: Mapping[str, Any]) -> MeasurementRecord:
    """Rebuild a record from a ``measurements`` row."""
    return MeasurementRecord(
        workload_key=row["workload_key"],
        target_key=row["target_key"],
        config=json.loads(row["config"]),
        steps=json.loads(row["steps"]),
        costs=tuple(float(c) for c in json.loads(row["costs"])),
        error_kind=row["error_kind"],
        error_msg=row["error_msg"] or "",
        build_s=float(row["build_s"] or 0.0),
        verified=bool(row["verified"]),
        tuner=row["tuner"] or "",
        space_version=int(row["space_version"]),
        created_at=float(row["created_at"]),
        id=row.get("id"),
    )
