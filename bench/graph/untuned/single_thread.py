"""Untuned models against onnxruntime with one thread each (ours: OMP_NUM_THREADS=1, set here before
any kernel library loads; onnxruntime: one intra-op and one inter-op thread), timed interleaved.

On a shared machine a two-thread run mostly measures how each runtime copes with other processes
on its cores; one thread a side gets a fair share of a core each and compares the kernels. Each
model is compiled with no tuning database (every task takes its rule-based default schedule).

    python bench/graph/untuned/single_thread.py zoo:resnet18 zoo:bert_layer >> single_thread.jsonl
    python bench/graph/untuned/single_thread.py bench/gallery/exports/mobilenet_v2.legacy.onnx
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ["OMP_NUM_THREADS"] = "1"
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import json  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from autotune.cli.model import compare  # noqa: E402
from autotune.graph import compile_model, zoo  # noqa: E402


def best_of(fn, runs: int = 5) -> float:  # noqa: ANN001
    """Seconds of the fastest of ``runs`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(spec: str, rounds: int = 7) -> dict:
    """``spec``: a zoo spec or an ONNX file."""
    module = compile_model(spec, verbose=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    proto = zoo.make_model(spec).SerializeToString() if spec.startswith("zoo:") else Path(spec).read_bytes()
    session = ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"])
    feeds = module.random_inputs(np.random.default_rng(0))
    _, rel = compare(module.run(feeds), session.run(None, feeds))
    load = os.getloadavg()[0]
    ours, theirs = [], []
    for _ in range(rounds):  # interleaved, so a change in machine load hits both sides
        ours.append(best_of(lambda: module.run(feeds)))
        theirs.append(best_of(lambda: session.run(None, feeds)))
    ours_s, ort_s = statistics.median(ours), statistics.median(theirs)
    return {"model": spec, "threads": 1, "db": None, "latency_s": ours_s, "baseline": "onnxruntime",
            "baseline_version": ort.__version__, "baseline_latency_s": ort_s, "speedup": ort_s / ours_s,
            "fallback_subgraphs": module.summary.calls - module.summary.tuned_calls,
            "max_rel_err": rel, "load_1min": load}


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["zoo:resnet18", "zoo:bert_layer"]:
        print(json.dumps(measure(spec)), flush=True)
