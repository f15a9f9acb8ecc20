"""torch.compile(backend="autotune") against torch eager and torch.compile() (Inductor).

    python bench/torch/backend.py [--models resnet18,bert_layer] [--db tuning.db] [--trials N]
                                  [--rounds 5] [--device cpu|cuda] [--json bench/torch/backend.json]

Models: ResNet-18 (torchvision's, random weights; a torch-only copy where torchvision does not
import) at 1x3x224x224 and a BERT-base layer (hidden 768, 12 heads, FFN 3072, GELU, post-norm) at
1x128x768. Every variant is compiled and warmed up first; then the variants are timed interleaved,
``--rounds`` rounds of ``--calls`` calls each, and each reports its median per-call time.

Overhead: the backend's per-call cost over the compiled module's own time, on a model of a few
microseconds (where the kernels cannot hide it): the fastest round's time of a call through
``torch.compile(backend="autotune")`` (Dynamo's guards, data pointers, output allocation) minus the
module's entry point timed in C; also for the ``autotune.torch.compile`` path without Dynamo, and for
a backend that computes nothing (Dynamo's own floor, measured in the same run).
``--trials N`` tunes each model's tasks first (records in ``--db``, resumable). ``--device cuda``:
the model and its inputs on the GPU (CUDA tensors in and out; each timed block ends with a device
synchronization), the backend compiling for this machine's GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import autotune.torch as at  # noqa: E402
from autotune.backends import backend_for  # noqa: E402
from autotune.target import cpu_target  # noqa: E402


class BertLayer(torch.nn.Module):
    """A BERT-base encoder layer: self-attention, add & norm, GELU feed-forward, add & norm."""

    def __init__(self, d: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d, eps=1e-12), torch.nn.LayerNorm(d, eps=1e-12)
        self.f1, self.f2 = torch.nn.Linear(d, ffn), torch.nn.Linear(ffn, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        a = ((q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5).softmax(-1) @ v
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.f2(F.gelu(self.f1(x))))


def resnet18() -> torch.nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None)


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "resnet18": (resnet18, (1, 3, 224, 224)),
    "bert_layer": (BertLayer, (1, 128, 768)),
}


DEVICE = "cpu"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def per_call(fn: Callable[[], Any], calls: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls


def host(x: torch.Tensor) -> Any:
    return x.detach().cpu().numpy()


def bench_model(name: str, args: argparse.Namespace) -> dict:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval().to(DEVICE)
    x = torch.randn(*shape, device=DEVICE)
    row: dict[str, Any] = {"model": name, "input": list(shape), "trials": args.trials, "device": DEVICE}
    with torch.no_grad():
        if args.trials:
            t0 = time.perf_counter()
            at.tune(model, (x,), trials=args.trials, db=args.db)
            row["tune_s"] = round(time.perf_counter() - t0, 1)
        variants: dict[str, Callable[[], Any]] = {"eager": lambda: model(x)}
        compile_s = {}
        for label, make_fn in (
            ("inductor", lambda: torch.compile(model)),
            ("autotune", lambda: torch.compile(model, backend="autotune",
                                               options={"db": args.db} if args.db else None)),
            ("autotune_export", lambda: at.compile(model, (x,), db=args.db)),
        ):
            torch._dynamo.reset()
            t0 = time.perf_counter()
            fn = make_fn()
            fn(x)
            compile_s[label] = round(time.perf_counter() - t0, 1)
            variants[label] = (lambda f: lambda: f(x))(fn)
        region = at.compile(model, (x,), db=args.db).regions  # the same module, for its own time
        want = model(x)
        errors = {k: float((v() - want).abs().max()) for k, v in variants.items() if k != "eager"}
        row["eager_max_abs"] = float(want.abs().max())
        times: dict[str, list[float]] = {k: [] for k in variants}
        own: list[float] = []
        for _ in range(args.rounds):
            for k, fn in variants.items():
                times[k].append(per_call(fn, args.calls))
            if len(region) == 1:
                own.append(min(region[0].time([host(x)], repeat=3, min_repeat_ms=50)))
    med = {k: statistics.median(v) for k, v in times.items()}
    row.update(
        median_ms={k: round(v * 1e3, 3) for k, v in med.items()},
        speedup_vs_eager=round(med["eager"] / med["autotune"], 3),
        speedup_vs_inductor=round(med["inductor"] / med["autotune"], 3),
        compile_s=compile_s,
        max_abs_error=errors,
        regions=len(region),
    )
    if own:  # (timed in C with warm caches: the boundary's cost is measured by ``overhead``)
        row["module_own_ms"] = round(statistics.median(own) * 1e3, 3)
    return row


def overhead(rounds: int, calls: int = 2000) -> dict:
    """The backend's per-call cost on a model whose own time is a few microseconds (a 64x64 dense
    layer and ReLU): the fastest round's per-call time through each path minus the module's own
    time (its entry point timed in C), so the difference is the boundary and not the kernels."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval().to(DEVICE)
    x = torch.randn(1, 64, device=DEVICE)
    with torch.no_grad():
        torch._dynamo.reset()
        dyn = torch.compile(model, backend="autotune")
        floor = torch.compile(copy.deepcopy(model), backend=_returns_precomputed)
        direct = at.compile(model, (x,))
        (module,) = direct.regions
        paths = {"torch.compile": lambda: dyn(x), "autotune.torch.compile": lambda: direct(x),
                 "eager": lambda: model(x), "dynamo_alone": lambda: floor(x)}
        for fn in paths.values():
            fn()
        best = {k: min(per_call(fn, calls) for _ in range(rounds)) for k, fn in paths.items()}
        own = min(min(module.time([host(x)], repeat=3, min_repeat_ms=50)) for _ in range(rounds))
    paths_ = ("torch.compile", "autotune.torch.compile")
    return {"module_own_us": round(own * 1e6, 2),
            "call_us": {k: round(v * 1e6, 2) for k, v in best.items()},
            "overhead_us": {k: round((best[k] - own) * 1e6, 2) for k in paths_},
            "over_dynamo_alone_us": round((best["torch.compile"] - best["dynamo_alone"] - own) * 1e6, 2)}


