"""What a tuning database holds, by name: its targets and workloads, counts per pair, the record
compile takes for each pair (``TuningDatabase.best``'s rule) and the errors by kind. Reads only the
base tables, so a file of an older schema opened read-only reads the same."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .record import CONFIRM_LABEL, config_key

if TYPE_CHECKING:
    from .database import TuningDatabase


def target_name(kind: str, fingerprint: dict[str, Any]) -> str:
    """A target's readable name: its kind and hardware (as the ``target_names`` view writes it)."""
    return f"{kind} {fingerprint.get('model') or fingerprint.get('name') or '?'}"


@dataclass
class PairSummary:
    """One (workload, target) pair."""

    workload: str
    target: str
    workload_key: str
    target_key: str
    trials: int = 0
    valid: int = 0
    errors: int = 0
    confirmations: int = 0
    best_ms: float | None = None
    best_gflops: float | None = None
    best_runs: int = 0  # records of the best config (the median of these ranks it)
    best_config: dict | None = None
    best_id: int | None = None


@dataclass
class DatabaseSummary:
    path: str
    schema_version: str
    targets: list[dict[str, Any]] = field(default_factory=list)  # key, kind, name, fingerprint
    workloads: int = 0
    measurements: int = 0
    pairs: list[PairSummary] = field(default_factory=list)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    skipped_rows: int = 0  # unreadable rows the reads skipped
    module_picks: list[dict[str, Any]] = field(default_factory=list)  # per module and target: counts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize_database(db: TuningDatabase) -> DatabaseSummary:
    conn = db.db.conn
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    workloads = {w["key"]: w for w in db.workloads()}
    targets = {t["key"]: t for t in db.targets()}
    names = {k: target_name(t["kind"], t["fingerprint"]) for k, t in targets.items()}
    out = DatabaseSummary(str(db.path), meta.get("schema_version", "?"), workloads=len(workloads))
    out.targets = [{"key": k, "kind": t["kind"], "name": names[k], "fingerprint": t["fingerprint"]}
                   for k, t in targets.items()]
    out.measurements = conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    pairs: dict[tuple[str, str], PairSummary] = {}
    rows = conn.execute(
        "SELECT workload_key, target_key, tuner = ?, error_kind, COUNT(*) FROM measurements "
        "GROUP BY workload_key, target_key, tuner = ?, error_kind", [CONFIRM_LABEL, CONFIRM_LABEL])
    for wk, tk, confirm, kind, n in rows:
        p = pairs.get((wk, tk))
        if p is None:
            label = workloads[wk]["name"] if wk in workloads else f"(unknown {wk[:12]})"
            p = pairs[(wk, tk)] = PairSummary(label, names.get(tk, f"(unknown {tk[:12]})"), wk, tk)
        if confirm:
            p.confirmations += n
        else:
            p.trials += n
        if kind is None:
            p.valid += 0 if confirm else n
        else:
            p.errors += n
            out.errors_by_kind[kind] = out.errors_by_kind.get(kind, 0) + n
    for rec in db.best_per_workload():
        p = pairs.get((rec.workload_key, rec.target_key))
        if p is None:
            continue
        flops = workloads.get(rec.workload_key, {}).get("flops") or 0.0
        p.best_ms = rec.mean_s * 1e3
        p.best_gflops = flops / rec.mean_s / 1e9 if flops and rec.mean_s > 0 else None
        p.best_config, p.best_id = rec.config, rec.id
        p.best_runs = conn.execute(
            "SELECT COUNT(*) FROM measurements WHERE workload_key = ? AND target_key = ? "
            "AND config_key = ? AND error_kind IS NULL",
            [rec.workload_key, rec.target_key, config_key(rec.config)]).fetchone()[0]
    out.pairs = sorted(pairs.values(), key=lambda p: (p.target, p.workload))
    modules: dict[tuple[str, str], dict[str, Any]] = {}
    for pick in db.module_picks():
        m = modules.setdefault((pick["module_key"], pick["target_key"]), {
            "model": pick["model"], "module_key": pick["module_key"],
            "target": names.get(pick["target_key"], f"(unknown {pick['target_key'][:12]})"),
            "tasks": 0, "runner_ups": 0})
        m["tasks"] += 1
        m["runner_ups"] += pick["config_key"] != pick["best_config_key"]
    out.module_picks = list(modules.values())
    out.skipped_rows = len(db.skipped)
    return out


def summary_lines(s: DatabaseSummary) -> list[str]:
    """``autotune db show``'s text."""
    trials = sum(p.trials for p in s.pairs)
    conf = sum(p.confirmations for p in s.pairs)
    errors = sum(p.errors for p in s.pairs)
    lines = [f"{s.path}: schema {s.schema_version}, {len(s.targets)} target(s), {s.workloads} workload(s), "
             f"{s.measurements} measurements ({trials} trials, {conf} confirmations, {errors} failed)"]
    if s.skipped_rows:
        lines.append(f"  {s.skipped_rows} unreadable row(s) skipped: `autotune db check` names them")
    lines.append("targets:")
    lines += [f"  {t['name']}  [{t['key'][:12]}]" for t in s.targets] or ["  (none)"]
    lines.append("best per workload (each config ranked by the median of its runs, confirmed finalists "
                 "first: the schedule compile takes):")
    head = ("workload", "target", "trials", "failed", "best ms", "GFLOP/s", "runs")
    body = [(p.workload, p.target, str(p.trials), str(p.errors),
             "-" if p.best_ms is None else f"{p.best_ms:.4f}",
             "-" if p.best_gflops is None else f"{p.best_gflops:.1f}", str(p.best_runs or "-"))
            for p in s.pairs]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    for r in [head, *body]:
        lines.append("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))))
    lines.append("module picks (the record each task takes inside a model, chosen at the end of tune.py "
                 "--model):" + ("" if s.module_picks else " none"))
    lines += [f"  {m['model']} [{m['module_key'][:12]}] on {m['target']}: {m['tasks']} tasks compared, "
              f"{m['runner_ups']} take a runner-up" for m in s.module_picks]
    lines.append("errors by kind:" + ("" if s.errors_by_kind else " none"))
    lines += [f"  {kind}: {n}" for kind, n in sorted(s.errors_by_kind.items(), key=lambda kv: -kv[1])]
    return lines
