"""Winograd output transforms whose outputs end in a partial tile (7x7 in 2x2 or 4x4 tiles, 14x14
in 4x4): each such task's default schedule with its coefficient loops unrolled, lowered with the
guard of the partial tiles tested once around the channel vectors (the vectorizer's rule now)
and inside a scalar loop per channel (the rule before), and not unrolled; every variant checked
against float64 numpy, then timed in interleaved rounds in one process.

    python bench/cpu_models/winograd/edge_tiles/run.py MODEL OUT.json [ROUNDS]
"""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import numpy as np  # noqa: E402

import autotune.ir.passes as ir_passes  # noqa: E402
from autotune.graph.compiler import prepare  # noqa: E402
from autotune.graph.winograd import TILE_SIZES  # noqa: E402
from autotune.measure import Builder, BuildOptions, CpuRunner, RunOptions  # noqa: E402
from autotune.program import build_program  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from schedules import make_space  # noqa: E402

VARIANTS = ("unrolled, guard around the vectors", "unrolled, guard per element", "not unrolled")


def _program(task, target, unroll: int, hoist: bool):  # noqa: ANN001, ANN202
    space = make_space(task.workload, target)
    steps = space.steps({**space.default_config(), "unroll_coefficients": unroll})
    keep = ir_passes._invariant
    if not hoist:
        ir_passes._invariant = lambda cond, var: False
    try:
        return build_program(task.workload, steps, target)
    finally:
        ir_passes._invariant = keep


def main() -> None:
    model, out_path = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    target, rng = cpu_target(), np.random.default_rng(0)
    tasks = {}
    for m in TILE_SIZES:
        for t in prepare(model, "NHWC", forms=f"winograd{m}").tasks:
            if not t.label.startswith("winograd_out"):
                continue
            _, h, w, _ = t.workload.outputs[0].shape
            if h % m or w % m:
                tiles = "x".join(map(str, t.workload.args[0].shape))  # the products: a x a x tiles x k
                tasks[f"F{m} {t.label} from {tiles}"] = t
    timing = RunOptions(repeat=5, min_repeat_ms=20.0)
    check = RunOptions(number=1, repeat=1, min_repeat_ms=0.0)
    result = {"model": model, "rounds": rounds, "variants": VARIANTS, "tasks": {}}
    with Builder(BuildOptions(), workers=1) as builder, CpuRunner() as runner:
        for name, task in tasks.items():
            wl = task.workload
            progs = [_program(task, target, 1, True), _program(task, target, 1, False),
                     _program(task, target, 0, True)]
            libs = []
            for prog in progs:
                built = builder.build(prog.kernel_name, prog.source)
                assert built.ok, built.error_msg
                libs.append((built.lib_path, prog.kernel_name))
            inputs = wl.random_inputs(rng)
            runner.set_task(name, inputs, wl.run_reference(inputs), [(o.shape, o.dtype) for o in wl.outputs])
            for lib, kernel in libs:  # each variant checked against the float64 reference
                res = runner.run(lib, kernel, name, check)
                assert res.error_kind is None, f"{name}: {res.error_msg}"
            times: list[list[float]] = [[] for _ in libs]
            for _ in range(rounds):
                for i, (lib, kernel) in enumerate(libs):
                    times[i].append(min(runner.run(lib, kernel, name, timing).costs))
            runner.remove_task(name)
            ms = [statistics.median(t) * 1e3 for t in times]
            result["tasks"][name] = {
                "median_ms": dict(zip(VARIANTS, ms)),
                "omp_simd_loops": [p.source.count("#pragma omp simd") for p in progs],
            }
            print(f"{name:64} " + "  ".join(f"{v}: {x:.4f} ms" for v, x in zip(VARIANTS, ms)), flush=True)
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
