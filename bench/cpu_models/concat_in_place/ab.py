"""Concatenations in place against copy kernels, in one process: the same model and database
compiled both ways (the CPU backend's ``concat_in_place`` off, then on), both checked against
onnxruntime on the same random inputs, then the two modules and onnxruntime timed in interleaved
rounds with a quiet gap before each block (as bench.py --model does).

    python bench/cpu_models/concat_in_place/ab.py MODEL.onnx DB [ROUNDS]

Prints one JSON line: median ms of each side and the ratios."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.backends.cpu import CpuBackend  # noqa: E402
from autotune.graph.compiler import compile_model  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402

QUIET_GAP_S = 0.2
MIN_REPEAT_MS = 300.0


def main() -> None:
    model, db_path = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    db = TuningDatabase(db_path)
    modules = {}
    for name, flag in (("copy", False), ("in_place", True)):
        CpuBackend.concat_in_place = flag
        modules[name] = compile_model(model, cpu_target(), db, verbose=False)
    feeds = modules["in_place"].random_inputs(np.random.default_rng(0))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = session.run(None, feeds)
    errors = {k: max(float(np.max(np.abs(o.astype(np.float64) - r))) for o, r in zip(m.run(feeds), ref))
              for k, m in modules.items()}
    times: dict[str, list[float]] = {"copy": [], "in_place": [], "onnxruntime": []}
    for _ in range(rounds):
        for k, m in modules.items():
            time.sleep(QUIET_GAP_S)
            times[k] += m.time(feeds, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
        time.sleep(QUIET_GAP_S)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < MIN_REPEAT_MS * 1e-3:
            session.run(None, feeds)
            n += 1
        times["onnxruntime"].append((time.perf_counter() - t0) / n)
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(json.dumps({
        "model": model, "kernel_calls": {k: len(m.prepared.calls) for k, m in modules.items()},
        "max_abs_err_vs_onnxruntime": errors, "median_ms": ms,
        "in_place_vs_copy": ms["copy"] / ms["in_place"],
        "speedup_vs_onnxruntime": {k: ms["onnxruntime"] / ms[k] for k in ("copy", "in_place")},
    }))


if __name__ == "__main__":
    main()
