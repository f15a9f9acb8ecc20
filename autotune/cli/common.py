"""Shared pieces of the command-line tools: one-line errors with exit code 2 (argument errors
included), checked numeric flags, the DB and the target, and the run wrapper that turns bad input
and Ctrl-C into one line each."""

from __future__ import annotations

import argparse
import math
import re
import sqlite3
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

from records import RecordsError, TuningDatabase
from records.schema import SQLITE_HEADER, check_connection

from ..backends import TargetBackend, UnknownTargetKind, backend_for, kinds
from ..target import Target, nearest_records_target

if TYPE_CHECKING:
    from ..measure import RunOptions

TARGETS = kinds()
SEED_MAX = 2**32 - 1  # numpy, scikit-learn and XGBoost all take a seed in 0 .. 2**32-1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USAGE)


class ArgParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) that takes negative values of options
    (``--seed -1`` is the value -1, refused by the option's own check, not a missing value)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see {self.prog} --help)")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace=None):  # noqa: ANN001, ANN201
        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._join_negative_values(argv), namespace)

    def _join_negative_values(self, argv: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(argv):
            action = self._option_string_actions.get(argv[i])
            takes_value = action is not None and action.nargs is None and argv[i].startswith("--")
            if takes_value and i + 1 < len(argv) and re.match(r"-\.?\d", argv[i + 1]):
                out.append(f"{argv[i]}={argv[i + 1]}")
                i += 2
                continue
            out.append(argv[i])
            i += 1
        return out


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {value}")
        return value

    return parse


def float_at_least(low: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number >= low."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}, got {text}")
        return value

    return parse


def run_cli(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int],
            argv: list[str] | None, interrupted: str = "") -> int:
    """Parse ``argv`` and run: bad input (UsageError and the library's own input errors) is one line
    and exit status 2; Ctrl-C is one line (with ``interrupted`` appended) and exit status 130."""
    from ..te import WorkloadError

    args = parser.parse_args(argv)
    try:
        return run(args)
    except (UsageError, WorkloadError) as err:
        fail(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
    except KeyboardInterrupt:
        print(f"interrupted{interrupted}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


DEFAULT_DB = "tuning.db"


def add_db_arg(p: argparse.ArgumentParser) -> None:
    """--db (every command that reads or writes the records database)."""
    p.add_argument("--db", default=DEFAULT_DB, help=f"records database file (default ./{DEFAULT_DB})")


def add_exact_target_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exact-target", action="store_true",
                   help="use only records of this exact target; by default, where there are none, the "
                   "records of the nearest compatible target (same hardware and ISA or GPU arch, another "
                   "compiler or driver version) are used and the summary says so")


def open_records(path: str, target: Target, exact: bool) -> tuple[TuningDatabase, Target, str]:
    """Compile's and bench's DB, opened read-only, with the target whose records to use and a note
    ("; ..." or "") where that is the nearest compatible target rather than this exact one."""
    db = open_db(path, create=False)
    if exact:
        return db, target, ""
    try:
        records_target, note = nearest_records_target(db, target)
    except BaseException:
        db.close()
        raise
    if note:
        print(f"records: {note}", flush=True)
    return db, records_target, f"; {note}" if note else ""


def open_db(path: str, create: bool = True) -> TuningDatabase:
    """The records DB at ``path``; ``create=False`` (compile, bench) needs it to exist and opens it
    read-only (a database in a read-only location works)."""
    p = Path(path)
    if not path:
        raise UsageError("--db is empty: name the database file")
    if p.is_dir():
        raise UsageError(f"--db {path} is a directory, not a database file")
    if not create and not p.exists():
        raise UsageError(f"database {path} does not exist; tune into it first (scripts/tune.py --db {path})")
    if not create and p.is_file() and p.stat().st_size == 0:
        raise UsageError(f"database {path} is an empty file, not a tuning database")
    _vet_without_writing(p)
    try:
        return TuningDatabase(p, create=create, readonly=not create)
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None


def _vet_without_writing(path: Path) -> None:
    """Refuse an SQLite file that is not a usable tuning DB (another application's, a newer or older
    schema, damaged) without creating anything beside it: a read-only open of a WAL-mode file with
    no -wal yet creates -wal and -shm and leaves them; an immutable open creates nothing (and with
    no -wal there is no uncommitted content for it to miss)."""
    if not path.is_file() or Path(f"{path}-wal").exists():
        return
    with path.open("rb") as fh:
        if fh.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            return  # not SQLite at all: TuningDatabase says so without opening it
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        check_connection(conn, str(path))
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None
    except sqlite3.DatabaseError as err:
        raise UsageError(f"{path} is not a usable SQLite database: {err}") from None
    finally:
        conn.close()


def backend_of(kind: str) -> TargetBackend:
    """The backend of a target kind, or one line naming the valid kinds (nothing is resolved: a
    host without the kind's device may still prepare a model for it)."""
    try:
        return backend_for(kind)
    except UnknownTargetKind as err:
        raise UsageError(str(err)) from None


def resolve_target(kind: str) -> Target:
    """This machine's target of a kind (its backend's), or one line naming the valid kinds."""
    try:
        return backend_of(kind).resolve()
    except RuntimeError as err:
        raise UsageError(str(err).splitlines()[0]) from None


def measure_tools(target: Target) -> tuple:
    """(builder, runner) for a target, from its backend: gcc + CPU worker, or nvcc for the device's
    arch + GPU worker."""
    return target.backend.make_builder(target), target.backend.make_runner(target)


@contextmanager
def measuring(kind: str, run_options: RunOptions | None, cluster: str | None,
              workers: int | None) -> Iterator[list[tuple[Target, Any, Any, Callable[[Any], Any] | None]]]:
    """Where candidates are measured, as ``(target, builder, runner, make)`` per target to tune:
    this machine's target of ``kind`` with its builder and runner, open for the block (``make``
    None); or, with a scheduler address ``cluster`` or a LocalCluster of ``workers`` processes, each
    target of ``kind`` the cluster measures (every one it offers for ``"all"``) with ``make(workload)``
    giving a measurer on the cluster. A kind, or a cluster, that cannot measure is a UsageError
    (before anything is written)."""
    if cluster is None and workers is None:
        if kind == "all":
            raise UsageError("--target all tunes the targets a cluster's workers offer: it needs --cluster")
        target = resolve_target(kind)
        builder, runner = measure_tools(target)
        with builder, runner:
            yield [(target, builder, runner, None)]
        return
    from ..distributed import ClusterError
    from ..distributed.measurer import cluster_measurers

    if kind != "all":
        try:
            backend_for(kind)
        except UnknownTargetKind as err:
            raise UsageError(str(err).splitlines()[0]) from None
    try:
        with cluster_measurers(kind, run_options, cluster, workers) as places:
            yield [(target, None, None, make) for target, make in places]
    except ClusterError as err:
        raise UsageError(str(err)) from None
