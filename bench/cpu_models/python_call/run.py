"""What a call of a compiled module costs in Python, right after a model run (the caches then hold
the run's data, not the interpreter's): ``CompiledModule.run`` against ``run_into`` (arrays checked
by the caller, outputs given) against the bare entry point, one call of each in turn; then each
step of ``run`` timed alone right after a run.

    python bench/cpu_models/python_call/run.py MODEL DB OUT.json [CALLS]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.cli.model import build_module, load  # noqa: E402
from autotune.graph.runtime import check_inputs  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    module = build_module(load(spec, []), cpu_target(), TuningDatabase(db_path), "NHWC")
    feeds = module.random_inputs(np.random.default_rng(0))
    arrays = check_inputs(module.graph, feeds)
    outs = module._outputs()
    ex = module.executable
    args = ex._args(arrays, outs)
    whole = {
        "run": lambda: module.run(feeds),
        "run_into": lambda: module.run_into(arrays, outs),
        "entry": lambda: ex.entry(args),
    }
    steps = {
        "inputs": lambda: module._inputs(feeds),
        "outputs": module._outputs,
        "nothing (the timer alone)": lambda: None,
    }
    seconds: dict[str, list[float]] = {k: [] for k in [*whole, *steps]}
    for _ in range(calls):
        for name, f in whole.items():
            t0 = time.perf_counter()
            f()
            seconds[name].append(time.perf_counter() - t0)
        for name, f in steps.items():
            ex.entry(args)  # a model run just before: the interpreter's data is cold
            t0 = time.perf_counter()
            f()
            seconds[name].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in seconds.items()}
    result = {
        "model": spec, "db": db_path, "calls": calls,
        "median_ms": {k: round(med[k] * 1e3, 4) for k in whole},
        "run_minus_entry_us": round((med["run"] - med["entry"]) * 1e6, 1),
        "after_a_run_us": {k: round(med[k] * 1e6, 1) for k in steps},
    }
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
