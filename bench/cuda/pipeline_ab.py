"""The cp.async pipeline of the float32 CUDA kernels, A/B on the same tiles (needs a GPU).

For each workload: measure the rule defaults and ``--samples`` random configs of the CUDA space
with ``stages`` 1; take the ``--top`` fastest; measure each again with ``stages`` 1, 2 and 3
(where the ring fits in shared memory), interleaved, every run checked against float64. Prints
one JSON document: per workload the best time at each depth, the per-config ratios (stages 1 /
pipelined), and PyTorch (cuBLAS / cuDNN, TF32 off) timed in the same run.

    python bench/cuda/pipeline_ab.py --json out.json [--ops matmul:2048,2048,2048 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune import te  # noqa: E402
from autotune.cli.bench_cuda import time_torch, to_torch, torch_baseline, torch_precision  # noqa: E402
from autotune.cli.common import measure_tools, resolve_target  # noqa: E402
from autotune.measure.cuda_runner import CudaRunOptions  # noqa: E402
from autotune.search.measure_batch import WorkloadMeasurer  # noqa: E402
from schedules import make_space  # noqa: E402

DEFAULT_OPS = ("matmul:1024,1024,1024", "matmul:2048,2048,2048", "dense_bias_gelu:128,3072,768",
               "conv2d:1,64,56,56,64,3,3,1,1")
DEPTHS = (1, 2, 3)


def _mean(trial) -> float | None:  # noqa: ANN001 - a Trial
    return statistics.median(trial.costs) if trial.error_kind is None and trial.costs else None


def ab(op: str, shape: str, target, builder, runner, samples: int, top: int, rng) -> dict:  # noqa: ANN001
    wl = te.make_workload(op, shape)
    space = make_space(wl, target)
    meas = WorkloadMeasurer(wl, target, builder, runner, CudaRunOptions(repeat=5, min_repeat_ms=20))
    pool = [dict(c, stages=1) for c in space.default_configs()]
    while len(pool) < samples + len(space.default_configs()):
        c = dict(space.sample(rng), stages=1)
        if space.is_valid(c) and c not in pool:
            pool.append(c)
    first = list(meas.measure(pool, [space.steps(c) for c in pool]))
    errors = sum(t.error_kind is not None and t.error_kind != "invalid_schedule" for t in first)
    timed = sorted((m, t.config) for t in first if (m := _mean(t)) is not None)
    best = [c for _, c in timed[:top]]
    variants = [dict(c, stages=d) for c in best for d in DEPTHS if space.is_valid(dict(c, stages=d))]
    second = list(meas.measure(variants, [space.steps(c) for c in variants]))
    errors += sum(t.error_kind is not None for t in second)
    by_cfg: dict[str, dict[int, float]] = {}
    for t in second:
        m = _mean(t)
        if m is not None:
            key = json.dumps({k: v for k, v in t.config.items() if k != "stages"}, sort_keys=True)
            by_cfg.setdefault(key, {})[t.config["stages"]] = m
    ratios = [v[1] / min(v[d] for d in v if d > 1) for v in by_cfg.values() if 1 in v and len(v) > 1]
    best_at = {d: min((v[d] for v in by_cfg.values() if d in v), default=None) for d in DEPTHS}
    row = {
        "workload": f"{op} {shape}", "flops": wl.flops, "measured": len(first) + len(second),
        "errors": errors, "configs_compared": len(ratios),
        "best_s_by_stages": {str(d): best_at[d] for d in DEPTHS},
        "speedup_of_pipeline_per_config": sorted(round(r, 3) for r in ratios),
        "median_speedup": round(statistics.median(ratios), 3) if ratios else None,
        "pipelined_faster": sum(r > 1.0 for r in ratios),
    }
    import torch

    fn = torch_baseline(wl)
    if fn is not None:
        torch_precision(torch, wl)
        args = [to_torch(torch, a) for a in wl.random_inputs(rng)]
        row["torch_s"] = statistics.median(time_torch(fn, args, 10, 50))
        ours = min(v for v in best_at.values() if v is not None)
        row["torch_over_ours"] = round(row["torch_s"] / ours, 3)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", default=list(DEFAULT_OPS), help="op:shape items")
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    target = resolve_target("cuda")
    builder, runner = measure_tools(target)
    rng = np.random.default_rng(0)
    rows = []
    with builder, runner:
        for item in a.ops:
            op, shape = item.split(":")
            t0 = time.perf_counter()
            rows.append(ab(op, shape, target, builder, runner, a.samples, a.top, rng))
            rows[-1]["wall_s"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(rows[-1]), flush=True)
    doc = {"device": target.fingerprint.get("name"), "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