def _returns_precomputed(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A torch.compile backend whose compiled function computes nothing (it returns a result made at
    compile time): calls through it cost Dynamo's own frame evaluation and guards, the floor under
    any backend's per-call overhead."""
    out = gm(*example_inputs)
    return torch._dynamo.disable(lambda *args: out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,bert_layer", help="comma-separated; empty: overhead only")
    p.add_argument("--db", default=None, help="tuning database (records used, and written by --trials)")
    p.add_argument("--trials", type=int, default=0, help="tune each model to this many measurements first")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=10, help="calls per variant and round")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both sides
    names = [m for m in args.models.split(",") if m]
    bad = [m for m in names if m not in MODELS]
    if bad or args.trials < 0 or args.rounds < 1 or args.calls < 1:
        p.error(f"unknown model {bad[0]!r}" if bad else "--trials >= 0, --rounds and --calls >= 1")
    if args.trials and not args.db:
        p.error("--trials needs --db")
    rows = []
    for name in names:
        row = bench_model(name, args)
        rows.append(row)
        ms = row["median_ms"]
        print(f"{name}: autotune {ms['autotune']:.3f} ms, eager {ms['eager']:.3f} ms, inductor "
              f"{ms['inductor']:.3f} ms -> {row['speedup_vs_eager']:.2f}x eager, "
              f"{row['speedup_vs_inductor']:.2f}x inductor (module's own {row.get('module_own_ms')} ms)",
              flush=True)
    ov = overhead(args.rounds)
    print(f"per-call overhead over the module's own {ov['module_own_us']} us: {ov['overhead_us']} us; "
          f"Dynamo alone (a backend that computes nothing) {ov['call_us']['dynamo_alone']} us a call, "
          f"torch.compile(backend='autotune') {ov['over_dynamo_alone_us']} us above it", flush=True)
    if args.json:
        target = cpu_target() if DEVICE == "cpu" else backend_for("cuda").resolve()
        out = {"target": target.key, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "rows": rows, "overhead": ov}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
