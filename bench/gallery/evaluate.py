"""One gallery row: import an export with the compiler's frontend, compile it (with an empty database,
and with ``--db`` where given), check it against onnxruntime on random inputs and time both
interleaved. Needs onnx, onnxruntime and the compiler, not torch.

Runs as a child process of the gallery (``python -m bench.gallery.evaluate MODEL EXPORTER ...``),
whose last stdout line is the row as JSON, so a crash or hang in one model costs only its row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .export import DEFAULT_CACHE, EXPORTERS, one_line, paths
from .models import MODELS, InputSpec, ModelSpec
from .table import Row

QUIET_GAP_S = 0.2  # idle time before each timed block, as bench.py --model leaves


def make_feeds(specs: Sequence[InputSpec], names: Sequence[str], rng: np.random.Generator) -> dict[str, Any]:
    """Random inputs for the model inputs ``names``: images and signals standard normal, token ids
    uniform in [0, vocab), attention masks a padded sequence (ones, then zeros after a random length
    of at least half the sequence). Inputs are matched to ``specs`` by name, else by position."""
    by_name = {s.name: s for s in specs}
    feeds: dict[str, Any] = {}
    for i, n in enumerate(names):
        s = by_name.get(n) or (specs[i] if i < len(specs) else None)
        if s is None:
            raise ValueError(f"model input {n!r} matches none of the gallery's inputs")
        if s.is_float:
            feeds[n] = rng.standard_normal(s.shape).astype(np.float32)
        elif s.kind == "token_ids":
            feeds[n] = rng.integers(0, s.vocab, size=s.shape, dtype=np.int64)
        else:
            length = int(rng.integers(s.shape[-1] // 2, s.shape[-1] + 1))
            mask = np.zeros(s.shape, np.int64)
            mask[..., :length] = 1
            feeds[n] = mask
    return feeds


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), ort.SessionOptions(), providers=["CPUExecutionProvider"])


def _rel_err(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    from autotune.cli.model import compare

    if len(outputs) != len(reference) or any(o.shape != r.shape for o, r in zip(outputs, reference)):
        raise ValueError(f"output shapes {[o.shape for o in outputs]} differ from onnxruntime's "
                         f"{[r.shape for r in reference]}")
    return compare(list(outputs), list(reference))[1]


def vacuous_check(ref: Sequence[np.ndarray], other: Sequence[np.ndarray]) -> None:
    """Raise if the reference outputs on two different random inputs (nearly) agree: a model whose
    output does not depend on its input (constant logits from a zero-initialised head, activations
    that vanished) would pass any comparison, so it is no evidence of correctness."""
    for i, (a, b) in enumerate(zip(ref, other)):
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        if not np.all(np.isfinite(a)):
            raise ValueError(f"output {i} of onnxruntime is not finite")
        if float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)) <= 1e-3 * scale or scale == 0.0:
            raise ValueError(f"output {i} (max |value| {scale:.2g}) hardly depends on the input: a check "
                             "against it could not fail")


def interleaved_ms(fns: dict[str, Any], repeat: int, min_repeat_ms: float) -> dict[str, float]:
    """Median milliseconds per call of each zero-argument callable, timed in ``repeat`` rounds that
    take each callable in turn (so a change in machine load hits every side), a quiet gap before
    each block (thread pools spinning on after the previous side's runs)."""
    from autotune.cli.bench import time_callable

    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            time.sleep(QUIET_GAP_S)
            times[k] += time_callable(fn, [], 1, min_repeat_ms)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def evaluate(spec: ModelSpec, exporter: str, cache: Path, db: str | None = None, timing: bool = True,
             repeat: int = 5, min_repeat_ms: float = 200.0, seed: int = 0, cold: bool = True) -> Row:
    """The row of ``spec``'s cached export with ``exporter`` (the export must exist: see export.py).
    ``cold``: the modules are built in a fresh build cache, so the compile time counts every gcc run
    (otherwise kernels already built by earlier runs are reused)."""
    if cold:
        with tempfile.TemporaryDirectory(prefix="gallery-build-") as tmp:
            return _evaluate(spec, exporter, cache, db, timing, repeat, min_repeat_ms, seed, tmp)
    return _evaluate(spec, exporter, cache, db, timing, repeat, min_repeat_ms, seed, None)


def _evaluate(spec: ModelSpec, exporter: str, cache: Path, db: str | None, timing: bool, repeat: int,
              min_repeat_ms: float, seed: int, build_dir: str | None) -> Row:
    onnx_path, meta_path = paths(cache, spec.name, exporter)
    row = Row(spec.name, exporter, spec.family, notes=[spec.note] if spec.note else [])
    meta = {"ok": False, "error": "not exported"}
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
    row.opset, row.export_s = meta.get("opset"), meta.get("seconds")
    if not meta.get("ok") or not onnx_path.is_file():
        row.error = f"export: {meta.get('error')}"
        return row
    stage = "import"
    try:
        from autotune.graph.compiler import compile_model, load_model

        t0 = time.perf_counter()
        graph = load_model(str(onnx_path))
        row.import_s = round(time.perf_counter() - t0, 2)
        row.imported, row.nodes = True, len(graph.nodes)
        stage = "reference"
        session = _ort_session(onnx_path)
        feeds = make_feeds(spec.inputs, [i.name for i in session.get_inputs()],
                           np.random.default_rng(seed))
        ref = session.run(None, feeds)
        other = make_feeds(spec.inputs, list(feeds), np.random.default_rng(seed + 1))
        vacuous_check(ref, session.run(None, other))
        stage = "compile"
        t0 = time.perf_counter()
        module = compile_model(graph, db=None, verbose=False, cache_dir=build_dir)
        row.compile_s = round(time.perf_counter() - t0, 2)
        row.tasks = module.summary.tasks
        stage = "run"
        ours = {n: feeds[n] for n in module.input_names}
        row.max_rel_err = _rel_err(module.run(ours), ref)
        fns = {"untuned": lambda: module.run(ours), "ort": lambda: session.run(None, feeds)}
        if db:
            stage = "tuned"
            from records import TuningDatabase

            tdb = TuningDatabase(db)
            try:
                tuned = compile_model(graph, db=tdb, verbose=False, cache_dir=build_dir)
            finally:
                tdb.close()
            row.tuned_tasks = tuned.summary.tuned_tasks
            row.tuned_max_rel_err = _rel_err(tuned.run(ours), ref)
            fns["tuned"] = lambda: tuned.run(ours)
        if timing:
            stage = "timing"
            ms = interleaved_ms(fns, repeat, min_repeat_ms)
            row.untuned_ms, row.ort_ms, row.tuned_ms = ms["untuned"], ms["ort"], ms.get("tuned")
    except Exception as err:  # noqa: BLE001 - every failure is this row's finding
        row.error = f"{stage}: {one_line(err, 2000)}"
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one gallery row (the child process of the gallery)")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("exporter", choices=EXPORTERS)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--db", default=None)
    p.add_argument("--no-timing", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=float, default=200.0)
    p.add_argument("--warm-cache", action="store_true", help="reuse kernels built by earlier runs")
    a = p.parse_args(argv)
    row = evaluate(MODELS[a.model], a.exporter, a.cache, a.db, not a.no_timing, a.repeat, a.min_repeat_ms,
                   cold=not a.warm_cache)
    print(json.dumps(row.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
