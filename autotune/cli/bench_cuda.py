"""bench.py on a CUDA target: best-known schedules against PyTorch (cuBLAS / cuDNN / eager), same run.

PyTorch is imported only here (it is on the GPU machine, not a dependency of the project); TF32 is
on only for TF32 products and off otherwise, so both sides compute in the same precision (16-bit
products run on torch tensors of that dtype), and each baseline is timed under both
``cudnn.benchmark`` settings, the faster counting (see ``graph.torch_eager.fastest_cudnn_mode``).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable

import numpy as np

from records import MeasurementRecord, TuningDatabase

from ..graph.torch_eager import fastest_cudnn_mode
from ..measure.cuda_runner import CudaRunOptions
from ..program import build_cuda_program
from ..schedule import step_from_dict
from ..search.measure_batch import reduction_length, tolerances
from ..search.tune import workload_label
from ..target import Target
from ..te import Workload, workload_from_description


def torch_baseline(wl: Workload) -> Callable[..., Any] | None:
    """The eager PyTorch composition of a workload, or None when there is none."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    p = wl.params
    table: dict[str, Callable[..., Any]] = {
        "matmul": lambda a, b: a @ b,
        "batch_matmul": torch.bmm,
        "dense": lambda x, w: F.linear(x, w),
        "dense_bias": lambda x, w, b: F.linear(x, w, b),
        "dense_bias_relu": lambda x, w, b: torch.relu(F.linear(x, w, b)),
        "dense_bias_gelu": lambda x, w, b: F.gelu(F.linear(x, w, b)),
        "conv2d": lambda x, w: F.conv2d(
            x,
            w,
            stride=p.get("stride", 1),
            padding=p.get("pad", 0),
            dilation=p.get("dilation", 1),
            groups=p.get("groups", 1),
        ),
        # NHWC data / HWIO weights as channels-last views: cuDNN runs them in NHWC, no copies
        "conv2d_nhwc": lambda x, w: F.conv2d(
            x.permute(0, 3, 1, 2),
            w.permute(3, 2, 0, 1),
            stride=p.get("stride", 1),
            padding=p.get("pad", 0),
            dilation=p.get("dilation", 1),
            groups=p.get("groups", 1),
        ).permute(0, 2, 3, 1),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layernorm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5),
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "relu": torch.relu,
        "gelu": F.gelu,
        "add_relu_mul": lambda a, b, c: torch.relu(a + b) * c,
        "bias_add_relu": lambda x, b: torch.relu(x + b),
    }
    if wl.name == "gemm":
        if p["kind"] == "conv2d":  # dims n, c, h, w, f, kh, kw, stride, pad
            stride, pad = p["dims"][7], p["dims"][8]
            return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad)
        return table[p["kind"]]
    return table.get(wl.name)


def torch_precision(torch: Any, wl: Workload) -> None:
    """cuBLAS/cuDNN in the workload's precision: TF32 on only for a ``tf32`` product."""
    tf32 = wl.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def to_torch(torch: Any, a: np.ndarray) -> Any:
    """A numpy input on the GPU as a torch tensor of the same dtype (bfloat16 through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(a).cuda()


def time_torch(fn: Callable[..., Any], args: list, repeat: int, min_repeat_ms: float) -> list[float]:
    """Seconds per call with CUDA events: warm-up, then ``repeat`` timed groups of calls."""
    import torch

    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    number, costs = 1, []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while len(costs) < repeat:
        start.record()
        for _ in range(number):
            fn(*args)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        if ms < min_repeat_ms:
            number = max(number * 2, int(number * min_repeat_ms / max(ms, 1e-3) * 1.1))
            continue
        costs.append(ms / 1e3 / number)
    return costs


def bench_cuda_record(
    rec: MeasurementRecord,
    target: Target,
    db: TuningDatabase,
    builder: Any,
    runner: Any,
    args: argparse.Namespace,
) -> dict:
    """One JSON row: ours vs PyTorch eager on the same fresh inputs."""
    import torch

    info = db.workload(rec.workload_key) or {}
    wl = workload_from_description(info["description"])
    torch_precision(torch, wl)
    row: dict = {
        "workload": workload_label(wl),
        "workload_key": wl.key,
        "flops": wl.flops,
        "config": rec.config,
    }
    inputs = wl.random_inputs(np.random.default_rng())
    reference = wl.run_reference(inputs)
    nbytes = sum(a.nbytes for a in inputs) + sum(int(np.prod(o.shape)) * 4 for o in wl.outputs)
    row["bytes"] = nbytes
    prog = build_cuda_program(wl, [step_from_dict(s) for s in rec.steps], target)
    b = builder.build(prog.kernels[0].name, prog.source)
    if b.error_kind is not None:
        return {**row, "ok": False, "error": f"build: {b.error_msg[:300]}"}
    rtol, atol = tolerances(reference, wl.precision, reduction_length(wl))
    runner.set_task(wl.key, inputs, reference, [(o.shape, o.dtype) for o in wl.outputs])
    opts = CudaRunOptions(
        repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, rtol=rtol, atol=atol, timeout_s=60.0
    )
    r = runner.run(b.lib_path, prog.launch_plan(), wl.key, opts)
    runner.remove_task(wl.key)
    if r.error_kind is not None:
        return {**row, "ok": False, "error": f"{r.error_kind.value}: {r.error_msg[:300]}"}
    ours = statistics.median(r.costs)
    row.update(
        ok=True, error=None, ours_s=ours, ours_gflops=wl.flops / ours / 1e9, ours_gbps=nbytes / ours / 1e9
    )
    fn = torch_baseline(wl)
    if fn is not None:
        targs = [to_torch(torch, a) for a in inputs]
        out = fn(*targs)
        torch_err = float(np.max(np.abs(out.double().cpu().numpy() - reference[0])))
        mode, by_mode = fastest_cudnn_mode(
            torch, lambda: time_torch(fn, targs, args.repeat, args.min_repeat_ms)
        )
        base = statistics.median(by_mode[mode])
        row.update(
            baseline="torch_eager",
            baseline_s=base,
            baseline_gflops=wl.flops / base / 1e9,
            baseline_gbps=nbytes / base / 1e9,
            speedup=base / ours,
            baseline_max_abs_err=torch_err,
            baseline_cudnn_benchmark=mode,
            baseline_s_by_cudnn_benchmark={
                ("on" if m else "off"): statistics.median(c) for m, c in by_mode.items()
            },
        )
    return row


def format_cuda_table(rows: list[dict]) -> str:
    head = (f"{'workload':34} {'ours us':>10} {'torch us':>10} {'ours/torch':>10} "
            f"{'ours TFLOP/s':>12} {'ours TB/s':>9}")
    lines = [head]
    for r in rows:
        if not r.get("ok"):
            lines.append(f"{r['workload']:34} FAILED: {r.get('error')}")
            continue
        t = r.get("baseline_s")
        lines.append(
            f"{r['workload']:34} {r['ours_s'] * 1e6:10.1f} {t * 1e6 if t else float('nan'):10.1f} "
            f"{r.get('speedup', float('nan')):9.2f}x {r['ours_gflops'] / 1e3:12.2f} "
            f"{r['ours_gbps'] / 1e3:9.2f}"
        )
    return "\n".join(lines)
