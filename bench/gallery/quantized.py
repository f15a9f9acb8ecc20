"""The gallery's exports quantized by onnxruntime's tools: does each compile and agree with
onnxruntime, and how far apart are onnxruntime's own evaluations?

    python -m bench.gallery.quantized CACHE OUT.json [MODEL.EXPORTER ...] [--timing]

Each export of CACHE (``python -m bench.gallery --export-only --cache CACHE``) is quantized three
ways: dynamically (``quantize_dynamic``, int8 weights: ConvInteger / MatMulInteger with
DynamicQuantizeLinear on the activations), and statically in the QDQ format and the QOperator
format (``quantize_static``, calibrated on four random inputs). Each is compiled untuned and run on
random inputs, and compared with onnxruntime (its graph optimizations on, as deployed) and with
onnxruntime's unoptimized evaluation of the same file: quantized values change by whole steps
where two evaluations round one float differently, so the spread between onnxruntime's own two
evaluations is the scale against which ours is read.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from autotune.graph import compile_model
from autotune.graph.frontend import ModelImportError, UnsupportedModelError


def _quantized(src: Path, tmp: Path) -> dict[str, Path]:
    """The quantized files of ``src`` that onnxruntime's tools could write, by kind."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static

    inputs = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_inputs()

    class Random(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.feeds = iter([{i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape])
                                .astype(np.float32) for i in inputs} for _ in range(4)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    out: dict[str, Path] = {}
    dynamic = tmp / f"{src.stem}.dynamic.onnx"
    quantize_dynamic(str(src), str(dynamic))
    out["dynamic"] = dynamic
    if all(i.type == "tensor(float)" for i in inputs):  # static: calibrated on float inputs
        for fmt in (QuantFormat.QDQ, QuantFormat.QOperator):
            path = tmp / f"{src.stem}.{fmt.name}.onnx"
            quantize_static(str(src), str(path), Random(), quant_format=fmt)
            out[fmt.name] = path
    return out


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) / max(float(np.max(np.abs(b))), 1e-30)


def check(path: Path, cache_dir: str, timing: bool) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    row: dict[str, Any] = {"ops": dict(collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node
                                                           if "Integer" in n.op_type or "Q" in n.op_type))}
    try:
        module = compile_model(str(path), cache_dir=cache_dir, verbose=False)
    except (ModelImportError, UnsupportedModelError) as err:
        return row | {"status": "refused", "error": str(err).splitlines()[0][:300]}
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    deployed = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    unoptimized = ort.InferenceSession(str(path), plain, providers=["CPUExecutionProvider"])
    feeds = module.random_inputs(np.random.default_rng(0))
    ours, ref, ref0 = module.run(feeds)[0], deployed.run(None, feeds)[0], unoptimized.run(None, feeds)[0]
    row |= {"status": "ok", "vs_ort": _rel(ours, ref), "vs_ort_unoptimized": _rel(ours, ref0),
            "ort_vs_itself": _rel(ref0, ref)}
    if timing:
        from .evaluate import interleaved_ms

        fns = {"ours": lambda: module.run(feeds), "ort": lambda: deployed.run(None, feeds)}
        ms = interleaved_ms(fns, 5, 200.0)
        row |= {"ours_ms": round(ms["ours"], 3), "ort_ms": round(ms["ort"], 3),
                "speedup": round(ms["ort"] / ms["ours"], 3)}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cache", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("models", nargs="*", help="MODEL.EXPORTER names (default: every export in CACHE)")
    p.add_argument("--timing", action="store_true")
    args = p.parse_args(argv)
    names = args.models or sorted(f.name.removesuffix(".onnx") for f in args.cache.glob("*.onnx"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            t0 = time.perf_counter()
            try:
                variants = _quantized(args.cache / f"{name}.onnx", Path(tmp))
            except Exception as err:  # noqa: BLE001 - a model the quantizer refuses is that row's finding
                rows.append({"model": name, "kind": "-", "status": "not quantized", "error": str(err)[:200]})
                continue
            for kind, path in variants.items():
                row = {"model": name, "kind": kind, **check(path, str(Path(tmp) / "modules"), args.timing)}
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                detail = (f"vs onnxruntime {row['vs_ort']:.1e} (unoptimized {row['vs_ort_unoptimized']:.1e}; "
                          f"onnxruntime vs itself {row['ort_vs_itself']:.1e})" if row["status"] == "ok"
                          else row.get("error", ""))
                if "speedup" in row:
                    detail += f", {row['ours_ms']:.2f} / {row['ort_ms']:.2f} ms, {row['speedup']:.2f}x"
                print(f"{name:28s} {kind:9s} {row['status']:8s} {detail}", flush=True)
    summary = dict(collections.Counter(f"{r['kind']} {r['status']}" for r in rows))
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
