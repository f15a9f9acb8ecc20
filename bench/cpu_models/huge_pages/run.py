"""Does a compiled module run faster with its weights and arena on huge pages? One compiled library,
loaded twice: its weights and arena in 4 KiB pages and in one huge-page buffer
(``autotune.aligned.huge_page_buffer``), timed in interleaved rounds with onnxruntime in the same
process, and profiled call by call.

    python bench/cpu_models/huge_pages/run.py MODEL DB OUT.json [ROUNDS]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.aligned import aligned_empty  # noqa: E402
from autotune.cli.model import QUIET_GAP_S, build_module, load, onnxruntime_session  # noqa: E402
from autotune.graph.runtime import CpuExecutable, check_inputs  # noqa: E402
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
    g = module.graph
    feeds = module.random_inputs(np.random.default_rng(0))
    arrays = check_inputs(g, feeds)
    outs = [aligned_empty(g.types[o].shape, g.types[o].dtype) for o in g.outputs]
    sess = onnxruntime_session(model)
    ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
    expect = sess.run(None, ort_feeds)
    for name, v in variants.items():
        v.run(arrays, outs)
        err = max(float(np.max(np.abs(o - e))) for o, e in zip(outs, expect))
        scale = max(float(np.max(np.abs(e))) for e in expect)
        assert err <= 1e-4 * max(1.0, scale), f"{name}: max abs err {err}"
    times: dict[str, list[float]] = {k: [] for k in [*variants, "onnxruntime"]}
    for r in range(rounds):
        # a quiet gap before each side (onnxruntime's pool threads spin on after a run), and the two
        # variants in alternating order
        for name in list(variants)[:: 1 if r % 2 == 0 else -1]:
            time.sleep(QUIET_GAP_S)
            times[name].append(float(np.median(variants[name].time(arrays, outs, 9, 0.0))))
        time.sleep(QUIET_GAP_S)
        t = []
        for _ in range(9):
            t0 = time.perf_counter()
            sess.run(None, ort_feeds)
            t.append(time.perf_counter() - t0)
        times["onnxruntime"].append(float(np.median(t)))
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
