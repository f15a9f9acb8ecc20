"""``db.py``: look after a records database: check (unreadable rows, schema drift, orphans, stale
claims), repair (unreadable rows moved to the quarantine table), export / import JSON lines, merge
another database in."""

from __future__ import annotations

import argparse
from pathlib import Path

from records import RecordsError
from records.maintenance import check, repair

from .common import ArgParser, UsageError, open_db, run_cli
from .output import add_output_args, emit_json, with_output


def build_parser(prog: str = "db.py") -> argparse.ArgumentParser:
    p = ArgParser(
        prog=prog,
        description="Look after a tuning database. Exit status: 0 done (check: no problems), 1 check "
        "found problems, 2 bad input.",
    )
    add_output_args(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=ArgParser)
    c = sub.add_parser("check", help="report unreadable rows, schema drift, orphan measurements and "
                       "stale claims (read-only; exit 1 if any)")
    c.add_argument("db")
    c.add_argument("--json", action="store_true", help="print the report as one JSON object")
    r = sub.add_parser("repair", help="move unreadable rows to the quarantine table (every column kept), "
                       "drop stale claims, restore missing indexes and views; readable rows are untouched")
    r.add_argument("db")
    e = sub.add_parser("export", help="write every readable row as JSON lines")
    e.add_argument("db")
    e.add_argument("output", help="JSON-lines file to write")
    i = sub.add_parser("import", help="add the rows of a JSON-lines file (all or nothing; rows already "
                       "held are skipped)")
    i.add_argument("db")
    i.add_argument("input", help="JSON-lines file written by export")
    m = sub.add_parser("merge", help="add the rows of another tuning database (left untouched)")
    m.add_argument("db")
    m.add_argument("other", help="the database to copy from")
    return p


def main(argv: list[str] | None = None, prog: str = "db.py") -> int:
    return run_cli(build_parser(prog), with_output(_run), argv,
                   "; nothing was committed by the interrupted step")


def _run(args: argparse.Namespace) -> int:
    if args.command not in ("import", "merge") and not Path(args.db).exists():
        raise UsageError(f"database {args.db} does not exist")
    # check and export read (a database in a read-only place works); the others write
    db = open_db(args.db, create=args.command not in ("check", "export"))
    try:
        return _COMMANDS[args.command](db, args)
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None
    except OSError as err:
        raise UsageError(f"{err.filename or args.db}: {err.strerror or err}") from None
    finally:
        db.close()


def _check(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    report = check(db)
    if args.json:
        emit_json(report.to_json())
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _repair(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    done = repair(db)
    print(f"{args.db}: {done['quarantined']} unreadable row(s) moved to the quarantine table, "
          f"{done['stale_claims']} stale claim(s) dropped")
    return 0


def _export(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"{args.output} is a directory; name the file to write")
    if not out.parent.is_dir():
        raise UsageError(f"{args.output}: directory {str(out.parent)!r} does not exist")
    tmp = out.with_name(f".{out.name}.tmp")
    try:  # written whole or not at all
        n = db.export_jsonl(tmp)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"{args.db}: {n} lines written to {args.output}")
    return 0


def _import(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    if not Path(args.input).is_file():
        raise UsageError(f"{args.input} is not a file")
    print(f"{args.db}: {db.import_jsonl(args.input)} new measurements from {args.input}")
    return 0


def _merge(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    print(f"{args.db}: {db.merge(args.other)} new measurements from {args.other}")
    return 0


_COMMANDS = {"check": _check, "repair": _repair, "export": _export, "import": _import, "merge": _merge}
