"""``autotune``: one command with subcommands (tune, compile, bench, db, report); each is the same
program as its script (``scripts/tune.py`` is ``autotune tune``)."""

from __future__ import annotations

import argparse
import importlib

from .. import __version__
from .common import ArgParser
from .output import add_output_args

# name -> (module with main(argv, prog), one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tune": ("autotune.cli.tune", "measure schedules of an op or of every task of a model into the database "
             "(no arguments: the embedded default model)"),
    "compile": ("autotune.cli.compile", "build a model from the database's best schedules into one shared "
                "library (--check: compare with onnxruntime)"),
    "bench": ("autotune.cli.bench", "time the best-known kernels against numpy, or a model against "
              "onnxruntime (--model)"),
    "db": ("autotune.cli.db", "show, check, repair, export, import or merge a tuning database"),
    "report": ("autotune.cli.report", "write one self-contained HTML page: tuning curves, chosen "
               "schedules, errors, the target"),
}


def build_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {name:<8} {text}" for name, (_, text) in COMMANDS.items())
    p = ArgParser(
        prog="autotune",
        description="An auto-tuning tensor compiler. `autotune COMMAND --help` describes each command.",
        epilog=f"commands:\n{commands}\n\nexample: autotune tune && autotune compile --model zoo:mlp "
        "--db tuning.db --check && autotune report --db tuning.db -o report.html",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"autotune {__version__}")
    add_output_args(p)
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND",
                   help=f"one of: {', '.join(COMMANDS)}")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    # -v / -q given before the command apply to it
    forwarded = ["-v"] * args.verbose + ["-q"] * args.quiet + list(args.args)
    return int(module.main(forwarded, prog=f"autotune {args.command}") or 0)
