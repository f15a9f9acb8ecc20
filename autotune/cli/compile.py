"""``compile.py``: compile an ONNX model with the best-known schedules of a records DB into one
shared library, report tuned vs default-schedule subgraphs and the memory plan, optionally check the
module against onnxruntime."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .common import (
    TARGETS,
    ArgParser,
    UsageError,
    add_db_arg,
    add_exact_target_arg,
    int_in,
    open_records,
    resolve_target,
    run_cli,
)
from .output import add_output_args, emit_json, with_output


def build_parser(prog: str = "compile.py") -> argparse.ArgumentParser:
    from .model import add_model_args, add_rerank_arg

    p = ArgParser(
        prog=prog,
        description="Compile a model: import, graph passes, fusion, one kernel per fused subgraph from the "
        "best schedule in the DB (a loud default where there is none), one arena, one shared library with "
        "one entry point. Exit status 2 on bad input, 1 if --check finds wrong outputs.",
    )
    add_model_args(p, required=True)
    add_rerank_arg(p)
    p.add_argument("--target", default="cpu", help=f"where it runs: {', '.join(TARGETS)} (default cpu)")
    add_db_arg(p)
    add_exact_target_arg(p)
    p.add_argument("-o", "--output", help="copy the built shared library here")
    p.add_argument("--check", action="store_true",
                   help="run once on random inputs, compare with onnxruntime (or, where it is not "
                   "installed, the numpy reference interpreter)")
    p.add_argument("--show-entry", action="store_true",
                   help="print the generated C entry point (CUDA: the host launch sequence)")
    p.add_argument("--profile", type=int_in(0), metavar="RUNS", default=0,
                   help="CPU: time every kernel call inside RUNS whole model runs and print a table "
                   "(median per call, the task's tuning measurement beside it)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary object on stdout (every other line goes to stderr)")
    add_output_args(p)
    return p


def main(argv: list[str] | None = None, prog: str = "compile.py") -> int:
    return run_cli(build_parser(prog), with_output(_run), argv, "; nothing written")


def check_output(path: str) -> None:
    """Refuse an -o that cannot take the library, before anything is built."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"-o {path} is a directory; name the library file to write")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"-o {path}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UsageError(f"-o {path}: not writable")


def copy_atomically(src: str, dest: str) -> None:
    """Copy ``src`` to ``dest`` through a temporary file beside it: ``dest`` is whole or untouched."""
    fd, tmp = tempfile.mkstemp(dir=Path(dest).parent, prefix=f".{Path(dest).name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run(args: argparse.Namespace) -> int:
    from ..graph.precision import output_tolerance
    from .model import build_module, compare, load, reference_outputs

    if args.output:
        check_output(args.output)
    model = load(args.model, args.input_shape, args.precision, args.target)
    target = resolve_target(args.target)
    if args.profile and not target.backend.profiles_modules:
        raise UsageError("--profile times kernel calls of a CPU module; "
                         f"use bench.py for --target {target.kind}")
    db, target, nearest = open_records(args.db, target, args.exact_target)
    try:
        module = build_module(model, target, db, args.layout, args.rerank, args.winograd,
                              args.strassen)
    finally:
        db.close()
    print(module.prepared.describe(), flush=True)
    print(module.summary.line() + nearest, flush=True)
    print(f"memory: {module.plan.describe()}", flush=True)
    lib = module.lib_path
    if args.output:
        copy_atomically(lib, args.output)
        lib = args.output
    entry = module.entry_name
    how = target.backend.entry_note(entry)
    print(f"library: {lib} ({how})", flush=True)
    if args.show_entry:
        print(module.entry_source, flush=True)
    out = module.summary.to_json()
    out.update(library=lib, target=target.key, db=args.db, nearest_target=nearest[2:] or None)
    status = 0
    if args.check:
        feeds = module.random_inputs(np.random.default_rng(0))
        ref, ref_name = reference_outputs(model, feeds)
        err, rel = compare(module.run(feeds), ref)
        ok = rel <= output_tolerance(model.graph.precision)
        print(f"check vs {ref_name}: max abs err {err:.2e} (relative {rel:.1e}) {'ok' if ok else 'WRONG'}")
        out.update(max_abs_err=err, max_rel_err=rel, ok=ok, reference=ref_name)
        status = 0 if ok else 1
    if args.profile:
        rows = module.profile(repeat=args.profile)
        print(format_profile(rows), flush=True)
        out["profile"] = rows
    if args.json:
        emit_json(out)
    return status


def format_profile(rows: list[dict]) -> str:
    """A table of per-call times: the slowest calls first, totals at the end."""
    total = sum(r["seconds"] for r in rows) or 1.0
    lines = [f"{'call':>4} {'ms':>8} {'share':>6} {'tuned ms':>9}  subgraph"]
    for r in sorted(rows, key=lambda r: -r["seconds"]):
        tuned = f"{r['tuned_s'] * 1e3:9.3f}" if r["tuned_s"] else f"{'-':>9}"
        ms, share = r["seconds"] * 1e3, r["seconds"] / total
        lines.append(f"{r['call']:>4} {ms:8.3f} {share:6.1%} {tuned}  {r['label']}")
    tuned_sum = sum(r["tuned_s"] or 0.0 for r in rows)
    lines.append(f"sum of calls {total * 1e3:.3f} ms; "
                 f"sum of their tuning measurements {tuned_sum * 1e3:.3f} ms")
    return "\n".join(lines)
