"""Does a compiled module run faster with its weights and arena on huge pages? One compiled library,
loaded twice: its weights and arena in 4 KiB pages and in one huge-page buffer
(``autotune.aligned.huge_page_buffer``), timed in interleaved rounds with onnxruntime in the same
process, and profiled call by call.

    python bench/cpu_models/huge_pages/run.py MODEL DB OUT.json [ROUNDS]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interleaved import check_and_time  # noqa: E402

from autotune.cli.model import build_module, load  # noqa: E402
from autotune.graph.runtime import CpuExecutable  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    model = load(spec, [])
    module = build_module(model, cpu_target(), TuningDatabase(db_path), "NHWC")
    ex = module.executable
    variants = {
        "4k_pages": CpuExecutable(ex.lib_path, ex.entry_name, ex.graph, ex.plan, huge_pages=False),
        "huge_pages": CpuExecutable(ex.lib_path, ex.entry_name, ex.graph, ex.plan, huge_pages=True),
    }
    done = check_and_time(model, module.graph, variants, rounds)
    times, arrays, outs = done["times"], done["arrays"], done["outs"]
    profile = {name: np.median(v.profile(arrays, outs, 20, len(module.prepared.calls)), axis=0)
               for name, v in variants.items()}
    labels = [module.prepared.tasks[c.task].label for c in module.prepared.calls]
    med = {k: float(np.median(v)) for k, v in times.items()}
    result = {
        "model": spec, "db": db_path, "rounds": rounds,
        "huge_pages_backed": variants["huge_pages"].huge_pages,
        "median_ms": {k: round(v * 1e3, 4) for k, v in med.items()},
        "min_ms": {k: round(min(v) * 1e3, 4) for k, v in times.items()},
        "huge_over_4k": round(med["4k_pages"] / med["huge_pages"], 4),
        "onnxruntime_over_4k": round(med["onnxruntime"] / med["4k_pages"], 4),
        "onnxruntime_over_huge": round(med["onnxruntime"] / med["huge_pages"], 4),
        "rounds_ms": {k: [round(x * 1e3, 4) for x in v] for k, v in times.items()},
        "calls": [{"call": i, "subgraph": lab, "4k_ms": round(float(profile["4k_pages"][i]) * 1e3, 4),
                   "huge_ms": round(float(profile["huge_pages"][i]) * 1e3, 4)}
                  for i, lab in enumerate(labels)],
    }
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("median_ms", "min_ms", "huge_over_4k",
                                              "onnxruntime_over_4k", "onnxruntime_over_huge")}))
    diffs = sorted(result["calls"], key=lambda c: c["huge_ms"] - c["4k_ms"])
    for c in diffs[:8]:
        print(f"  call {c['call']:3d} {c['4k_ms']:.3f} -> {c['huge_ms']:.3f} ms  {c['subgraph']}")


if __name__ == "__main__":
    main()
