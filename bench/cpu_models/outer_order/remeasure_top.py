"""Re-measure the best recorded configs of one graph task side by side, now.

    python bench/cpu_models/outer_order/remeasure_top.py gelu DB

takes the 6 fastest error-free records of the zoo BERT layer's task whose label contains the first
argument, builds each from its recorded steps, and times them in 5 interleaved rounds (each round:
every config, 7 calls each after a 256 MiB write that evicts the caches; ms, medians).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from ab_outer_order import load_kernel  # noqa: E402

from autotune.graph.compiler import prepare, render  # noqa: E402
from autotune.graph.zoo import make_model  # noqa: E402
from autotune.schedule import step_from_dict  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    target = cpu_target()
    task = next(x for x in prepare(make_model("bert_layer")).tasks if sys.argv[1] in x.label)
    wl = task.workload
    db = TuningDatabase(sys.argv[2], create=False)
    recs = sorted((r for r in db.measurements(wl.key, target.key) if r.error_kind is None),
                  key=lambda r: r.mean_s)[:6]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in wl.args]
    calls = []
    for i, rec in enumerate(recs):
        prog = render(wl, [step_from_dict(d) for d in rec.steps], target)
        calls.append(load_kernel(prog, arrays, f"remeasure_top_{i}"))
    evict = np.ones(64 << 20, np.float32)
    rounds: list[list[float]] = [[] for _ in recs]
    for _ in range(5):
        for i, (fn, ptrs, _) in enumerate(calls):
            times = []
            for _ in range(7):
                np.add(evict, 1.0, out=evict)
                t0 = time.perf_counter()
                fn(ptrs)
                times.append(time.perf_counter() - t0)
            rounds[i].append(float(np.median(times)) * 1e3)
    print(task.label)
    for i, rec in enumerate(recs):
        each = " ".join(f"{x:.2f}" for x in rounds[i])
        print(f"rank {i}: recorded {rec.mean_s * 1e3:.3f} ms, re-measured cold {np.median(rounds[i]):.3f} ms "
              f"(rounds {each}) outer_order={rec.config.get('outer_order')}")


if __name__ == "__main__":
    main()
