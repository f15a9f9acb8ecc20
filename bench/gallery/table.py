"""The gallery's result table: one :class:`Row` per (model, exporter), printed as text or written as
JSON. Needs neither torch nor the compiler."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

TOLERANCE = 1e-4  # max relative error against onnxruntime for "correct" (issue 22's figure)
SCHEMA = 1


@dataclass
class Row:
    """What became of one export. A stage that failed leaves its message in ``error`` (prefixed with
    the stage: export, import, reference, compile, run, tuned, timing) and the later fields None."""

    model: str
    exporter: str
    family: str = ""
    opset: int | None = None
    export_s: float | None = None
    imported: bool = False
    import_s: float | None = None
    nodes: int | None = None
    tasks: int | None = None
    max_rel_err: float | None = None
    tuned_max_rel_err: float | None = None
    compile_s: float | None = None
    untuned_ms: float | None = None
    tuned_ms: float | None = None
    ort_ms: float | None = None
    tuned_tasks: int | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool | None:
        """Whether every compiled module checked matched onnxruntime within TOLERANCE (None: unchecked)."""
        errs = [e for e in (self.max_rel_err, self.tuned_max_rel_err) if e is not None]
        if not errs:
            return None
        return all(e <= TOLERANCE for e in errs)

    @property
    def status(self) -> str:
        stage = self.error.split(":", 1)[0] if self.error else ""
        if stage in ("export", "crash", "timeout"):
            return {"export": "export failed", "crash": "crashed", "timeout": "timed out"}[stage]
        if not self.imported:
            return "not imported"
        if self.correct is False:
            return "WRONG"
        if self.error:
            return stage + " failed"
        return "ok" if self.correct else "imported"

    def speedup(self, which: str) -> float | None:
        """onnxruntime's latency over ours (``which``: untuned / tuned); > 1 means we are faster."""
        ours = self.untuned_ms if which == "untuned" else self.tuned_ms
        return self.ort_ms / ours if ours and self.ort_ms else None

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(status=self.status, correct=self.correct, untuned_speedup=self.speedup("untuned"),
                 tuned_speedup=self.speedup("tuned"))
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Row:
        names = {f.name for f in dataclasses.fields(Row)}
        return Row(**{k: v for k, v in d.items() if k in names})


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


COLUMNS = ("model", "exporter", "status", "rel err", "compile s", "ours ms", "tuned ms", "ort ms",
           "untuned x", "tuned x")


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width table, one line per row, then each failed row's message."""
    cells = [COLUMNS]
    for r in rows:
        err = max((e for e in (r.max_rel_err, r.tuned_max_rel_err) if e is not None), default=None)
        cells.append((r.model, r.exporter, r.status, _num(err, ".1e"), _num(r.compile_s, ".1f"),
                      _num(r.untuned_ms, ".3f"), _num(r.tuned_ms, ".3f"), _num(r.ort_ms, ".3f"),
                      _num(r.speedup("untuned"), ".2f"), _num(r.speedup("tuned"), ".2f")))
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(COLUMNS))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    failed = [r for r in rows if r.error]
    if failed:
        lines.append("")
        lines += [f"{r.model} · {r.exporter}: {r.error[:300]}" for r in failed]
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """Counts over the rows: exported, imported, correct, and the latency ratios' range."""
    ups = [r.speedup("untuned") for r in rows if r.speedup("untuned") is not None]
    tuned = [r.speedup("tuned") for r in rows if r.speedup("tuned") is not None]
    return {
        "rows": len(rows),
        "exported": sum(r.status != "export failed" for r in rows),
        "imported": sum(r.imported for r in rows),
        "correct": sum(r.correct is True for r in rows),
        "wrong": sum(r.correct is False for r in rows),
        "min_untuned_speedup": min(ups) if ups else None,
        "min_tuned_speedup": min(tuned) if tuned else None,
    }


def to_json(rows: Sequence[Row], meta: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "tolerance": TOLERANCE, **meta, "summary": summary(rows),
            "rows": [r.to_json() for r in rows]}


def write_json(path: str, rows: Sequence[Row], meta: dict[str, Any]) -> None:
    """The table as JSON, written whole (a temporary file renamed into place)."""
    from pathlib import Path

    p = Path(path)
    tmp = p.with_name(p.name + ".part")
    tmp.write_text(json.dumps(to_json(rows, meta), indent=1) + "\n")
    tmp.replace(p)


def read_json(path: str) -> list[Row]:
    data = json.loads(open(path).read())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a gallery result of schema {SCHEMA}")
    return [Row.from_json(d) for d in data["rows"]]
