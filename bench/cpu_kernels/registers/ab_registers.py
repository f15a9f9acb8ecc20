"""The CPU ``registers`` knob off and on over random configs of one zoo-model task.

    python bench/cpu_kernels/registers/ab_registers.py MODEL LABEL N [SEED]

samples N configs of the first task whose label contains LABEL (unroll on, so the knob applies),
builds each with registers 0 and 1, checks both outputs agree, and times them alternately: min
over 3 rounds of the median of 7 calls. Prints per-config ms and off/on, then the geometric mean
of off/on and how many configs the knob sped up.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cpu_models" / "outer_order"))

import numpy as np  # noqa: E402
from ab_outer_order import load_kernel  # noqa: E402

from autotune.graph.compiler import prepare, render  # noqa: E402
from autotune.graph.zoo import make_model  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from schedules import make_space  # noqa: E402


def main() -> None:
    model, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = np.random.default_rng(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    target = cpu_target()
    task = next(t for t in prepare(make_model(model)).tasks if label in t.label)
    wl = task.workload
    space = make_space(wl, target)
    arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in wl.args]
    print(task.label, flush=True)
    ratios = []
    for i in range(n):
        config = space.sample(rng)
        config["unroll"], config["registers"] = 1, 1
        if not space.is_valid(config):
            continue
        calls = {}
        for promote in (False, True):
            prog = render(wl, space.steps(dict(config, registers=int(promote))), target)
            fn, ptrs, bufs = load_kernel(prog, arrays, f"ab_sample_{i}_{int(promote)}")
            fn(ptrs)
            # (bufs kept: the kernel's arguments)
            calls[promote] = (fn, ptrs, bufs[-1].copy(), " register" in str(prog.func), bufs)
        if not calls[True][3]:
            print(f"  config {i}: nothing promoted")
            continue
        same = np.allclose(calls[False][2], calls[True][2], rtol=1e-5, atol=1e-5)
        best = {False: math.inf, True: math.inf}
        for _ in range(3):
            for promote in (False, True):
                fn, ptrs = calls[promote][:2]
                times = []
                for _ in range(7):
                    t0 = time.perf_counter()
                    fn(ptrs)
                    times.append(time.perf_counter() - t0)
                best[promote] = min(best[promote], float(np.median(times)))
        ratios.append(best[False] / best[True])
        print(f"  config {i}: off {best[False] * 1e3:8.3f} on {best[True] * 1e3:8.3f} ms  off/on "
              f"{ratios[-1]:.2f}  same {same}", flush=True)
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"{len(ratios)} configs: geomean off/on {gm:.3f}; faster with promotion: "
          f"{sum(r > 1 for r in ratios)}")


if __name__ == "__main__":
    main()
