"""The model gallery: real architectures (torchvision classifiers, Hugging Face encoders/decoders;
random weights, batch 1) exported by both PyTorch exporters, imported by the compiler, checked
against onnxruntime and timed against it in the same run.

    pip install -e ".[models,test]"
    python -m bench.gallery --no-timing                     # import + correctness of every model
    python -m bench.gallery resnet18 bert --db tuning.db --json out.json

Exports are cached (``bench/gallery/exports/``, reused across runs); each export and each row runs
in a child process under a time limit, so one model's crash or hang is recorded in its row and the
run goes on. Prints one table row per (model, exporter); ``--json FILE`` writes the table as JSON
(after every row, so an interrupted run keeps what it measured; ``--resume`` skips rows already in it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from .export import DEFAULT_CACHE, EXPORTERS, ensure_export, one_line
from .models import MODELS, ModelSpec
from .table import Row, format_table, read_json, write_json

ROOT = Path(__file__).resolve().parents[2]


def select(names: Sequence[str], families: Sequence[str], max_rank: int | None) -> list[ModelSpec]:
    """The models named (all when none), narrowed by family and rank; cheap ones first. Raises
    ValueError naming every unknown model or family."""
    unknown = [n for n in names if n not in MODELS]
    fams = {s.family.lower() for s in MODELS.values()}
    unknown += [f"family {f!r}" for f in families if f.lower() not in fams]
    if unknown:
        raise ValueError(f"unknown {', '.join(unknown)}; models: {', '.join(MODELS)}")
    out = [MODELS[n] for n in names] if names else list(MODELS.values())
    if families:
        out = [s for s in out if s.family.lower() in {f.lower() for f in families}]
    if max_rank is not None:
        out = [s for s in out if s.rank <= max_rank]
    return sorted(dict.fromkeys(out), key=lambda s: (s.rank, s.name))


def run_row(spec: ModelSpec, exporter: str, args: argparse.Namespace) -> Row:
    """The row, computed in a child process (``evaluate.py``) under ``--row-timeout``."""
    cmd = [sys.executable, "-m", "bench.gallery.evaluate", spec.name, exporter, "--cache", str(args.cache),
           "--repeat", str(args.repeat), "--min-repeat-ms", str(args.min_repeat_ms)]
    if args.db:
        cmd += ["--db", args.db]
    if args.no_timing:
        cmd.append("--no-timing")
    if args.warm_cache:
        cmd.append("--warm-cache")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.row_timeout)
    except subprocess.TimeoutExpired:
        return Row(spec.name, exporter, spec.family, error=f"timeout: no result within {args.row_timeout} s")
    lines = proc.stdout.strip().splitlines()
    try:
        return Row.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError, TypeError):
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return Row(spec.name, exporter, spec.family, error=f"crash: exit status {proc.returncode}: {tail}")


def _meta(args: argparse.Namespace) -> dict:
    import onnx
    import onnxruntime

    versions = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                "python": platform.python_version()}
    for mod in ("torch", "torchvision", "transformers"):
        try:
            versions[mod] = __import__(mod).__version__ if mod in sys.modules else _dist_version(mod)
        except Exception:  # noqa: BLE001 - not installed
            versions[mod] = None
    return {"machine": platform.processor() or platform.machine(), "versions": versions,
            "revision": _revision(), "db": args.db, "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "timing": not args.no_timing, "repeat": args.repeat,
            "compile": "warm build cache" if args.warm_cache else "fresh build cache per row"}


def _revision() -> str | None:
    """The compiler's git commit, with "+changes" where the working tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+changes" if dirty else "")) or None


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gallery", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="models to run (default: all; see --list)")
    p.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    p.add_argument("--max-rank", type=int, default=None, help="only models of rank <= N (the cheap ones)")
    p.add_argument("--exporter", action="append", choices=EXPORTERS, help="repeatable; default both")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the cached exports")
    p.add_argument("--reexport", action="store_true", help="export again even if cached")
    p.add_argument("--opset", type=int, default=None, help="opset for both exporters (default: theirs)")
    p.add_argument("--export-only", action="store_true", help="only make the exports")
    p.add_argument("--db", default=None, help="tuning database: also compile, check and time a tuned module")
    p.add_argument("--no-timing", action="store_true", help="import and correctness only")
    p.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--min-repeat-ms", type=float, default=200.0)
    p.add_argument("--warm-cache", action="store_true",
                   help="compile with the build cache as found (default: a fresh one per row, so the "
                        "compile time counts every gcc run)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the table as JSON")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --json FILE")
    p.add_argument("--export-timeout", type=float, default=1200.0, help="seconds per export")
    p.add_argument("--row-timeout", type=float, default=1800.0, help="seconds per row")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = select(args.models, args.family, args.max_rank)
        if args.repeat < 1 or args.min_repeat_ms < 0:
            raise ValueError("--repeat must be >= 1 and --min-repeat-ms >= 0")
        if args.resume and not args.json:
            raise ValueError("--resume needs --json FILE")
        if args.db and not Path(args.db).is_file():
            raise ValueError(f"--db {args.db!r} does not exist")
        done = read_json(args.json) if args.resume and Path(args.json).is_file() else []
    except (ValueError, OSError) as err:
        print(f"error: {one_line(err) if isinstance(err, OSError) else err}", file=sys.stderr)
        return 2
    if args.list:
        for s in specs:
            print(f"{s.rank:3d}  {s.name:22s} {s.family:16s} {s.note}")
        return 0
    exporters = args.exporter or list(EXPORTERS)
    rows: list[Row] = list(done)
    have = {(r.model, r.exporter) for r in done}
    meta = _meta(args)
    for spec in specs:
        for ex in exporters:
            if (spec.name, ex) in have:
                continue
            t0 = time.perf_counter()
            m = ensure_export(spec, ex, args.cache, args.export_timeout, args.reexport, args.opset)
            if args.export_only:
                print(f"{spec.name} · {ex}: {'exported' if m.get('ok') else m.get('error')}", flush=True)
                continue
            row = run_row(spec, ex, args)
            rows.append(row)
            print(f"[{time.perf_counter() - t0:6.1f} s] {row.model} · {row.exporter}: {row.status}"
                  + (f" ({row.error[:200]})" if row.error else ""), file=sys.stderr, flush=True)
            if args.json:  # the machine's load: timings taken on a busy machine are to be read as such
                meta["load_average_at_last_row"] = [round(x, 2) for x in os.getloadavg()]
                write_json(args.json, rows, meta)
    if not args.export_only:
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
