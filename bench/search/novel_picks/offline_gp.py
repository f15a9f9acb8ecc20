"""Offline study: small-sample models for a fully measured space. Train on n random configs,
rank the rest, report the median position of the first config within 5% of the best.

    python bench/search/novel_picks/offline_gp.py REPLAY N[,N...] DRAWS VARIANT[,VARIANT...]

Variants: gp-knob, gp-ir, gp-both (knob + IR columns), ridge-onehot, xgb (the tuner's default
"both" scores), with optional ":ucb" (mean + std) for the GPs.
"""

from __future__ import annotations

import math
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import tasks_features  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "seeds_and_tuner_options"))
from offline_top_rank import score, space_arrays  # noqa: E402

from autotune.search.replay import ReplayDB  # noqa: E402


def standardize(F: np.ndarray, tr: np.ndarray) -> np.ndarray:
    m, s = F[tr].mean(axis=0), F[tr].std(axis=0)
    keep = F.std(axis=0) > 0
    return ((F - m) / np.where(s > 0, s, F.std(axis=0) + 1e-9))[:, keep]


def gp_scores(F: np.ndarray, y: np.ndarray, tr: np.ndarray, te: np.ndarray, ucb: float) -> np.ndarray:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    Z = standardize(F, tr)
    kernel = ConstantKernel(1.0) * Matern(length_scale=math.sqrt(Z.shape[1]), nu=2.5) + WhiteKernel(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0).fit(Z[tr], y[tr])
        mu, sd = gp.predict(Z[te], return_std=True)
    return mu + ucb * sd


_LEVELS: dict = {}


def levels(t) -> np.ndarray:
    """Per record of t (in t.records order): for split knobs of each length, the sum over knobs of
    log2(factor j), i.e. log2 of the product of all axes' factors at level j (blocks, threads, ...)."""
    if t.key not in _LEVELS:
        rows = []
        for r in t.records.values():
            row = []
            for length in (4, 2):
                ks = [k for k in t.space.knobs if getattr(k, "parts", 0) == length]
                for j in range(length):
                    row.append(sum(math.log2(r.config[k.name][j]) for k in ks))
            rows.append(row)
        _LEVELS[t.key] = np.array(rows)
    return _LEVELS[t.key]


def keys_idx(t, keys) -> np.ndarray:
    pos = {k: i for i, k in enumerate(t.records)}
    return np.array([pos[k] for k in keys])


def onehot(K: np.ndarray) -> np.ndarray:
    cols = []
    for j in range(K.shape[1]):
        for v in np.unique(K[:, j]):
            cols.append(K[:, j] == v)
    return np.column_stack(cols).astype(float)


def main() -> None:
    replay, ns, draws = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3])
    variants = sys.argv[4].split(",")
    tasks = ReplayDB(replay).tasks()
    feats = tasks_features(tasks)
    for variant in variants:
        kind, _, acq = variant.partition(":")
        for n in ns:
            cells = []
            for t in tasks:
                keys, X, K, cost = space_arrays(t, feats[t.key][0])
                y = -np.log(cost)
                good = cost.min() / cost >= 0.95
                positions = []
                for d in range(draws):
                    rng = np.random.default_rng(1000 * d + n)
                    idx = rng.permutation(len(keys))
                    tr, te = idx[:n], idx[n:]
                    if good[tr].any():
                        positions.append(0)
                        continue
                    if kind in ("xgb", "xgb-lev"):  # the tuner's "both" scores, as offline_top_rank
                        knob = K if kind == "xgb" else np.column_stack([K, levels(t)[keys_idx(t, keys)]])
                        sc = score({"kind": "both"}, X, knob, cost, tr, te, d)
                    elif kind == "ridge-onehot":
                        H = onehot(K)
                        A = H[tr]
                        w = np.linalg.solve(A.T @ A + 1.0 * np.eye(A.shape[1]), A.T @ (y[tr] - y[tr].mean()))
                        sc = H[te] @ w
                    else:
                        F = {"gp-knob": K, "gp-ir": X, "gp-both": np.column_stack([K, X])}[kind]
                        sc = gp_scores(F, y, tr, te, 1.0 if acq == "ucb" else 0.0)
                    order = te[np.argsort(-sc, kind="stable")]
                    positions.append(int(np.flatnonzero(good[order])[0]) + 1)
                cells.append((t.label, statistics.median(positions)))
            print(f"{variant:14s} n={n:3d} " + "  ".join(f"{lbl[:14]}:{p:6.1f}" for lbl, p in cells)
                  + f"  | median {statistics.median(p for _, p in cells):6.1f}", flush=True)


if __name__ == "__main__":
    main()
