"""Single IR features as a prior: per feature, the Spearman correlation with throughput over each
fully measured space, and the position of the first config within 5% of the best when the space is
sorted by that feature alone (in the direction of its correlation). Lists the features whose
correlation keeps one sign on every workload, strongest first.

    python bench/search/seeds_and_tuner_options/feature_signs.py REPLAY
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import tasks_features  # noqa: E402
from offline_top_rank import space_arrays  # noqa: E402

from autotune.search.replay import ReplayDB  # noqa: E402
from cost_model import feature_names, spearman  # noqa: E402


def main() -> None:
    names = feature_names()
    tasks = ReplayDB(sys.argv[1]).tasks()
    feats = tasks_features(tasks)
    rho: dict[str, list[float]] = {}
    position: dict[str, list[int]] = {}
    for t in tasks:
        _, X, _, cost = space_arrays(t, feats[t.key][0])
        good = cost.min() / cost >= 0.95
        ties = np.random.default_rng(0).random(len(cost))
        for j, name in enumerate(names):
            if np.ptp(X[:, j]) == 0:
                continue
            r = spearman(X[:, j], -cost)
            rho.setdefault(name, []).append(r)
            order = np.lexsort((ties, -np.sign(r or 1.0) * X[:, j]))
            position.setdefault(name, []).append(int(np.flatnonzero(good[order])[0]) + 1)
    rows = [(n, v) for n, v in rho.items()
            if len(v) == len(tasks) and (all(x > 0 for x in v) or all(x < 0 for x in v))]
    for name, v in sorted(rows, key=lambda t: -abs(np.mean(t[1])))[:25]:
        print(f"{name:38s} rho " + " ".join(f"{x:+.2f}" for x in v)
              + "  positions " + " ".join(str(p) for p in position[name]))


if __name__ == "__main__":
    main()
