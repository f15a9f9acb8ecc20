"""TuningDatabase: the SQLite store of measurements shared by tuners."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Self

import sqlite_utils

from .errors import RecordsError
from .jsonl import Batch, dump_lines, open_jsonl, parse_lines, parse_module_pick
from .owner import CLAIM_TTL_S, owner_alive
from .record import (
    CONFIRM_LABEL,
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
    migrate,
    open_readonly,
)
from .views import PER_CONFIG

log = logging.getLogger("records")

# What reading a damaged row raises: bad JSON (a ValueError), a wrong type, a missing field.
ROW_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecordsError)

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
    """One tuning database file; safe to share between processes (WAL).

    ``readonly``: open with SQLite's mode=ro (immutable=1 where the directory cannot be written), so
    a database in a read-only location can be read (compile, bench); a file of an older schema is
    then read as it is. Rows that cannot be read (damaged JSON) are skipped by every read, counted
    in ``skipped`` and named in one logged warning; ``scripts/db.py repair`` moves them aside."""

    def __init__(self, path: PathLike, *, create: bool = True, readonly: bool = False) -> None:
        self.path = Path(path)
        self._memory = str(path) == ":memory:"
        self.readonly = readonly and not self._memory
        self.skipped: dict[tuple[str, str], str] = {}  # (table, id or key) -> why it cannot be read
        state = FileState.EMPTY if self._memory else inspect_file(self.path)
        if state is FileState.MISSING and (not create or self.readonly):
            raise RecordsError(f"{self.path} does not exist (create=False)")
        if state is FileState.EMPTY and (not create or self.readonly) and not self._memory:
            raise RecordsError(
                f"{self.path} is empty, not a tuning database (create=False)"
            )
        if self.readonly:
            self.db = sqlite_utils.Database(open_readonly(self.path), execute_plugins=False)
            self.db.execute("PRAGMA busy_timeout=30000")
            return
        if state is not FileState.MISSING and not self._memory:
            _check_writable(self.path)
        if state is FileState.MISSING:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # Only now, after inspect_file() vetted the file read-only, may we write to it.
        # Plugins are skipped: they could run arbitrary SQL on connect.
        self.db = sqlite_utils.Database(
            ":memory:" if self._memory else self.path, execute_plugins=False
        )
        try:
            self._setup(state)
        except sqlite3.OperationalError as exc:
            self.db.close()
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise RecordsError(_read_only_message(self.path)) from None
            raise RecordsError(f"cannot open {self.path}: {exc}") from None
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
            now = check_connection(self.db.conn, str(self.path))
            if now is FileState.EMPTY:
                create_schema(self.db.conn)
            elif now is FileState.OLDER:
                migrate(self.db.conn, str(self.path))

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
        if self.readonly:
            raise RecordsError(f"{self.path} was opened read-only; it cannot be written")
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

    def put_module_picks(self, picks: Iterable[dict[str, Any]]) -> int:
        """Store the picks of one rerank (rows of ``module_picks``, see records/schema.py), each
        replacing an older pick of its module, target and workload; return how many were stored."""
        rows = [parse_module_pick(p) for p in picks]
        with self._write():
            return sum(self._put_pick(row) for row in rows)

    def _put_pick(self, row: dict[str, Any]) -> bool:
        """Upsert one pick unless the database holds a newer one of the same task in the same module."""
        cur = self.db.execute(
            "SELECT created_at FROM module_picks"
            " WHERE module_key = ? AND target_key = ? AND workload_key = ?",
            [row["module_key"], row["target_key"], row["workload_key"]],
        ).fetchone()
        if cur is not None and cur[0] >= row["created_at"]:
            return False
        self.db.table("module_picks").upsert(row, pk=("module_key", "target_key", "workload_key"))
        return True

    def add_measurement(self, rec: MeasurementRecord) -> int:
        """Store one record durably and return its id."""
        return self.add_measurements([rec])[0]

    def add_measurements(
        self, recs: Iterable[MeasurementRecord], claimed_by: str | None = None
    ) -> list[int]:
        """Store records in one committed transaction; return their ids in order. ``claimed_by``:
        the owner's claims on measuring these configs are released in the same transaction (and its
        other claims renewed), so a config is always either claimed or measured."""
        rows = [self._prepare(rec) for rec in recs]
        ids: list[int] = []
        with self._write():
            for row in rows:
                ids.append(self._insert_row(row, where="add_measurement"))
                if claimed_by is not None:
                    self.db.execute(
                        "DELETE FROM claims WHERE workload_key = ? AND target_key = ? AND owner = ?"
                        " AND config_key = ?",
                        [row["workload_key"], row["target_key"], claimed_by, row["config_key"]],
                    )
            if claimed_by is not None:
                self.db.execute(
                    "UPDATE claims SET expires_at = ? WHERE owner = ?",
                    [time.time() + CLAIM_TTL_S, claimed_by],
                )
        return ids

    # -- claims (several tuners on one database) ------------------------------

    def claim(
        self,
        workload_key: str,
        target_key: str,
        config_keys: Iterable[str],
        owner: str,
        budget: int | None = None,
        ttl_s: float = CLAIM_TTL_S,
        shared_with: Iterable[str] = (),
    ) -> list[str]:
        """Claim configs of a pair for ``owner`` to measure; returns the keys granted, in order.

        One write transaction: claims that expired or whose owner process has ended are dropped
        first; a key already measured (keys of the form confirm_claim_key(k) excepted) or claimed
        by another owner is not granted; and with ``budget``, no more are granted than keep the
        pair's measured configs plus every live claim within it; ``shared_with`` names further
        workloads (of the same target) whose measured configs and live claims count against the same
        ``budget`` (a model's tasks share one)."""
        keys = list(dict.fromkeys(config_keys))
        now = time.time()
        granted: list[str] = []
        with self._write():
            self._drop_stale_claims(workload_key, target_key, now)
            measured = self.measured_config_keys(workload_key, target_key, search_only=True)
            held = {
                r[0]: r[1]
                for r in self.db.execute(
                    "SELECT config_key, owner FROM claims WHERE workload_key = ? AND target_key = ?",
                    [workload_key, target_key],
                )
            }
            scope = [workload_key, *shared_with]
            room = None if budget is None else budget - self._used(scope, target_key, now)
            for key in keys:
                confirm = key.startswith(_CONFIRM_PREFIX)
                if (not confirm and key in measured) or held.get(key, owner) != owner:
                    continue
                if key not in held and not confirm and room is not None:
                    if room <= 0:
                        break
                    room -= 1
                self.db.execute(
                    "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)",
                    [workload_key, target_key, key, owner, now + ttl_s],
                )
                granted.append(key)
        return granted

    def budget_used(self, workload_keys: Iterable[str], target_key: str) -> int:
        """Configs of these workloads (one target) that a search measured or a live tuner claimed and
        has not stored yet: what counts against a budget they share."""
        with self._write():
            return self._used(workload_keys, target_key, time.time())

    def _used(self, workload_keys: Iterable[str], target_key: str, now: float) -> int:
        """budget_used inside a write transaction: stale claims dropped first."""
        used = 0
        for key in dict.fromkeys(workload_keys):
            self._drop_stale_claims(key, target_key, now)
            used += self._search_count(key, target_key)
        return used

    def _search_count(self, workload_key: str, target_key: str) -> int:
        """Configs of the pair measured by a search or claimed for one and not yet stored."""
        measured = self.measured_config_keys(workload_key, target_key, search_only=True)
        claimed = {
            r[0]
            for r in self.db.execute(
                "SELECT config_key FROM claims WHERE workload_key = ? AND target_key = ?",
                [workload_key, target_key],
            )
            if not r[0].startswith(_CONFIRM_PREFIX)
        }
        return len(measured | claimed)

    def _drop_stale_claims(self, workload_key: str, target_key: str, now: float) -> None:
        rows = self.db.execute(
            "SELECT config_key, owner, expires_at FROM claims WHERE workload_key = ? AND target_key = ?",
            [workload_key, target_key],
        ).fetchall()
        dead = {o for _, o, _ in rows if not owner_alive(o)}
        for key, o, expires in rows:
            if expires < now or o in dead:
                self.db.execute(
                    "DELETE FROM claims WHERE workload_key = ? AND target_key = ? AND config_key = ?",
                    [workload_key, target_key, key],
                )

    def release_claims(self, owner: str, config_keys: Iterable[str] | None = None) -> int:
        """Drop ``owner``'s claims (all of them, or those of ``config_keys``); returns how many."""
        with self._write():
            if config_keys is None:
                cur = self.db.execute("DELETE FROM claims WHERE owner = ?", [owner])
                return cur.rowcount
            n = 0
            for key in config_keys:
                n += self.db.execute(
                    "DELETE FROM claims WHERE owner = ? AND config_key = ?", [owner, key]
                ).rowcount
            return n

    def claims(self) -> list[dict[str, Any]]:
        """Every claim: workload_key, target_key, config_key, owner, expires_at, live (not expired,
        owner running)."""
        if not self._has_table("claims"):
            return []
        now = time.time()
        return [
            {**r, "live": r["expires_at"] >= now and owner_alive(r["owner"])}
            for r in self.db.query("SELECT * FROM claims ORDER BY workload_key, target_key, config_key")
        ]

    def _has_table(self, name: str) -> bool:
        return self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]
        ).fetchone() is not None

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

    def measured_config_keys(
        self, workload_key: str, target_key: str, search_only: bool = False
    ) -> set[str]:
        """config_key of every stored attempt (errors included), for resuming; ``search_only``
        leaves out configs whose only records are confirmations."""
        extra = " AND tuner != ?" if search_only else ""
        rows = self.db.execute(
            "SELECT DISTINCT config_key FROM measurements WHERE workload_key = ? AND target_key = ?"
            + extra,
            [workload_key, target_key] + ([CONFIRM_LABEL] if search_only else []),
        )
        return {r[0] for r in rows}

    def confirmations(self, workload_key: str, target_key: str) -> dict[str, int]:
        """config_key -> number of confirmation records (errors included) of the pair."""
        rows = self.db.execute(
            "SELECT config_key, COUNT(*) FROM measurements WHERE workload_key = ? AND target_key = ?"
            " AND tuner = ? GROUP BY config_key",
            [workload_key, target_key, CONFIRM_LABEL],
        )
        return {r[0]: int(r[1]) for r in rows}

    def search_top(self, workload_key: str, target_key: str, k: int | None) -> list[MeasurementRecord]:
        """The ``k`` fastest configs by their search records alone (confirmations left out), one
        record each: a tuning run's finalists, the same however far their confirmation got."""
        sql = """SELECT * FROM (
                SELECT m.*, ROW_NUMBER() OVER (PARTITION BY config_key ORDER BY mean_s, id) AS rn_
                FROM measurements AS m
                WHERE workload_key = ? AND target_key = ? AND tuner != ?
                  AND error_kind IS NULL AND verified = 1 AND mean_s IS NOT NULL
            ) WHERE rn_ = 1 ORDER BY mean_s, id"""
        return self._take(self.db.query(sql, [workload_key, target_key, CONFIRM_LABEL]), k)

    def _take(self, rows: Iterable[dict[str, Any]], k: int | None) -> list[MeasurementRecord]:
        """The first ``k`` readable records of ``rows`` (unreadable ones skipped and reported)."""
        out: list[MeasurementRecord] = []
        for rec in self._readable(rows):
            if k is not None and len(out) >= k:
                break
            out.append(rec)
        return out

    def _readable(self, rows: Iterable[dict[str, Any]]) -> Iterator[MeasurementRecord]:
        for row in rows:
            try:
                rec = record_from_row(row)
            except ROW_ERRORS as exc:
                self._skip("measurements", str(row.get("id")), exc)
                continue
            yield rec

    def _skip(self, table: str, key: str, exc: BaseException) -> None:
        """Count an unreadable row; the first time one is met, scan for every other one and name
        them all in one warning."""
        if (table, key) in self.skipped:
            return
        first = not self.skipped
        self.skipped[(table, key)] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if not first:
            return
        from .maintenance import unreadable_rows  # (a full scan, only once a bad row turned up)

        for t, k, why in unreadable_rows(self.db.conn):
            self.skipped.setdefault((t, k), why)
        names = ", ".join(f"{t} {k}" for t, k in sorted(self.skipped))
        log.warning(
            "%s: %d unreadable row(s) skipped (%s); `scripts/db.py check %s` lists them, "
            "`scripts/db.py repair %s` moves them aside",
            self.path, len(self.skipped), names, self.path, self.path,
        )

    # how configs are ranked (a config measured several times by its median record, confirmed
    # finalists first): records/views.py, the one definition the views share
    _PER_CONFIG = PER_CONFIG

    def _fastest(self, workload_key: str, target_key: str, config_key: str | None = None
                 ) -> Iterator[dict[str, Any]]:
        """One row per verified, error-free config of the pair (its upper-median record), best
        first (confirmed finalists before the rest, then by time); only ``config_key``'s if given."""
        where, args = _where(workload_key=workload_key, target_key=target_key, config_key=config_key)
        sql = self._PER_CONFIG.format(where=where.removeprefix(" WHERE ") + " AND")
        return self.db.query(f"{sql} ORDER BY unconfirmed_, mean_s, id", args * 2)

    def best(self, workload_key: str, target_key: str) -> MeasurementRecord | None:
        """The fastest verified, error-free config of the pair (by the upper median of its records;
        confirmed finalists first, see _PER_CONFIG), as that record; None if there is none."""
        found = self._take(self._fastest(workload_key, target_key), 1)
        return found[0] if found else None

    def top(self, workload_key: str, target_key: str, k: int) -> list[MeasurementRecord]:
        """The ``k`` best verified, error-free configs of the pair (ranked as ``best``), best first."""
        return self._take(self._fastest(workload_key, target_key), k)

    def config_record(self, workload_key: str, target_key: str, config_key: str) -> MeasurementRecord | None:
        """The record that ranks the config (as ``best`` ranks configs); None if it has no verified,
        error-free record."""
        found = self._take(self._fastest(workload_key, target_key, config_key), 1)
        return found[0] if found else None

    def module_picks(self, module_key: str | None = None, target_key: str | None = None
                     ) -> list[dict[str, Any]]:
        """Stored module picks (all, or those of one module and target), unreadable rows skipped;
        none in a file of a schema before module picks."""
        if not self._has_table("module_picks"):
            return []
        where, args = _where(module_key=module_key, target_key=target_key)
        out = []
        for row in self.db.query(
            f"SELECT rowid, * FROM module_picks{where} ORDER BY module_key, target_key, workload_key", args
        ):
            try:
                out.append(parse_module_pick(row))
            except ROW_ERRORS as exc:
                self._skip("module_picks", str(row["rowid"]), exc)
        return out

    def best_per_workload(self, target_key: str | None = None) -> list[MeasurementRecord]:
        """The best record (as ``best``) of every (workload, target) pair, optionally for one target."""
        where = "target_key = ? AND" if target_key is not None else ""
        sql = f"""SELECT * FROM (
                SELECT c.*, ROW_NUMBER() OVER (
                    PARTITION BY workload_key, target_key ORDER BY unconfirmed_, mean_s, id) AS rank_
                FROM ({self._PER_CONFIG.format(where=where)}) AS c
            ) ORDER BY workload_key, target_key, rank_"""
        rows = self.db.query(sql, [target_key] * 2 if target_key is not None else [])
        out: dict[tuple[str, str], MeasurementRecord] = {}
        for rec in self._readable(rows):  # the first readable config of each pair
            out.setdefault((rec.workload_key, rec.target_key), rec)
        return list(out.values())

    def measurements(
        self, workload_key: str | None = None, target_key: str | None = None
    ) -> list[MeasurementRecord]:
        """All records, optionally filtered, ordered by id."""
        return list(self._iter_measurements(workload_key, target_key))

    def _iter_measurements(
        self, workload_key: str | None = None, target_key: str | None = None
    ) -> Iterator[MeasurementRecord]:
        where, args = _where(workload_key=workload_key, target_key=target_key)
        yield from self._readable(
            self.db.query(f"SELECT * FROM measurements{where} ORDER BY id", args)
        )

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

    def _rows_of(self, table: str, parse: Any, key: str | None = None) -> list[dict[str, Any]]:
        """Parsed rows of workloads or targets (all, or the one of ``key``), unreadable ones skipped."""
        where, args = (" WHERE key = ?", [key]) if key is not None else ("", [])
        out = []
        for row in self.db.query(f"SELECT * FROM {table}{where} ORDER BY key", args):
            try:
                out.append(parse(row))
            except ROW_ERRORS as exc:
                self._skip(table, str(row.get("key")), exc)
        return out

    def workload(self, key: str) -> dict[str, Any] | None:
        """``{key, name, description, flops}`` or None."""
        rows = self._rows_of("workloads", _workload_from_row, key)
        return rows[0] if rows else None

    def workloads(self) -> list[dict[str, Any]]:
        """All workloads, ordered by key."""
        return self._rows_of("workloads", _workload_from_row)

    def target(self, key: str) -> dict[str, Any] | None:
        """``{key, kind, fingerprint}`` or None."""
        rows = self._rows_of("targets", _target_from_row, key)
        return rows[0] if rows else None

    def targets(self) -> list[dict[str, Any]]:
        """All targets, ordered by key."""
        return self._rows_of("targets", _target_from_row)

    # -- exchange ------------------------------------------------------------

    def export_jsonl(self, fp_or_path: PathLike | IO[str]) -> int:
        """Write everything as JSON lines (gzip-compressed to a path ending in ``.gz``); return the
        number of lines written."""
        lines = dump_lines(self.workloads(), self.targets(), self._iter_measurements(), self.module_picks())
        if isinstance(fp_or_path, (str, Path)):
            with open_jsonl(fp_or_path, "w") as fh:
                return _write_lines(fh, lines)
        return _write_lines(fp_or_path, lines)

    def import_jsonl(self, fp_or_path: PathLike | IO[str]) -> int:
        """Import JSON lines (plain or gzip-compressed) atomically; return how many new measurements
        were added."""
        if isinstance(fp_or_path, (str, Path)):
            source = str(fp_or_path)
            with open_jsonl(fp_or_path, "r") as fh:
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
        src = TuningDatabase(other, readonly=True)
        try:
            # One read transaction: a consistent snapshot even if a tuner is writing; rows of the
            # other file that cannot be read are skipped (and named in one warning).
            src.db.execute("BEGIN")
            batch = Batch(
                workloads=[(0, w) for w in src.workloads()],
                targets=[(0, t) for t in src.targets()],
                measurements=[(r.id or 0, r) for r in src.measurements()],
                module_picks=[(0, p) for p in src.module_picks()],
            )
        except sqlite3.Error as exc:
            raise RecordsError(f"cannot read {other}: {exc}") from None
        finally:
            src.close()
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
            for _, pick in batch.module_picks:  # the newer pick of a task in a module wins
                self._put_pick(pick)
        return added


_CONFIRM_PREFIX = "confirm:"


def confirm_claim_key(config_key: str) -> str:
    """The claim key of confirming a config (distinct from the claim of measuring it)."""
    return _CONFIRM_PREFIX + config_key


def _check_writable(path: Path) -> None:
    """Refuse, before SQLite tries and fails mid-write, a file this process may not write (or whose
    directory it cannot write the -wal and -shm files into)."""
    if not os.access(path, os.W_OK) or not os.access(path.resolve().parent, os.W_OK | os.X_OK):
        raise RecordsError(_read_only_message(path))


def _read_only_message(path: Path) -> str:
    return (f"{path} is read-only (the file or its directory); tuning needs a writable database "
            "(compile and bench can read this one as it is)")


def _write_lines(fh: IO[str], lines: Iterable[str]) -> int:
    n = 0
    for line in lines:
        fh.write(line)
        n += 1
    return n
