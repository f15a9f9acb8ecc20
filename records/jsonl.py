"""JSON-lines encoding of workloads, targets, measurements and module picks."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .errors import RecordsError
from .record import MeasurementRecord, canonical_json, check_record

_MEASUREMENT_FIELDS = (
    "workload_key",
    "target_key",
    "config",
    "steps",
    "costs",
    "error_kind",
    "error_msg",
    "build_s",
    "verified",
    "tuner",
    "space_version",
    "created_at",
)
MODULE_PICK_KEYS = ("module_key", "target_key", "workload_key", "config_key", "best_config_key")


@dataclass
class Batch:
    """Parsed rows ready to be written; each item keeps its source line number."""

    workloads: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    targets: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    measurements: list[tuple[int, MeasurementRecord]] = field(default_factory=list)
    module_picks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def workload_line(w: Mapping[str, Any]) -> str:
    """One ``"workload"`` line (no newline)."""
    return canonical_json({"type": "workload", **w})


def target_line(t: Mapping[str, Any]) -> str:
    """One ``"target"`` line (no newline)."""
    return canonical_json({"type": "target", **t})


def measurement_line(rec: MeasurementRecord) -> str:
    """One ``"measurement"`` line; the local ``id`` is left out on purpose."""
    obj: dict[str, Any] = {name: getattr(rec, name) for name in _MEASUREMENT_FIELDS}
    obj["costs"] = [float(c) for c in rec.costs]
    return canonical_json({"type": "measurement", **obj})


def module_pick_line(pick: Mapping[str, Any]) -> str:
    """One ``"module_pick"`` line (no newline)."""
    return canonical_json({"type": "module_pick", **pick})


def _need(obj: Mapping[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    if name not in obj:
        raise RecordsError(f"missing field {name!r}")
    value = obj[name]
    if not isinstance(value, types) or (
        isinstance(value, bool) and bool not in _as_tuple(types)
    ):
        raise RecordsError(
            f"field {name!r} has the wrong type ({type(value).__name__})"
        )
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _parse_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    flops = _need(obj, "flops", (int, float))
    if not math.isfinite(flops):
        raise RecordsError("field 'flops' must be finite")
    return {
        "key": _need(obj, "key", str),
        "name": _need(obj, "name", str),
        "description": _need(obj, "description", dict),
        "flops": float(flops),
    }


def _parse_target(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "key": _need(obj, "key", str),
        "kind": _need(obj, "kind", str),
        "fingerprint": _need(obj, "fingerprint", dict),
    }


def parse_module_pick(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A module_picks row from its JSON form (or a row read back), checked."""
    out: dict[str, Any] = {name: _need(obj, name, str) for name in MODULE_PICK_KEYS}
    for name in ("module_s", "best_module_s", "created_at"):
        value = _need(obj, name, (int, float))
        if not math.isfinite(value) or value < 0:
            raise RecordsError(f"field {name!r} must be a finite number >= 0")
        out[name] = float(value)
    out["model"] = obj.get("model", "")
    if not isinstance(out["model"], str):
        raise RecordsError("field 'model' must be a string")
    return out


def _parse_measurement(obj: Mapping[str, Any]) -> MeasurementRecord:
    num = (int, float)
    error_kind = obj.get("error_kind")
    if error_kind is not None and not isinstance(error_kind, str):
        raise RecordsError("field 'error_kind' must be a string or null")
    rec = MeasurementRecord(
        workload_key=_need(obj, "workload_key", str),
        target_key=_need(obj, "target_key", str),
        config=_need(obj, "config", dict),
        steps=_need(obj, "steps", list),
        costs=tuple(_need(obj, "costs", list)),
        error_kind=error_kind,
        error_msg=obj.get("error_msg", ""),
        build_s=obj.get("build_s", 0.0),
        verified=obj.get("verified", False),
        tuner=obj.get("tuner", ""),
        space_version=obj.get("space_version", 1),
        created_at=_need(obj, "created_at", num),
    )
    check_record(rec)
    return rec


def open_jsonl(path: str | Path, mode: str) -> IO[str]:
    """A JSON-lines file opened as text for reading (``"r"``) or writing (``"w"``), gzip-compressed
    when read from a file that starts as gzip does or written to a name ending in ``.gz``."""
    p = Path(path)
    if mode == "r":
        with p.open("rb") as fh:
            zipped = fh.read(2) == b"\x1f\x8b"
    else:
        zipped = p.name.endswith(".gz")
    if zipped:
        return gzip.open(p, mode + "t", encoding="utf-8")
    return p.open(mode, encoding="utf-8")


def parse_lines(lines: Iterable[str], source: str) -> Batch:
    """Parse and validate every line; raise RecordsError naming the bad line."""
    batch = Batch()
    numbered = enumerate(lines, start=1)
    lineno = 0
    while True:
        try:
            lineno, line = next(numbered)
        except StopIteration:
            break
        except (UnicodeDecodeError, OSError, EOFError) as exc:  # not text, or a broken gzip stream
            raise RecordsError(f"{source}: after line {lineno}: not UTF-8 JSON lines ({exc})") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise RecordsError("line is not a JSON object")
            kind = obj.get("type")
            if kind == "workload":
                batch.workloads.append((lineno, _parse_workload(obj)))
            elif kind == "target":
                batch.targets.append((lineno, _parse_target(obj)))
            elif kind == "measurement":
                batch.measurements.append((lineno, _parse_measurement(obj)))
            elif kind == "module_pick":
                batch.module_picks.append((lineno, parse_module_pick(obj)))
            else:
                raise RecordsError(f"unknown type {kind!r}")
        except (
            ValueError,
            RecordsError,
        ) as exc:  # json.JSONDecodeError is a ValueError
            raise RecordsError(f"{source}: line {lineno}: {exc}") from None
    return batch


def dump_lines(
    workloads: Iterable[Mapping[str, Any]],
    targets: Iterable[Mapping[str, Any]],
    measurements: Iterable[MeasurementRecord],
    module_picks: Iterable[Mapping[str, Any]] = (),
) -> Iterator[str]:
    """Yield newline-terminated lines: workloads, then targets, measurements and module picks."""
    for w in workloads:
        yield workload_line(w) + "\n"
    for t in targets:
        yield target_line(t) + "\n"
    for m in measurements:
        yield measurement_line(m) + "\n"
    for p in module_picks:
        yield module_pick_line(p) + "\n"
