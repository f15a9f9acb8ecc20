"""Sample configs of every tensor-core sketch and of the pipelined float32 one (shared tiles in a
cp.async ring, ``stages`` 2 or 3), compile each with nvcc and check it in the CUDA emulation
against the float64 reference; print and write the fraction that compile and pass.

    python scripts/cuda_sample.py --samples 6 --arch sm_90 -o bench/tensorcore/sample.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.measure import Builder, BuildOptions, CpuRunner, RunOptions  # noqa: E402
from autotune.program import build_cuda_emulation, build_cuda_program  # noqa: E402
from autotune.search.measure_batch import reduction_length, tolerances  # noqa: E402
from autotune.target import offline_cuda_target  # noqa: E402
from autotune.te.gemm import gemm_workload  # noqa: E402
from schedules import make_space  # noqa: E402

# small products with ragged edges (the emulation runs a block at a time on the CPU); fp32 is the
# CUDA space's own sketch with its shared tiles pipelined
SKETCHES = [
    (kind, dims, precision)
    for precision in ("fp16", "bf16", "tf32", "fp32")
    for kind, dims in (("matmul", [96, 80, 112]), ("dense", [72, 96, 128]), ("batch_matmul", [2, 48, 64, 80]),
                       ("conv2d", [1, 16, 9, 9, 32, 3, 3, 1, 1]), ("conv2d", [2, 8, 12, 12, 24, 3, 3, 2, 1]))
]
MAX_THREADS_EMULATED = 256  # configs with bigger blocks are sampled again (the CPU team's size)


def sample(space, precision: str, rng: np.random.Generator) -> dict:  # noqa: ANN001 - a SearchSpace
    """A config of the sketch under test: any of the tensor-core space, a pipelined one of fp32's."""
    while True:
        cfg = space.sample(rng)
        if precision != "fp32":
            return cfg
        cfg["stages"] = int(rng.choice([2, 3]))
        if space.is_valid(cfg):
            return cfg


def nvcc_ok(source: str, arch: str, tmp: Path) -> str | None:
    cu = tmp / "k.cu"
    cu.write_text(source)
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", str(tmp / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    return None if r.returncode == 0 else r.stderr.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=6, help="configs per sketch")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    has_nvcc = shutil.which("nvcc") is not None
    target = offline_cuda_target(args.arch)
    rng = np.random.default_rng(args.seed)
    rows, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as tmpd, CpuRunner() as runner, \
            Builder(BuildOptions(cache_dir=Path(tmpd) / "c")) as builder:
        tmp = Path(tmpd)
        for kind, dims, precision in SKETCHES:
            wl = gemm_workload(kind, dims, precision)
            space = make_space(wl, target)
            inputs = wl.random_inputs(rng)
            ref = wl.run_reference(inputs)
            rtol, atol = tolerances(ref, wl.precision, reduction_length(wl))
            runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
            n = 0
            while n < args.samples:
                cfg = sample(space, precision, rng)
                steps = space.steps(cfg)
                source = build_cuda_program(wl, steps, target)
                if max(math.prod(p.block) for p in source.kernels) > MAX_THREADS_EMULATED:
                    continue
                n += 1
                row = {"kind": kind, "dims": dims, "precision": precision, "config": cfg}
                row["nvcc"] = nvcc_ok(source.source, args.arch, tmp) if has_nvcc else "nvcc not installed"
                prog = build_cuda_emulation(wl, steps, target)
                b = builder.build(prog.kernel_name, prog.source)
                if b.error_kind is not None:
                    row["emulation"] = f"build: {b.error_msg}"
                else:
                    r = runner.run(b.lib_path, prog.kernel_name, wl.key,
                                   RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=300))
                    row["emulation"] = None if r.error_kind is None else f"{r.error_kind}: {r.error_msg}"
                row["ok"] = row["nvcc"] is None and row["emulation"] is None
                rows.append(row)
                print(f"{kind:12s} {precision} {'ok ' if row['ok'] else 'BAD'} {cfg}"
                      + ("" if row["ok"] else f"  nvcc={row['nvcc']} emu={row['emulation']}"), flush=True)
    passed = sum(r["ok"] for r in rows)
    per = {}
    for r in rows:
        key = f"{r['kind']}/{r['precision']}"
        per.setdefault(key, [0, 0])
        per[key][0] += r["ok"]
        per[key][1] += 1
    summary = {"arch": args.arch, "seed": args.seed, "configs": len(rows), "passed": passed,
               "fraction": passed / max(len(rows), 1),
               "per_sketch": {k: f"{a}/{b}" for k, (a, b) in per.items()},
               "seconds": round(time.time() - t0, 1), "rows": rows}
    print(f"{passed}/{len(rows)} configs compile with nvcc -arch={args.arch} and pass the emulated check "
          f"({summary['fraction']:.1%})")
    if args.output:
        args.output.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
