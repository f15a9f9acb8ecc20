"""Strassen's input transform as its own kernel or as the product's prologue (formed tile by tile
in the GEMM's kernel)? The model compiled twice from one tuning database: as compile builds it,
and with the transform kept apart (the fusion rule that takes it into the product and the
operator's kind as they were before it: its own kernel, nothing chained into it), both checked
against onnxruntime and timed with it in interleaved rounds in one process; then profiled.

    python bench/cpu_models/strassen/prologue.py MODEL DB OUT.json [ROUNDS]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interleaved import ab_run, estimated_ms, save  # noqa: E402
from run import by_task  # noqa: E402

import autotune.graph.fusion as fusion  # noqa: E402
from autotune.cli.model import build_module, load  # noqa: E402
from autotune.graph.ops import OPS, REDUCE  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    target, model = cpu_target(), load(spec, [])
    modules = {}
    with TuningDatabase(db_path, readonly=True) as db:
        kept, op = fusion.TILE_PROLOGUES, OPS["StrassenInput"]
        fusion.TILE_PROLOGUES, OPS["StrassenInput"] = set(), dataclasses.replace(op, kind=REDUCE)
        try:
            modules["apart"] = build_module(model, target, db, "NHWC")
        finally:
            fusion.TILE_PROLOGUES, OPS["StrassenInput"] = kept, op
        modules["prologue"] = build_module(model, target, db, "NHWC")
    result, done = ab_run(model, modules, "apart", "prologue", rounds, model=spec, db=db_path, rounds=rounds,
                          summaries={k: m.summary.line() for k, m in modules.items()},
                          estimated_ms=estimated_ms(modules))
    result["profile_ms_by_task"] = {k: by_task(m, done["arrays"], done["outs"]) for k, m in modules.items()}
    save(result, out_path, ("rounds_ms", "summaries", "profile_ms_by_task"))


if __name__ == "__main__":
    main()
