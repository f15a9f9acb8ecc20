"""``autotune report``: write one self-contained HTML page about a tuning database."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..target import Target
from .common import ArgParser, UsageError, add_db_arg, open_db, run_cli
from .output import add_output_args, with_output


def build_parser(prog: str = "autotune report") -> argparse.ArgumentParser:
    from .model import add_model_args

    p = ArgParser(
        prog=prog,
        description="Write one HTML page (inline charts, no external assets) about a tuning database: per "
        "task the tuning curve (fastest so far against trials) and the chosen schedule as a loop nest; "
        "with --model, the model's estimated latency against the trials spent; errors by kind; the "
        "target's provenance. Reads the database only.",
    )
    add_db_arg(p)
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    add_model_args(p)
    add_output_args(p)
    return p


def main(argv: list[str] | None = None, prog: str = "autotune report") -> int:
    return run_cli(build_parser(prog), with_output(_run), argv, "; nothing written")


def _run(args: argparse.Namespace) -> int:
    from ..report import collect, model_curve, render_page
    from .db import _write_whole

    out = Path(args.output)
    if out.is_dir() or not (out.parent if str(out.parent) else Path(".")).is_dir():
        _write_whole(args.output, lambda tmp: None)  # the one-line refusal, nothing written
    model = None
    if args.model is not None:
        from .model import load

        model = load(args.model, args.input_shape, args.precision)
    db = open_db(args.db, create=False)
    try:
        report = collect(db)
        if model is not None:
            from .model import chosen_form

            for t in report.provenance:
                target = Target(t["kind"], t["fingerprint"], t["key"])
                report.models.append(model_curve(db, chosen_form(model, target, db, args), target))
            if not report.provenance:
                raise UsageError(f"{args.db} holds no measurements; tune the model into it first")
    finally:
        db.close()
    _write_whole(args.output, lambda tmp: tmp.write_text(render_page(report), encoding="utf-8"))
    print(f"wrote {args.output}: {len(report.tasks)} task(s), {len(report.provenance)} target(s)"
          + (f", model {report.models[0].name}" if report.models else "") + f" (from {args.db})")
    return 0
