"""Gallery models stored in 16-bit floats: exported after ``.half()`` / ``.bfloat16()``, compiled
(as their float32 twin, ``autotune.graph.half``), checked and timed against onnxruntime.

    python -m bench.gallery.half_models resnet18 vit_tiny --dtype float16 [--db DB] --json OUT.json

Per (model, exporter): the export's onnxruntime evaluation in the 16-bit type, onnxruntime's
float32 evaluation of the twin (the model with its weights widened, nearly exact), and the compiled
module, on the same random 16-bit inputs; the largest error of each against the twin's, relative
to its largest output; and, with ``--db`` or without, the module's latency against onnxruntime on
the 16-bit model (interleaved). Exports go to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .evaluate import _ort_session, _rel_err, interleaved_ms, make_feeds
from .export import export_model, one_line
from .models import MODELS

DTYPES = ("float16", "bfloat16")


def row(name: str, dtype: str, exporter: str, tmp: Path, db: str | None, repeat: int) -> dict[str, Any]:
    import onnx

    from autotune.graph import compile_model, from_onnx
    from autotune.graph.half import widen
    from autotune.te.workload import numpy_dtype
    from records import TuningDatabase

    out: dict[str, Any] = {"model": name, "dtype": dtype, "exporter": exporter}
    stage = "export"
    try:
        path = tmp / f"{name}.{dtype}.{exporter}.onnx"
        export_model(MODELS[name], exporter, path, dtype=dtype)
        twin_path = tmp / f"{name}.{dtype}.{exporter}.twin.onnx"
        onnx.save(widen(onnx.load(str(path)))[0], str(twin_path))
        stage = "reference"
        twin = _ort_session(twin_path)
        spec = MODELS[name]
        feeds32 = make_feeds(spec.inputs, [i.name for i in twin.get_inputs()], np.random.default_rng(0))
        feeds = {k: v.astype(numpy_dtype(dtype)) if v.dtype == np.float32 else v for k, v in feeds32.items()}
        exact = twin.run(None, {k: v.astype(np.float32) if v.dtype.kind in "fV" else v
                                for k, v in feeds.items()})
        try:
            session = _ort_session(path)
            low = session.run(None, feeds)
            out["ort_16bit_err"] = _rel_err([o.astype(np.float32) for o in low], exact)
        except Exception as err:  # noqa: BLE001 - onnxruntime has no kernel for some 16-bit operators
            session, out["ort_16bit_error"] = None, one_line(err, 200)
        stage = "compile"
        graph = from_onnx(str(path))
        tdb = TuningDatabase(db) if db else None
        try:
            t0 = time.perf_counter()
            module = compile_model(graph, db=tdb, verbose=False)
            out["compile_s"] = round(time.perf_counter() - t0, 1)
        finally:
            if tdb is not None:
                tdb.close()
        stage = "run"
        ours = module.run({k: feeds[k] for k in module.input_names})
        out["ours_dtype"] = str(ours[0].dtype)
        out["ours_err"] = _rel_err([o.astype(np.float32) for o in ours], exact)
        if repeat and session is not None:
            stage = "timing"
            args = {k: feeds[k] for k in module.input_names}
            ms = interleaved_ms({"ours": lambda: module.run(args), "ort": lambda: session.run(None, feeds)},
                                repeat, 200.0)
            out["ours_ms"], out["ort_ms"] = round(ms["ours"], 3), round(ms["ort"], 3)
            out["speedup"] = round(ms["ort"] / ms["ours"], 2)
        out["ok"] = True
    except Exception as err:  # noqa: BLE001 - each failure is this row's finding
        out["ok"], out["error"] = False, f"{stage}: {one_line(err, 300)}"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--dtype", choices=DTYPES, action="append")
    p.add_argument("--exporter", choices=("legacy", "dynamo"), action="append")
    p.add_argument("--db", help="tuning database (the float32 export's records serve the twin)")
    p.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds (0: no timing)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="half-models-") as tmp:
        for name in args.models:
            for dtype in args.dtype or ["float16"]:
                for exporter in args.exporter or ["legacy", "dynamo"]:
                    r = row(name, dtype, exporter, Path(tmp), args.db, args.repeat)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
