"""``db.py``: look after a records database: show what it holds by name, check (unreadable rows,
schema drift, orphans, stale claims), repair (unreadable rows moved to the quarantine table), export /
import JSON lines, merge another database in, write Datasette metadata."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

from records import RecordsError
from records.maintenance import check, repair
from records.summary import summarize_database, summary_lines
from records.views import datasette_metadata

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
    # name -> (help, its arguments after the database: (name, help) or (flag, help, kind))
    commands: dict[str, tuple[str, list[tuple[str, ...]]]] = {
        "show": ("targets and workloads by name, trials and failures per workload, the best record of "
                 "each (the one compile takes), errors by kind (read-only)",
                 [("--json", "print it as one JSON object", "flag")]),
        "metadata": ("write Datasette's metadata (a description of every table and view) for this "
                     "database: datasette DB -m FILE", [("-o", "JSON file to write", "output")]),
        "check": ("report unreadable rows, schema drift, orphan measurements and stale claims (read-only; "
                  "exit 1 if any)", [("--json", "print the report as one JSON object", "flag")]),
        "repair": ("move unreadable rows to the quarantine table (every column kept), drop stale claims, "
                   "restore missing indexes and views; readable rows are untouched", []),
        "export": ("write every readable row as JSON lines", [("output", "JSON-lines file to write")]),
        "import": ("add the rows of a JSON-lines file (all or nothing; rows already held are skipped)",
                   [("input", "JSON-lines file written by export")]),
        "merge": ("add the rows of another tuning database (left untouched)",
                  [("other", "the database to copy from")]),
    }
    for name, (text, extra) in commands.items():
        c = sub.add_parser(name, help=text)
        c.add_argument("db")
        for arg, arg_help, *kind in extra:
            if kind == ["flag"]:
                c.add_argument(arg, action="store_true", help=arg_help)
            elif kind == ["output"]:
                c.add_argument(arg, "--output", dest="output", required=True, help=arg_help)
            else:
                c.add_argument(arg, help=arg_help)
    return p


def main(argv: list[str] | None = None, prog: str = "db.py") -> int:
    return run_cli(build_parser(prog), with_output(_run), argv,
                   "; nothing was committed by the interrupted step")


def _run(args: argparse.Namespace) -> int:
    created = not Path(args.db).exists()
    if args.command not in ("import", "merge") and created:
        raise UsageError(f"database {args.db} does not exist")
    # show, check, export and metadata read (a database in a read-only place works); the others write
    db = open_db(args.db, create=args.command not in ("show", "check", "export", "metadata"))
    done = False
    try:
        status = _COMMANDS[args.command](db, args)
        done = True
        return status
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None
    except OSError as err:
        raise UsageError(f"{err.filename or args.db}: {err.strerror or err}") from None
    finally:
        db.close()
        if created and not done:  # an import or merge that failed leaves no new database behind
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{args.db}{suffix}").unlink(missing_ok=True)


def _show(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    summary = summarize_database(db)
    if args.json:
        emit_json(summary.to_json())
    else:
        print("\n".join(summary_lines(summary)))
    return 0


def _metadata(db, args: argparse.Namespace) -> int:  # noqa: ANN001
    meta = datasette_metadata(Path(args.db).stem)
    _write_whole(args.output, lambda tmp: tmp.write_text(json.dumps(meta, indent=2) + "\n"))
    print(f"{args.output}: Datasette metadata for {args.db} (datasette {args.db} -m {args.output})")
    return 0


def _write_whole(path: str, write: Callable[[Path], object]) -> object:
    """Write ``path`` through a temporary file beside it: whole or not at all; a directory or a
    missing parent is one line."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"{path} is a directory; name the file to write")
    if not out.parent.is_dir():
        raise UsageError(f"{path}: directory {str(out.parent)!r} does not exist")
    tmp = out.with_name(f".tmp.{out.name}")  # the same suffix: an export to NAME.gz is compressed
    try:
        result = write(tmp)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return result


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
    n = _write_whole(args.output, db.export_jsonl)
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


_COMMANDS = {"show": _show, "metadata": _metadata, "check": _check,
             "repair": _repair, "export": _export, "import": _import, "merge": _merge}
