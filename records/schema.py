"""Table definitions, the schema version, and checks that a file is ours."""

from __future__ import annotations

import sqlite3
from enum import Enum
from pathlib import Path

from .errors import ForeignDatabaseError, RecordsError, SchemaVersionError
from .views import NAMED_VIEWS

SCHEMA_VERSION = 5
APP_ID = "autotune-records"
SQLITE_HEADER = b"SQLite format 3\x00"

TABLES = ("meta", "workloads", "targets", "measurements", "claims", "quarantine", "module_picks")
# Tables a reader needs; a schema-1 file (without claims and quarantine) can be read as it is.
READ_TABLES = ("meta", "workloads", "targets", "measurements")
# Views a reader needs; a file of an older schema lacks the named ones (schema 3) and is read as it is.
READ_VIEWS = ("best_measurements",)
VIEWS = READ_VIEWS + tuple(NAMED_VIEWS)

# Schema 2: claims (which process measures which config now, so tuners sharing a DB never measure a
# config twice) and quarantine (rows moved aside by `scripts/db.py repair` because they cannot be read).
_DDL_2: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS claims (
        workload_key TEXT NOT NULL,
        target_key TEXT NOT NULL,
        config_key TEXT NOT NULL,   -- a config's key, or 'confirm:' + its key for a confirmation
        owner TEXT NOT NULL,        -- host:pid:start-time of the claiming process
        expires_at REAL NOT NULL,   -- unix seconds; after this the claim may be taken over
        PRIMARY KEY (workload_key, target_key, config_key)
    )""",
    """CREATE TABLE IF NOT EXISTS quarantine (
        id INTEGER PRIMARY KEY,
        source_table TEXT NOT NULL,
        source_key TEXT NOT NULL,   -- the row's id (measurements) or key (workloads, targets)
        row TEXT NOT NULL,          -- every column of the row, as JSON (text columns verbatim)
        reason TEXT NOT NULL,
        moved_at REAL NOT NULL
    )""",
)

# Schema 5: module_picks, the record each task of a compiled model takes when its runner-ups were
# timed inside that model (autotune/graph/rerank.py); compile takes a pick while the task's best is unchanged.
_DDL_5: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS module_picks (
        module_key TEXT NOT NULL,       -- sha256 of the module's calls (their workload keys, in order)
        target_key TEXT NOT NULL,
        workload_key TEXT NOT NULL,
        config_key TEXT NOT NULL,       -- the config the task takes in this module
        best_config_key TEXT NOT NULL,  -- the task's best config (isolated timing) when it was picked
        module_s REAL NOT NULL,         -- the task's calls in the module with config_key (median seconds)
        best_module_s REAL NOT NULL,    -- ... with best_config_key
        model TEXT NOT NULL DEFAULT '', -- the model's name, for people
        created_at REAL NOT NULL,
        PRIMARY KEY (module_key, target_key, workload_key)
    )""",
)

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
) + _DDL_2 + tuple(NAMED_VIEWS.values()) + _DDL_5

# version -> the statements that bring a file of that version to the next one. Schema 3: views that
# carry names (records/views.py), for sqlite-utils and Datasette.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _DDL_2,
    2: tuple(NAMED_VIEWS.values()),
    # schema 4: a config with a wrong answer or a crash in any record is never the best one
    3: ("DROP VIEW IF EXISTS best_configs", NAMED_VIEWS["best_configs"]),
    4: _DDL_5,
}


class FileState(Enum):
    """What an existing path holds, as far as this package is concerned."""

    MISSING = "missing"
    EMPTY = "empty"  # zero bytes, or a valid SQLite file with no schema objects
    OURS = "ours"
    OLDER = "older"  # ours, of an older schema that MIGRATIONS brings up to date (readable as it is)


def create_schema(conn: sqlite3.Connection) -> None:
    """Create all tables and the meta rows; the caller owns the transaction."""
    for stmt in DDL:
        conn.execute(stmt)
    conn.executemany(
        "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
        [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
    )


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring an OLDER file up to SCHEMA_VERSION; the caller owns the (write) transaction."""
    version = _schema_version(dict(conn.execute("SELECT key, value FROM meta").fetchall()), path)
    while version < SCHEMA_VERSION:
        for stmt in MIGRATIONS[version]:
            conn.execute(stmt)
        version += 1
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])


def _schema_version(meta: dict, path: str) -> int:
    try:
        return int(meta["schema_version"])
    except (KeyError, TypeError, ValueError):
        raise RecordsError(
            f"{path} has no valid schema_version in its meta table"
        ) from None


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
    version = _schema_version(meta, path)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} was written by a newer version (schema {version} > {SCHEMA_VERSION})"
        )
    if version < SCHEMA_VERSION and version not in MIGRATIONS:
        # refuse rather than misread old rows
        raise SchemaVersionError(
            f"{path} uses an older schema ({version} < {SCHEMA_VERSION}) and no migration exists"
        )
    needed = TABLES + VIEWS if version == SCHEMA_VERSION else READ_TABLES + READ_VIEWS
    missing = [n for n in needed if n not in names]
    if missing:
        raise RecordsError(f"{path} is incomplete: missing {', '.join(missing)}")
    return FileState.OURS if version == SCHEMA_VERSION else FileState.OLDER


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
    conn = open_readonly(path)
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
    """Open an already-validated database for reading only: SQLite's mode=ro, or, where that cannot
    work (a WAL file in a directory this process may not write, so the -shm index cannot be made),
    immutable=1, which reads the main file as it is and creates nothing beside it."""
    base = path.resolve().as_uri()
    if not Path(f"{path}-wal").exists():
        # no writer has un-checkpointed pages: read the main file as it is. (mode=ro on a WAL
        # database with no -wal file would create -wal and -shm beside it and could not remove them)
        try:
            conn = sqlite3.connect(f"{base}?mode=ro&immutable=1", uri=True, timeout=30.0)
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error:
            pass
    try:
        conn = sqlite3.connect(f"{base}?mode=ro", uri=True, timeout=30.0)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.Error as exc:
        first = exc
    try:
        conn = sqlite3.connect(f"{base}?mode=ro&immutable=1", uri=True, timeout=30.0)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.Error:
        raise RecordsError(f"cannot open {path} read-only: {first}") from None
