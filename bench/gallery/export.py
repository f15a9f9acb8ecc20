"""Exports of the gallery's models with both PyTorch exporters, kept in a cache folder.

Each export runs in a child process (``python -m bench.gallery.export MODEL EXPORTER CACHE``) under
a time limit, so an exporter that crashes, hangs or runs out of memory costs one row, not the run.
Next to ``MODEL.EXPORTER.onnx`` the child writes ``MODEL.EXPORTER.json``: the versions, opset and
seconds of a successful export, or the exporter's error (a failed export is cached too, and retried
with ``--reexport``). The .onnx file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .models import MODELS, ModelSpec

EXPORTERS = ("dynamo", "legacy")  # torch.onnx.export(dynamo=True) / (dynamo=False)
DEFAULT_CACHE = Path(__file__).resolve().parent / "exports"


def paths(cache: Path, model: str, exporter: str) -> tuple[Path, Path]:
    """(the .onnx file, its metadata .json) of one export."""
    return Path(cache) / f"{model}.{exporter}.onnx", Path(cache) / f"{model}.{exporter}.json"


def one_line(err: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type and the first line of its message (cut at ``limit``)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:limit] if text else ''}".rstrip(": ")


def _versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "torchvision", "transformers", "onnxscript"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = str(getattr(m, "__version__", "?"))
    return out


def _example_inputs(spec: ModelSpec) -> tuple[Any, ...]:
    import torch

    g = torch.Generator().manual_seed(0)
    args = []
    for i in spec.inputs:
        if i.is_float:
            args.append(torch.randn(i.shape, generator=g))
        elif i.kind == "token_ids":
            args.append(torch.randint(0, i.vocab, i.shape, generator=g))
        else:
            args.append(torch.ones(i.shape, dtype=torch.int64))
    return tuple(args)


def well_scaled(model: Any, spec: ModelSpec, batches: int = 1, batch: int = 4) -> Any:
    """``model`` (random weights) made to compute input-dependent, well-scaled outputs, so that a
    check against onnxruntime can fail: weight matrices initialised to zero (ViT's head) are drawn
    from N(0, 0.02), and batch-norm running statistics, which at initialisation are mean 0 / var 1
    and so normalise nothing (activations then vanish or explode through dozens of layers: EfficientNet
    ends at 1e-14, Inception at 1e12, GoogLeNet's logits do not depend on the image), are recomputed
    from a few random batches (a cumulative average), as one re-calibrates after changing weights."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not bool(p.any()):
                p.normal_(0.0, 0.02)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if not norms or spec.inputs[0].kind != "image":
            return model.eval()
        saved = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        g = torch.Generator().manual_seed(1)
        for _ in range(batches):
            model(torch.randn((batch,) + spec.inputs[0].shape[1:], generator=g))
        for m, mom in zip(norms, saved):
            m.momentum = mom
    return model.eval()


def export_model(spec: ModelSpec, exporter: str, out: Path, opset: int | None = None,
                 dtype: str | None = None) -> dict:
    """Build ``spec`` (random weights, eval mode) and export it to ``out``; returns the metadata.
    ``dtype`` ("float16", "bfloat16"): the weights and float inputs cast to it first."""
    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; valid: {', '.join(EXPORTERS)}")
    torch.manual_seed(0)
    model = well_scaled(spec.build(), spec)
    args = _example_inputs(spec)
    if dtype is not None:
        low = getattr(torch, dtype)
        model, args = model.to(low), tuple(a.to(low) if a.is_floating_point() else a for a in args)
    tmp = out.with_name(out.name + ".part")
    kwargs: dict[str, Any] = {
        "input_names": [i.name for i in spec.inputs],
        "output_names": list(spec.outputs),
        "dynamo": exporter == "dynamo",
    }
    if opset is not None:
        kwargs["opset_version"] = opset
    if exporter == "dynamo":
        kwargs["external_data"] = False  # one file; every gallery model is far below 2 GB
    # the legacy exporter traces with gradients on: under no_grad, nn.MultiheadAttention (ViT) takes
    # its fused fast path, aten::_native_multi_head_attention, which that exporter cannot export
    grad = torch.no_grad() if exporter == "dynamo" else contextlib.nullcontext()
    t0 = time.perf_counter()
    with grad:
        torch.onnx.export(model, args, str(tmp), **kwargs)
    seconds = time.perf_counter() - t0
    import onnx

    proto = onnx.load(str(tmp), load_external_data=False)
    os.replace(tmp, out)
    opsets = {o.domain or "ai.onnx": int(o.version) for o in proto.opset_import}
    return {"model": spec.name, "exporter": exporter, "ok": True, "error": None,
            "seconds": round(seconds, 2), "opset": opsets.get("ai.onnx"), "opsets": opsets,
            "bytes": out.stat().st_size, "versions": _versions()}


def _write_meta(meta_path: Path, meta: dict) -> None:
    tmp = meta_path.with_name(meta_path.name + ".part")
    tmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp, meta_path)


def ensure_export(spec: ModelSpec, exporter: str, cache: Path, timeout_s: float = 1200.0,
                  reexport: bool = False, opset: int | None = None) -> dict:
    """The metadata of ``spec``'s export with ``exporter``: from the cache, or made now in a child
    process (its failure, crash or timeout recorded as the metadata's ``error``)."""
    onnx_path, meta_path = paths(cache, spec.name, exporter)
    if meta_path.is_file() and not reexport:
        meta = json.loads(meta_path.read_text())
        if not meta.get("ok") or onnx_path.is_file():
            return meta
    if importlib.util.find_spec("torch") is None:
        return {"model": spec.name, "exporter": exporter, "ok": False,
                "error": "torch is not installed (pip install -e '.[models]')"}
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "bench.gallery.export", spec.name, exporter, str(cache)]
    if opset is not None:
        cmd += ["--opset", str(opset)]
    root = Path(__file__).resolve().parents[2]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout_s)
        failed = None if proc.returncode == 0 else (
            f"export process exited with status {proc.returncode}: "
            + (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:400])
    except subprocess.TimeoutExpired:
        failed = f"export did not finish within {timeout_s:.0f} s"
    if meta_path.is_file() and failed is None:
        return json.loads(meta_path.read_text())
    if failed is None:
        failed = "export process wrote no metadata"
    if meta_path.is_file():  # the child recorded the exporter's own error: keep that one
        meta = json.loads(meta_path.read_text())
        if not meta.get("ok"):
            return meta
    meta = {"model": spec.name, "exporter": exporter, "ok": False, "error": failed,
            "seconds": round(time.perf_counter() - t0, 2)}
    _write_meta(meta_path, meta)
    return meta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="export one gallery model (the child process of ensure_export)")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("exporter", choices=EXPORTERS)
    p.add_argument("cache", type=Path)
    p.add_argument("--opset", type=int, default=None)
    a = p.parse_args(argv)
    onnx_path, meta_path = paths(a.cache, a.model, a.exporter)
    t0 = time.perf_counter()
    try:
        meta = export_model(MODELS[a.model], a.exporter, onnx_path, a.opset)
    except Exception as err:  # noqa: BLE001 - the exporter's failure is this row's result
        traceback.print_exc()
        meta = {"model": a.model, "exporter": a.exporter, "ok": False, "error": one_line(err),
                "seconds": round(time.perf_counter() - t0, 2), "versions": _versions()}
    _write_meta(meta_path, meta)
    return 0 if meta["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
