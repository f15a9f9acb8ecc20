"""TuningDatabase: the SQLite store of measurements shared by tuners."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Self

import sqlite_utils

from .errors import RecordsError
from .jsonl import Batch, dump_lines, parse_lines
from .record import (
    MeasurementRecord,
    canonical_json,
    check_record,
    record_from_row,
    record_to_row,
)
from .schema import (
    FileState,
    check_connection,
    create_schema,
    inspect_file,
    open_readonly,
)

PathLike = str | Path

_DUPLICATE_SQL = """
    SELECT 1 FROM measurements
    WHERE workload_key = ? AND target_key = ? AND config_key = ?
      AND created_at = ? AND costs = ?
    LIMIT 1
"""


def _where(**filters: Any) -> tuple[str, list[Any]]:
    """Build ``WHERE a = ? AND ...`` from the filters that are not None."""
    clauses = [f"{col} = ?" for col, val in filters.items() if val is not None]
    args = [val for val in filters.values() if val is not None]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def _workload_from_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": row["key"],
        "name": row["name"],
        "description": json.loads(row["description"]),
        "flops": row["flops"],
    }


def _target_from_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": row["key"],
        "kind": row["kind"],
        "fingerprint": json.loads(row["fingerprint"]),
    }


class TuningDatabase:
    """One tuning database file; safe to share between processes (WAL)."""

    def __init__(self, path: PathLike, *, create: bool = True) -> None:
        self.path = Path(path)
        self._memory = str(path) == ":memory:"
        state = FileState.EMPTY if self._memory else inspect_file(self.path)
        if state is FileState.MISSING and not create:
            raise RecordsError(f"{self.path} does not exist (create=False)")
        if state is FileState.EMPTY and not create and not self._memory:
            raise RecordsError(
                f"{self.path} is empty, not a tuning database (create=False)"
            )
        if state is FileState.MISSING:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # Only now, after inspect_file() vetted the file read-only, may we write to it.
        # Plugins are skipped: they could run arbitrary SQL on connect.
        self.db = sqlite_utils.Database(
            ":memory:" if self._memory else self.path, execute_plugins=False
        )
        try:
            self._setup(state)
        except BaseException:
            self.db.close()
            raise

    def _setup(self, state: FileState) -> None:
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.execute("PRAGMA foreign_keys=ON")
        if not self._memory:
            self.db.enable_wal()
        # FULL makes each commit reach the disk, so a returned id survives a crash.
        self.db.execute("PRAGMA synchronous=FULL")
        if state is FileState.OURS:
            return
        with self._write():
            # Re-check under the write lock: another process may have created the
            # schema (or something else) since inspect_file() looked.
            if check_connection(self.db.conn, str(self.path)) is FileState.EMPTY:
                create_schema(self.db.conn)

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDatabase({str(self.path)!r})"

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, committed on exit.

        BEGIN IMMEDIATE takes the write lock up front, so the busy timeout applies;
        a deferred read-then-write transaction could fail at once with SQLITE_BUSY
        when another process committed in between.
        """
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.rollback()
            raise
        self.db.commit()

    # -- writes --------------------------------------------------------------

    def add_workload(
        self, key: str, name: str, description: dict[str, Any], flops: float
    ) -> None:
        """Insert or update a workload (idempotent)."""
        row = {
            "key": key,
            "name": name,
            "description": canonical_json(description),
            "flops": float(flops),
        }
        with self._write():
            self.db.table("workloads").upsert(row, pk="key")

    def add_target(self, key: str, kind: str, fingerprint: dict[str, Any]) -> None:
        """Insert or update a target (idempotent)."""
        row = {"key": key, "kind": kind, "fingerprint": canonical_json(fingerprint)}
        with self._write():
            self.db.table("targets").upsert(row, pk="key")

    def add_measurement(self, rec: MeasurementRecord) -> int:
        """Store one record durably and return its id."""
        return self.add_measurements([rec])[0]

    def add_measurements(self, recs: Iterable[MeasurementRecord]) -> list[int]:
        """Store records in one committed transaction; return their ids in order."""
        rows = [self._prepare(rec) for rec in recs]
        ids: list[int] = []
        with self._write():
            for row in rows:
                ids.append(self._insert_row(row, where="add_measurement"))
        return ids

    @staticmethod
    def _prepare(rec: MeasurementRecord) -> dict[str, Any]:
        check_record(rec)
        if not rec.created_at:
            rec = replace(rec, created_at=time.time())
        return record_to_row(rec)

    def _insert_row(self, row: dict[str, Any], where: str) -> int:
        try:
            cursor = self.db.execute(
                f"INSERT INTO measurements ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
        except sqlite3.IntegrityError as exc:
            raise RecordsError(
                f"{where}: cannot store measurement for workload {row['workload_key']!r} / "
                f"target {row['target_key']!r} ({exc}); add the workload and target first"
            ) from None
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # -- reads ---------------------------------------------------------------

    def measured_config_keys(self, workload_key: str, target_key: str) -> set[str]:
        """config_key of every stored attempt (errors included), for resuming."""
        rows = self.db.execute(
            "SELECT DISTINCT config_key FROM measurements WHERE workload_key = ? AND target_key = ?",
            [workload_key, target_key],
        )
        return {r[0] for r in rows}

    # A config measured more than once (tuning re-measures its finalists: confirm_finalists in
    # autotune/search/tune.py) is ranked by the upper median of its records' mean times, so one
    # lucky run does not make it the best; a config measured once is ranked by that record.
    _PER_CONFIG = """SELECT * FROM (
            SELECT m.*, ROW_NUMBER() OVER (
                       PARTITION BY workload_key, target_key, config_key ORDER BY mean_s, id) AS rn_,
                   COUNT(*) OVER (PARTITION BY workload_key, target_key, config_key) AS n_
            FROM measurements AS m
            WHERE {where} error_kind IS NULL AND verified = 1 AND mean_s IS NOT NULL
        ) WHERE rn_ = n_ / 2 + 1"""

    def _fastest(self, workload_key: str, target_key: str, limit: int | None) -> Iterator[dict[str, Any]]:
        """One row per verified, error-free config of the pair (its upper-median record), fastest
        first (at most ``limit``)."""
        sql = self._PER_CONFIG.format(where="workload_key = ? AND target_key = ? AND")
        return self.db.query(
            f"{sql} ORDER BY mean_s, id LIMIT ?",
            [workload_key, target_key, -1 if limit is None else limit],
        )

    def best(self, workload_key: str, target_key: str) -> MeasurementRecord | None:
        """The fastest verified, error-free config of the pair (by the upper median of its records),
        as that record; None if there is none."""
        rows = list(self._fastest(workload_key, target_key, 1))
        return record_from_row(rows[0]) if rows else None

    def top(self, workload_key: str, target_key: str, k: int) -> list[MeasurementRecord]:
        """The ``k`` fastest verified, error-free configs of the pair (ranked as ``best``), fastest first."""
        return [record_from_row(r) for r in self._fastest(workload_key, target_key, k)]

    def best_per_workload(self, target_key: str | None = None) -> list[MeasurementRecord]:
        """The best record (as ``best``) of every (workload, target) pair, optionally for one target."""
        where = "target_key = ? AND" if target_key is not None else ""
        sql = f"""SELECT * FROM (
                SELECT c.*, ROW_NUMBER() OVER (
                    PARTITION BY workload_key, target_key ORDER BY mean_s, id) AS rank_
                FROM ({self._PER_CONFIG.format(where=where)}) AS c
            ) WHERE rank_ = 1 ORDER BY workload_key, target_key"""
        rows = self.db.query(sql, [target_key] if target_key is not None else [])
        return [record_from_row(r) for r in rows]

    def measurements(
        self, workload_key: str | None = None, target_key: str | None = None
    ) -> list[MeasurementRecord]:
        """All records, optionally filtered, ordered by id."""
        return list(self._iter_measurements(workload_key, target_key))

    def _iter_measurements(
        self, workload_key: str | None = None, target_key: str | None = None
    ) -> Iterator[MeasurementRecord]:
        where, args = _where(workload_key=workload_key, target_key=target_key)
        for row in self.db.query(
            f"SELECT * FROM measurements{where} ORDER BY id", args
        ):
            yield record_from_row(row)

    def count(
        self,
        workload_key: str | None = None,
        target_key: str | None = None,
        errors: bool | None = None,
    ) -> int:
        """Number of records; ``errors`` True/False keeps only failed/successful ones."""
        where, args = _where(workload_key=workload_key, target_key=target_key)
        if errors is not None:
            cond = "error_kind IS NOT NULL" if errors else "error_kind IS NULL"
            where = f"{where} AND {cond}" if where else f" WHERE {cond}"
        return int(
            self.db.execute(
                f"SELECT COUNT(*) FROM measurements{where}", args
            ).fetchone()[0]
        )

    def workload(self, key: str) -> dict[str, Any] | None:
        """``{key, name, description, flops}`` or None."""
        rows = list(self.db.query("SELECT * FROM workloads WHERE key = ?", [key]))
        return _workload_from_row(rows[0]) if rows else None

    def workloads(self) -> list[dict[str, Any]]:
        """All workloads, ordered by key."""
        return [
            _workload_from_row(r)
            for r in self.db.query("SELECT * FROM workloads ORDER BY key")
        ]

    def target(self, key: str) -> dict[str, Any] | None:
        """``{key, kind, fingerprint}`` or None."""
        rows = list(self.db.query("SELECT * FROM targets WHERE key = ?", [key]))
        return _target_from_row(rows[0]) if rows else None

    def targets(self) -> list[dict[str, Any]]:
        """All targets, ordered by key."""
        return [
            _target_from_row(r)
            for r in self.db.query("SELECT * FROM targets ORDER BY key")
        ]

    # -- exchange ------------------------------------------------------------

    def export_jsonl(self, fp_or_path: PathLike | IO[str]) -> int:
        """Write everything as JSON lines; return the number of lines written."""
        lines = dump_lines(self.workloads(), self.targets(), self._iter_measurements())
        if isinstance(fp_or_path, (str, Path)):
            with open(fp_or_path, "w", encoding="utf-8") as fh:
                return _write_lines(fh, lines)
        return _write_lines(fp_or_path, lines)

    def import_jsonl(self, fp_or_path: PathLike | IO[str]) -> int:
        """Import JSON lines atomically; return how many new measurements were added."""
        if isinstance(fp_or_path, (str, Path)):
            source = str(fp_or_path)
            with open(fp_or_path, encoding="utf-8") as fh:
                batch = parse_lines(fh, source)
        else:
            source = str(getattr(fp_or_path, "name", "<stream>"))
            batch = parse_lines(fp_or_path, source)
        return self._apply(batch, f"{source}: line")

    def merge(self, other_path: PathLike) -> int:
        """Copy everything from another tuning DB (left untouched); return new measurements."""
        other = Path(other_path)
        state = inspect_file(other)
        if state is FileState.MISSING:
            raise RecordsError(f"{other} does not exist")
        if state is FileState.EMPTY:
            return 0
        conn = open_readonly(other)
        try:
            src = sqlite_utils.Database(conn, execute_plugins=False)
            # One read transaction: a consistent snapshot even if a tuner is writing.
            conn.execute("BEGIN")
            batch = Batch(
                workloads=[
                    (0, _workload_from_row(r))
                    for r in src.query("SELECT * FROM workloads")
                ],
                targets=[
                    (0, _target_from_row(r)) for r in src.query("SELECT * FROM targets")
                ],
                measurements=[
                    (r["id"], record_from_row(r))
                    for r in src.query("SELECT * FROM measurements ORDER BY id")
                ],
            )
        except sqlite3.Error as exc:
            raise RecordsError(f"cannot read {other}: {exc}") from None
        finally:
            conn.close()
        return self._apply(batch, f"{other}: row")

    def _apply(self, batch: Batch, where: str) -> int:
        """Write a batch in one transaction, skipping measurements we already hold."""
        added = 0
        with self._write():
            for _, w in batch.workloads:
                self.db.table("workloads").upsert(
                    {**w, "description": canonical_json(w["description"])}, pk="key"
                )
            for _, t in batch.targets:
                self.db.table("targets").upsert(
                    {**t, "fingerprint": canonical_json(t["fingerprint"])}, pk="key"
                )
            for lineno, rec in batch.measurements:
                # Imported rows keep their created_at: it is part of the duplicate key.
                row = record_to_row(rec)
                dup = self.db.execute(
                    _DUPLICATE_SQL,
                    [
                        row["workload_key"],
                        row["target_key"],
                        row["config_key"],
                        row["created_at"],
                        row["costs"],
                    ],
                ).fetchone()
                if dup is None:
                    self._insert_row(row, where=f"{where} {lineno}")
                    added += 1
        return added


def _write_lines(fh: IO[str], lines: Iterable[str]) -> int:
    n = 0
    for line in lines:
        fh.write(line)
        n += 1
    return n
