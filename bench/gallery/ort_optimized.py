"""The gallery's exports as onnxruntime saves them after its extended graph optimizations
(``optimized_model_filepath``; contrib operators such as FusedConv, QuickGelu, FusedMatMul,
SkipLayerNormalization in place of their subgraphs): each compiled untuned and checked against
onnxruntime running the original export on the same random inputs.

    python -m bench.gallery.ort_optimized CACHE OUT.json [MODEL.EXPORTER ...]

CACHE is a folder of ``MODEL.EXPORTER.onnx`` exports (``python -m bench.gallery --export-only
--cache CACHE``); without names, every export in it.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune.graph import compile_model
from autotune.graph.frontend import ModelImportError, UnsupportedModelError

TOLERANCE = 1e-4  # of the largest reference value, as the gallery's check


def check(src: Path, tmp: Path, cache_dir: str) -> dict:
    import onnx
    import onnxruntime as ort

    saved = tmp / f"{src.stem}.ort.onnx"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(saved)
    original = ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
    contrib = collections.Counter(n.op_type for n in onnx.load(str(saved)).graph.node if n.domain)
    row: dict = {"model": src.stem, "contrib_ops": dict(contrib)}
    t0 = time.perf_counter()
    try:
        module = compile_model(str(saved), cache_dir=cache_dir, verbose=False)
    except (ModelImportError, UnsupportedModelError) as err:
        return row | {"status": "refused", "error": str(err).splitlines()[0][:300]}
    feeds = module.random_inputs(np.random.default_rng(0))
    ours = module.run(feeds)
    ref = original.run(None, feeds)
    rel = max(float(np.max(np.abs(o - r))) / max(1.0, float(np.max(np.abs(r)))) for o, r in zip(ours, ref))
    return row | {"status": "ok" if rel <= TOLERANCE else "wrong", "max_rel_err": rel,
                  "compile_s": round(time.perf_counter() - t0, 2)}


def main() -> None:
    cache, out = Path(sys.argv[1]), Path(sys.argv[2])
    names = sys.argv[3:] or sorted(p.name.removesuffix(".onnx") for p in cache.glob("*.onnx"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = check(cache / f"{name}.onnx", Path(tmp), str(Path(tmp) / "modules"))
            rows.append(row)
            print(f"{row['model']}: {row['status']} {row.get('max_rel_err', row.get('error', ''))} "
                  f"{row['contrib_ops']}", flush=True)
    summary = dict(collections.Counter(r["status"] for r in rows))
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print(summary)


if __name__ == "__main__":
    main()
