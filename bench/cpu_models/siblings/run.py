"""Does merging the products of one activation (attention's Q, K and V projections) make a tuned
model faster? The model compiled twice from one tuning database, once with the pass
``merge_sibling_products`` and once with it replaced by the identity (the products separate),
both checked against onnxruntime and timed with it in interleaved rounds in one process.

    python bench/cpu_models/siblings/run.py MODEL DB OUT.json [ROUNDS] [STRASSEN_LEVELS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interleaved import ab_run, save  # noqa: E402

import autotune.graph.passes as passes  # noqa: E402
from autotune.cli.model import build_module, load  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    levels = int(sys.argv[5]) if len(sys.argv) > 5 else None
    target, model = cpu_target(), load(spec, [])
    merge = passes.merge_sibling_products
    modules = {}
    with TuningDatabase(db_path, readonly=True) as db:
        for name, fn in (("separate", lambda g: g), ("merged", merge)):
            passes.merge_sibling_products = fn  # optimize() looks the pass up when it runs
            try:
                modules[name] = build_module(model, target, db, "NHWC", strassen=levels)
            finally:
                passes.merge_sibling_products = merge
    result, _ = ab_run(model, modules, "separate", "merged", rounds, model=spec, db=db_path,
                       rounds=rounds, strassen_levels=levels,
                       summaries={k: m.summary.line() for k, m in modules.items()})
    save(result, out_path, ("rounds_ms", "summaries"))


if __name__ == "__main__":
    main()
