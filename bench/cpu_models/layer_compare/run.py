"""Layer by layer against onnxruntime: our module's per-call profile (each kernel call timed inside
whole model runs) beside onnxruntime's per-node profile (``enable_profiling``, 2 threads), paired
in execution order (its views and its NCHWc layout changes left out). For models whose nodes and
our calls pair one to one (the convolution networks: one call per convolution and its epilogue);
check the labels of a pair before reading its times.

    python bench/cpu_models/layer_compare/run.py MODEL DB OUT.json
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.cli.model import build_module, load  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402

RUNS = 80
WARM = 20  # onnxruntime runs left out of its medians
SKIPPED = ("Reshape", "Flatten", "ReorderInput", "ReorderOutput")  # views and its NCHWc layout changes


def onnxruntime_nodes(model_path: str, feeds: dict) -> list[dict]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.intra_op_num_threads = 2
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = os.path.join(tmp, "p")
        sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
        for _ in range(RUNS):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    order: list[tuple] = []
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"].removesuffix("_kernel_time")
            if node not in seconds:
                order.append((node, e["args"].get("op_name"), e["args"].get("output_type_shape")))
            seconds[node].append(e["dur"] * 1e-6)
    return [{"node": n, "op": op, "output": shape, "ms": float(np.median(seconds[n][WARM:])) * 1e3}
            for n, op, shape in order if op not in SKIPPED]


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    module = build_module(load(spec, []), cpu_target(), TuningDatabase(db_path), "NHWC")
    feeds = module.random_inputs(np.random.default_rng(0))
    ours = [{"subgraph": r["label"], "ms": r["seconds"] * 1e3} for r in module.profile(feeds, 30)]
    theirs = onnxruntime_nodes(spec, feeds)
    rows = [{"ours": a, "onnxruntime": b} for a, b in zip(ours, theirs)]
    slower = [r for r in rows if r["ours"]["ms"] > 1.05 * r["onnxruntime"]["ms"]]
    result = {"model": spec, "db": db_path, "ours_ms": sum(o["ms"] for o in ours),
              "onnxruntime_ms": sum(t["ms"] for t in theirs), "calls": len(ours), "nodes": len(theirs),
              "pairs": rows}
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(f"ours {result['ours_ms']:.3f} ms in {len(ours)} calls, "
          f"onnxruntime {result['onnxruntime_ms']:.3f} ms in {len(theirs)} nodes (their profiles' sums)")
    for r in slower:
        print(f"  ours {r['ours']['ms']:.3f} ms {r['ours']['subgraph']}  |  onnxruntime "
              f"{r['onnxruntime']['ms']:.3f} ms {r['onnxruntime']['op']} {r['onnxruntime']['node']}")


if __name__ == "__main__":
    main()
