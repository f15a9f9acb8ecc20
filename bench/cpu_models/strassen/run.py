"""Does Strassen's algorithm make a tuned model faster? The model compiled twice from one tuning
database, its products by constant matrices with one level fewer (``--strassen off``: direct) and
in the form the records choose with up to LEVELS levels (``--strassen on``, the CPU default, for
LEVELS 1; ``--strassen 2`` for 2), both checked against onnxruntime and timed with it in
interleaved rounds in one process; then both profiled call by call.

    python bench/cpu_models/strassen/run.py MODEL DB OUT.json [ROUNDS] [LEVELS]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interleaved import ab_run, estimated_ms, save  # noqa: E402

from autotune.cli.model import build_module, load  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def by_task(module, arrays: list, outs: list, runs: int = 10) -> dict[str, float]:  # noqa: ANN001
    """Milliseconds per model run spent in each task's calls (median over ``runs`` profiled runs)."""
    calls = module.prepared.calls
    per_call = np.median(module.executable.profile(arrays, outs, runs, len(calls)), axis=0)
    out: dict[str, float] = defaultdict(float)
    for c, t in zip(calls, per_call):
        out[module.prepared.tasks[c.task].label] += float(t) * 1e3
    return {k: round(v, 4) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    levels = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    base, form = ("direct", "strassen") if levels == 1 else ("strassen", f"strassen{levels}")
    target, model = cpu_target(), load(spec, [])
    with TuningDatabase(db_path, readonly=True) as db:
        modules = {base: build_module(model, target, db, "NHWC", strassen=levels - 1),
                   form: build_module(model, target, db, "NHWC", strassen=levels)}
    counts = {f"products_as_{form}": sum(f == form for f in modules[form].summary.forms.values())}
    result, done = ab_run(model, modules, base, form, rounds, model=spec, db=db_path, rounds=rounds,
                          levels=levels, forms={k: m.summary.forms for k, m in modules.items()}, **counts,
                          estimated_ms=estimated_ms(modules))
    result["profile_ms_by_task"] = {k: by_task(m, done["arrays"], done["outs"]) for k, m in modules.items()}
    save(result, out_path, ("rounds_ms", "profile_ms_by_task", "forms"))


if __name__ == "__main__":
    main()
