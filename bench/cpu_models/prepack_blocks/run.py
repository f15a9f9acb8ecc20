"""Tasks of a model whose weight lies along an axis tiled with overlap (a classifier's 1000
outputs on 16 lanes): each DB's best config timed as recorded and with that weight pre-tiled
(``pack`` = ``<weight>@pre``, both ``outer_order``s), weights flushed before every call as in
tuning, fresh random inputs checked against the float64 reference, interleaved rounds.

    python bench/cpu_models/prepack_blocks/run.py MODEL DB [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from autotune.cli.common import resolve_target  # noqa: E402
from autotune.cli.model import load  # noqa: E402
from autotune.graph.compiler import prepare  # noqa: E402
from autotune.measure import Builder, CpuRunner, RunOptions  # noqa: E402
from autotune.search.measure_batch import WorkloadMeasurer  # noqa: E402
from records import TuningDatabase  # noqa: E402
from schedules import make_space  # noqa: E402
from schedules.cpu import PREPACKED, CpuSketch  # noqa: E402


def overlapping_weights(wl, target) -> list[str]:  # noqa: ANN001
    """Weights of ``wl`` that its CPU sketch can pre-tile and that lie along an overlapping axis."""
    sk = CpuSketch(wl, target)
    return [n for n in getattr(sk, "prepackable", []) if sk.pack_candidates[n][1] & sk.padded]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("db")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    target = resolve_target("cpu")
    prepared = prepare(load(args.model, [], "fp32", "cpu").graph)
    runner, builder = CpuRunner(), Builder(workers=2)
    with TuningDatabase(args.db) as db:
        for task in prepared.tasks:
            wl = task.workload
            weights = overlapping_weights(wl, target)
            best = db.best(wl.key, target.key)
            if not weights or best is None:
                continue
            space = make_space(wl, target)
            configs = [best.config] + [dict(best.config, pack=f"{weights[0]}{PREPACKED}", outer_order=o)
                                       for o in (0, 1)]
            options = target.backend.run_options(wl, RunOptions(repeat=7))
            m = WorkloadMeasurer(wl, target, builder, runner, options)
            runs: dict[int, list[float]] = {i: [] for i in range(len(configs))}
            for _ in range(args.rounds):
                for i, t in enumerate(m.measure(configs, [space.steps(c) for c in configs])):
                    runs[i].append(float(np.median(t.costs)) if t.costs and not t.error_kind else np.inf)
            med = [float(np.median(r)) * 1e3 for r in runs.values()]
            print(f"{task.label} x{task.weight}: recorded best ({best.config.get('pack')}) {med[0]:.4f} ms; "
                  f"pre-tiled {med[1]:.4f} ms (outer_order 0), {med[2]:.4f} ms (outer_order 1); "
                  f"{med[0] / min(med[1:]):.2f}x", flush=True)
    runner.close()


if __name__ == "__main__":
    main()
