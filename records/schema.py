"""Table definitions, the schema version, and checks that a file is ours."""

from __future__ import annotations

import sqlite3
from enum import Enum
from pathlib import Path

from .errors import ForeignDatabaseError, RecordsError, SchemaVersionError

SCHEMA_VERSION = 1
APP_ID = "autotune-records"
SQLITE_HEADER = b"SQLite format 3\x00"

TABLES = ("meta", "workloads", "targets", "measurements")
VIEWS = ("best_measurements",)

# Plain SQL rather than sqlite_utils' create(): it gives exact column types,
# CHECK constraints and foreign keys, and is readable as the schema reference.
DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS workloads (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        description TEXT NOT NULL,  -- JSON object
        flops REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS targets (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        fingerprint TEXT NOT NULL   -- JSON object
    )""",
    """CREATE TABLE IF NOT EXISTS measurements (
        id INTEGER PRIMARY KEY,
        workload_key TEXT NOT NULL REFERENCES workloads(key),
        target_key TEXT NOT NULL REFERENCES targets(key),
        space_version INTEGER NOT NULL,
        config TEXT NOT NULL,       -- canonical JSON object
        config_key TEXT NOT NULL,   -- sha256 of config
        steps TEXT NOT NULL,        -- JSON list
        costs TEXT NOT NULL,        -- JSON list of seconds
        mean_s REAL,                -- NULL when the run failed
        error_kind TEXT,
        error_msg TEXT NOT NULL DEFAULT '',
        build_s REAL NOT NULL DEFAULT 0,
        verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),
        tuner TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS idx_measurements_config
        ON measurements (workload_key, target_key, config_key)""",
    """CREATE INDEX IF NOT EXISTS idx_measurements_mean
        ON measurements (workload_key, target_key, mean_s)""",
    # The fastest single record of each pair (ties go to the earliest row). The API's
    # TuningDatabase.best ranks a config measured several times by its median record instead.
    """CREATE VIEW IF NOT EXISTS best_measurements AS
        SELECT * FROM (
            SELECT m.*, ROW_NUMBER() OVER (
                PARTITION BY workload_key, target_key ORDER BY mean_s, id
            ) AS rank_
            FROM measurements AS m
            WHERE error_kind IS NULL AND verified = 1 AND mean_s IS NOT NULL
        ) WHERE rank_ = 1""",
)


class FileState(Enum):
    """What an existing path holds, as far as this package is concerned."""

    MISSING = "missing"
    EMPTY = "empty"  # zero bytes, or a valid SQLite file with no schema objects
    OURS = "ours"


def create_schema(conn: sqlite3.Connection) -> None:
    """Create all tables and the meta rows; the caller owns the transaction."""
    for stmt in DDL:
        conn.execute(stmt)
    conn.executemany(
        "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
        [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
    )


def check_connection(conn: sqlite3.Connection, path: str) -> FileState:
    """Classify an open database; raise if it is not one we may use.

    Reads only, so it is safe on a read-only connection to a foreign file.
    """
    names = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        )
    }
    if not names:
        return FileState.EMPTY
    if "meta" not in names:
        raise ForeignDatabaseError(
            f"{path} is an SQLite database of another application (no meta table)"
        )
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise ForeignDatabaseError(
            f"{path} has an unreadable meta table: {exc}"
        ) from None
    if meta.get("app") != APP_ID:
        raise ForeignDatabaseError(
            f"{path} is an SQLite database of another application (app={meta.get('app')!r})"
        )
    try:
        version = int(meta["schema_version"])
    except (KeyError, TypeError, ValueError):
        raise RecordsError(
            f"{path} has no valid schema_version in its meta table"
        ) from None
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} was written by a newer version (schema {version} > {SCHEMA_VERSION})"
        )
    if version < SCHEMA_VERSION:
        # No migrations exist yet; refuse rather than misread old rows.
        raise SchemaVersionError(
            f"{path} uses an older schema ({version} < {SCHEMA_VERSION}) and no migration exists"
        )
    missing = [n for n in TABLES + VIEWS if n not in names]
    if missing:
        raise RecordsError(f"{path} is incomplete: missing {', '.join(missing)}")
    return FileState.OURS


def inspect_file(path: Path) -> FileState:
    """Classify ``path`` without writing to it (header check, then read-only open)."""
    if not path.exists():
        return FileState.MISSING
    if not path.is_file():
        raise RecordsError(f"{path} is not a regular file")
    with path.open("rb") as fh:
        header = fh.read(len(SQLITE_HEADER))
    if not header:
        return FileState.EMPTY
    if header != SQLITE_HEADER:
        raise ForeignDatabaseError(f"{path} is not an SQLite database")
    # mode=ro guarantees SQLite itself cannot write to a file we have not vetted.
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise RecordsError(f"cannot open {path}: {exc}") from None
    try:
        return check_connection(conn, str(path))
    except sqlite3.OperationalError as exc:
        raise RecordsError(f"cannot read {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise ForeignDatabaseError(
            f"{path} is not a usable SQLite database: {exc}"
        ) from None
    finally:
        conn.close()


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open an already-validated database for reading only."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise RecordsError(f"cannot open {path}: {exc}") from None
