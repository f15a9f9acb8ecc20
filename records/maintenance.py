"""Checking and repairing a tuning database: unreadable rows, schema drift, orphans, stale claims."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import RecordsError
from .jsonl import _parse_target, _parse_workload, parse_module_pick
from .record import check_record, record_from_row
from .schema import DDL, SCHEMA_VERSION

if TYPE_CHECKING:
    from .database import TuningDatabase

# the column a row of each checked table is named by (module_picks: SQLite's rowid)
_KEYS = {"measurements": "id", "workloads": "key", "targets": "key", "module_picks": "rowid"}


def _dict_rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _why_unreadable(table: str, row: dict[str, Any]) -> str | None:
    """None when the row reads back as a valid workload, target or measurement; else why not."""
    try:
        if table == "measurements":
            check_record(record_from_row(row))
        elif table == "workloads":
            _parse_workload({**row, "description": json.loads(row["description"])})
        elif table == "module_picks":
            parse_module_pick(row)
        else:
            _parse_target({**row, "fingerprint": json.loads(row["fingerprint"])})
    except (ValueError, TypeError, KeyError, AttributeError, RecordsError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}"[:200]
    return None


def _tables(conn: sqlite3.Connection) -> dict[str, str]:
    """The checked tables this file has (one of an older schema lacks module_picks), with their keys."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {t: k for t, k in _KEYS.items() if t in names}


def unreadable_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(table, id or key or rowid, why) of every row of measurements, workloads, targets and module
    picks that cannot be read back."""
    out = []
    for table, key in _tables(conn).items():
        for row in _dict_rows(conn, f"SELECT {key} AS {key}, * FROM {table} ORDER BY {key}"):
            why = _why_unreadable(table, row)
            if why is not None:
                out.append((table, str(row[key]), why))
    return out


def _expected_schema() -> dict[str, dict[str, Any]]:
    """name -> {type, columns} of every object of a fresh database of this schema."""
    mem = sqlite3.connect(":memory:")
    for stmt in DDL:
        mem.execute(stmt)
    out = _schema_of(mem)
    mem.close()
    return out


def _schema_of(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    objects = conn.execute(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    ).fetchall()
    out = {}
    for name, kind in objects:
        cols = []
        if kind in ("table", "view"):
            cols = [(c[1], c[2].upper(), c[3]) for c in conn.execute(f'PRAGMA table_info("{name}")')]
        out[name] = {"type": kind, "columns": cols}
    return out


def schema_drift(conn: sqlite3.Connection) -> list[str]:
    """What differs from the schema this code writes: missing or changed objects, extra columns."""
    want, have = _expected_schema(), _schema_of(conn)
    version = dict(conn.execute("SELECT key, value FROM meta").fetchall()).get("schema_version")
    problems = []
    if version != str(SCHEMA_VERSION):
        problems.append(f"schema version {version}, this code writes {SCHEMA_VERSION} "
                        "(opening it for writing migrates it)")
    for name, spec in want.items():
        got = have.get(name)
        if got is None:
            problems.append(f"missing {spec['type']} {name}")
        elif got["columns"] != spec["columns"]:
            problems.append(f"{spec['type']} {name} has columns {[c[0] for c in got['columns']]}, "
                            f"expected {[c[0] for c in spec['columns']]}")
    for name in sorted(set(have) - set(want)):
        problems.append(f"unexpected {have[name]['type']} {name}")
    return problems


def orphans(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(table, id, why) of measurements whose workload or target is not in the database."""
    rows = conn.execute(
        """SELECT id, workload_key, target_key,
                  workload_key NOT IN (SELECT key FROM workloads),
                  target_key NOT IN (SELECT key FROM targets)
           FROM measurements
           WHERE workload_key NOT IN (SELECT key FROM workloads)
              OR target_key NOT IN (SELECT key FROM targets) ORDER BY id"""
    ).fetchall()
    out = []
    for rid, wk, tk, no_w, no_t in rows:
        missing = [f"workload {wk}" for _ in range(no_w)] + [f"target {tk}" for _ in range(no_t)]
        out.append(("measurements", str(rid), f"orphan: no {' and no '.join(missing)}"))
    return out


