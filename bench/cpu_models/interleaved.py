"""Compiled modules and onnxruntime checked on one input and timed in interleaved rounds in one
process (the host's speed changes within minutes, so only same-run ratios count). Shared by the
A/B scripts of this folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from autotune.aligned import aligned_empty
from autotune.cli.bench import time_callable
from autotune.cli.model import QUIET_GAP_S, compare, onnxruntime_session
from autotune.graph.feeds import random_inputs
from autotune.graph.ir import Graph
from autotune.graph.precision import output_tolerance
from autotune.graph.runtime import check_inputs


def check_and_time(model: Any, graph: Graph, runs: Mapping[str, Any], rounds: int, repeat: int = 9) -> dict:
    """Every loaded module of ``graph`` in ``runs`` (name -> executable) against onnxruntime on one
    random input (``bench.py``'s check: max abs error within ``output_tolerance`` of the largest
    reference magnitude, else AssertionError), then each
    and onnxruntime timed in ``rounds`` rounds (the modules in alternating order, a quiet gap
    before each block): median of ``repeat`` runs per block. Returns ``{"max_abs_err": {name: e},
    "times": {name: [s, ...]}, "arrays": inputs, "outs": outputs}`` (the buffers, for profiles)."""
    feeds = random_inputs(graph, np.random.default_rng(0))
    arrays = check_inputs(graph, feeds)
    outs = [aligned_empty(graph.types[o].shape, graph.types[o].dtype) for o in graph.outputs]
    sess = onnxruntime_session(model)
    ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
    expect = sess.run(None, ort_feeds)
    errors = {}
    for name, ex in runs.items():
        ex.run(arrays, outs)
        errors[name], rel = compare(outs, expect)
        assert rel <= output_tolerance(graph.precision), f"{name}: max abs err {errors[name]} ({rel:.2e})"
    times: dict[str, list[float]] = {k: [] for k in [*runs, "onnxruntime"]}
    for r in range(rounds):
        for name in list(runs)[:: 1 if r % 2 == 0 else -1]:
            time.sleep(QUIET_GAP_S)
            times[name].append(float(np.median(runs[name].time(arrays, outs, repeat, 0.0))))
        time.sleep(QUIET_GAP_S)
        ort = time_callable(lambda f: sess.run(None, f), [ort_feeds], repeat, 0.0)
        times["onnxruntime"].append(float(np.median(ort)))
    return {"max_abs_err": errors, "times": times, "arrays": arrays, "outs": outs}


def ab_run(model: Any, modules: Mapping[str, Any], base: str, other: str, rounds: int, /,
           **fields: Any) -> tuple[dict, dict]:
    """Two compiled modules of ``model`` (name -> module), checked and timed by ``check_and_time``
    on ``base``'s graph: the result (``fields`` first, then the errors and ``ab_figures``) and the
    run itself (its buffers, for profiles)."""
    done = check_and_time(model, modules[base].graph, {k: m.executable for k, m in modules.items()}, rounds)
    result = {**fields, "max_abs_err": done["max_abs_err"], **ab_figures(done["times"], base, other)}
    return result, done


def ab_figures(times: Mapping[str, list[float]], base: str, other: str) -> dict:
    """The figures of an A/B run's ``times`` (``check_and_time``): the medians, ``other`` over
    ``base`` round by round (the ratio that counts on a host of two speeds), onnxruntime over
    each, and every round, in milliseconds."""
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "median_ms": {k: round(v * 1e3, 4) for k, v in med.items()},
        f"{other}_over_{base}_per_round_median": round(float(np.median(
            [a / b for a, b in zip(times[other], times[base])])), 4),
        f"onnxruntime_over_{base}": round(med["onnxruntime"] / med[base], 4),
        f"onnxruntime_over_{other}": round(med["onnxruntime"] / med[other], 4),
        "rounds_ms": {k: [round(x * 1e3, 4) for x in v] for k, v in times.items()},
    }


def save(result: dict, out_path: str, long: tuple[str, ...]) -> None:
    """``result`` as JSON to ``out_path``; printed without its ``long`` entries."""
    Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in long}))


def estimated_ms(modules: Mapping[str, Any]) -> dict:
    """Each compiled module's estimate from its records (the sum of its kernels' best times), ms."""
    return {k: round(m.summary.estimated_s * 1e3, 4) if m.summary.estimated_s else None
            for k, m in modules.items()}
