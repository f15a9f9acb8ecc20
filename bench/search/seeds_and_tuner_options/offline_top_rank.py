"""Offline model study: train a cost model on n random configs of each fully measured space, rank
the rest, and report the median position of the first config within 5% of the best (and the mean
Spearman of the ranking) over draws. Lower positions mean the model's top picks find good configs.

    python bench/search/seeds_and_tuner_options/offline_top_rank.py REPLAY N[,N...] DRAWS VARIANTS_JSON

VARIANTS_JSON maps a name to {"kind": "ir" | "knob" | "both", "opts": model options (or "ir_opts" /
"knob_opts" for one of the two),
"first": "random" | "diverse"}; "both" adds the two models' scores, each standardized over the
training configs, as the tuner does.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import tasks_features  # noqa: E402

from autotune.search.replay import ReplayDB  # noqa: E402
from cost_model import Sample, make_model, spearman  # noqa: E402


def space_arrays(task, cache: dict) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """A fully measured space's successful configs (those that lower): their keys, IR feature rows,
    knob encodings and costs (s)."""
    keys = [k for k in task.records if cache[k] is not None and math.isfinite(task.records[k].mean_s)]
    X = np.stack([cache[k] for k in keys])
    K = np.stack([task.space.encode(task.records[k].config) for k in keys])
    cost = np.array([task.records[k].mean_s for k in keys])
    return keys, X, K, cost


def maximin(K: np.ndarray, pool: np.ndarray, n: int) -> list[int]:
    """n rows of ``pool`` spread over the knob encoding (each farthest from those picked)."""
    span = np.ptp(K, axis=0)
    Z = K / np.where(span > 0, span, 1.0)
    chosen = [int(pool[0])]
    near = np.linalg.norm(Z[pool] - Z[pool[0]], axis=1)
    while len(chosen) < n:
        j = int(np.argmax(near))
        chosen.append(int(pool[j]))
        near = np.minimum(near, np.linalg.norm(Z[pool] - Z[pool[j]], axis=1))
    return chosen


def score(variant: dict, X: np.ndarray, K: np.ndarray, cost: np.ndarray, tr: np.ndarray,
          te: np.ndarray, seed: int) -> np.ndarray:
    parts = []
    for kind in (["ir", "knob"] if variant["kind"] == "both" else [variant["kind"]]):
        F = X if kind == "ir" else K
        model = make_model("xgb", seed=seed, **variant.get(f"{kind}_opts", variant.get("opts", {})))
        model.fit([Sample(F[i], "task", cost[i]) for i in tr])
        own = model.predict(F[tr])
        parts.append((model.predict(F[te]) - own.mean()) / (own.std() or 1.0))
    return np.sum(parts, axis=0)


def first_good_position(variant: dict, X: np.ndarray, K: np.ndarray, cost: np.ndarray, good: np.ndarray,
                        n: int, draw: int) -> tuple[int, float | None]:
    """Train on n configs drawn for ``draw`` (random, or spread over the knobs with "first":
    "diverse"), rank the rest: the 1-based position of the first good config (0 when a training
    config is good already) and the ranking's Spearman (None then)."""
    rng = np.random.default_rng(1000 * draw + n)
    idx = rng.permutation(len(cost))
    if variant.get("first") == "diverse":
        chosen = maximin(K, idx[:16 * n], n)
        idx = np.concatenate([chosen, rng.permutation(np.setdiff1d(idx, chosen))])
    tr, te = idx[:n], idx[n:]
    if good[tr].any():
        return 0, None
    sc = score(variant, X, K, cost, tr, te, draw)
    order = te[np.argsort(-sc, kind="stable")]
    return int(np.flatnonzero(good[order])[0]) + 1, spearman(sc, -cost[te])


def main() -> None:
    replay, ns, draws, variants = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], \
        int(sys.argv[3]), json.loads(sys.argv[4])
    tasks = ReplayDB(replay).tasks()
    feats = tasks_features(tasks)
    for name, variant in variants.items():
        for n in ns:
            cells = []
            for t in tasks:
                keys, X, K, cost = space_arrays(t, feats[t.key][0])
                good = cost.min() / cost >= 0.95
                positions, rhos = [], []
                for d in range(draws):
                    pos, rho = first_good_position(variant, X, K, cost, good, n, d)
                    positions.append(pos)
                    if rho is not None:
                        rhos.append(rho)
                rho = float(np.mean(rhos)) if rhos else math.nan
                cells.append((t.label, statistics.median(positions), rho))
            print(f"{name:10s} n={n:3d} " + "  ".join(f"{lbl[:14]}:{p:6.1f}/{r:+.2f}" for lbl, p, r in cells)
                  + f"  | median {statistics.median(p for _, p, _ in cells):6.1f}")


if __name__ == "__main__":
    main()