@dataclass
class CheckReport:
    """What `scripts/db.py check` found; ``ok`` when nothing."""

    integrity: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str, str]] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    orphans: list[tuple[str, str, str]] = field(default_factory=list)
    stale_claims: int = 0
    live_claims: int = 0
    quarantined: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.integrity or self.unreadable or self.drift or self.orphans or self.stale_claims)

    def lines(self) -> list[str]:
        out = [f"integrity: {p}" for p in self.integrity]
        out += [f"unreadable: {t} {k}: {why}" for t, k, why in self.unreadable]
        out += [f"schema drift: {p}" for p in self.drift]
        out += [f"{t} {k}: {why}" for t, k, why in self.orphans]
        if self.stale_claims:
            out.append(f"stale claims: {self.stale_claims} (expired, or their process has ended)")
        counts = ", ".join(f"{n} {t}" for t, n in self.rows.items())
        out.append(f"{'ok' if self.ok else 'problems found'}: {counts}; {self.live_claims} live claims, "
                   f"{self.quarantined} rows in quarantine")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "integrity": self.integrity,
            "unreadable": [list(x) for x in self.unreadable],
            "schema_drift": self.drift,
            "orphans": [list(x) for x in self.orphans],
            "stale_claims": self.stale_claims,
            "live_claims": self.live_claims,
            "quarantined": self.quarantined,
            "rows": self.rows,
        }


def check(db: TuningDatabase) -> CheckReport:
    """Read-only health check of an open database."""
    conn = db.db.conn
    report = CheckReport()
    report.integrity = [r[0] for r in conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
    report.unreadable = unreadable_rows(conn)
    report.drift = schema_drift(conn)
    report.orphans = orphans(conn)
    claims = db.claims()
    report.live_claims = sum(c["live"] for c in claims)
    report.stale_claims = len(claims) - report.live_claims
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "quarantine" in names:
        report.quarantined = conn.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
    report.rows = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in _tables(conn)}
    return report


def repair(db: TuningDatabase) -> dict[str, int]:
    """Move unreadable rows into the quarantine table (every column kept, as JSON), drop stale claims
    and recreate missing indexes and views, all in one transaction; readable rows are not touched
    (measurements of a workload or target moved aside stay, as orphans that check reports, until
    tuning that workload registers it again). Returns counts of what was done."""
    conn = db.db.conn
    done = {"quarantined": 0, "stale_claims": 0}
    # a workload or target row may be moved while measurements still name it
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        _repair(db, conn, done)
    finally:
        conn.execute("PRAGMA foreign_keys=ON")
    db.skipped.clear()
    return done


def _repair(db: TuningDatabase, conn: sqlite3.Connection, done: dict[str, int]) -> None:
    with db._write():  # noqa: SLF001 - the database's own write transaction
        for stmt in DDL:  # CREATE ... IF NOT EXISTS: restores dropped indexes, views, tables
            conn.execute(stmt)
        for table, key, why in unreadable_rows(conn):
            col = _KEYS[table]
            value = int(key) if col in ("id", "rowid") else key
            rows = _dict_rows(conn, f"SELECT {col} AS {col}, * FROM {table} WHERE {col} = ?", (value,))
            if not rows:
                continue
            conn.execute(
                "INSERT INTO quarantine (source_table, source_key, row, reason, moved_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [table, key, json.dumps(rows[0], default=repr), why, time.time()],
            )
            conn.execute(f"DELETE FROM {table} WHERE {col} = ?", [rows[0][col]])
            done["quarantined"] += 1
        now = time.time()
        for c in db.claims():
            if not c["live"] or c["expires_at"] < now:
                conn.execute(
                    "DELETE FROM claims WHERE workload_key = ? AND target_key = ? AND config_key = ?",
                    [c["workload_key"], c["target_key"], c["config_key"]],
                )
                done["stale_claims"] += 1
