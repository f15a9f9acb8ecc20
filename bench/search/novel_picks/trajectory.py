"""Where a model-guided run spends its trials: per workload of the larger H200 replay set, the
median trial at which the best so far first reaches 70 / 80 / 85 / 90 / 95% of the best, and the
pooled median trials to 95% (xgb without transfer, as bench_search's "xgb").

    OMP_NUM_THREADS=1 python bench/search/novel_picks/trajectory.py TUNER_OPTIONS_JSON SEEDS [FIRST_SEED]

Features are cached in /tmp/large_feats.pkl (lowering every config takes ~100 s here).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import tasks_features  # noqa: E402

from autotune.search.replay import ReplayDB, replay_tune, trials_to_reach  # noqa: E402

REPLAY = ReplayDB("tests/data/replay_cuda_large.jsonl.gz")
TASKS = REPLAY.tasks()
CACHE = "/tmp/large_feats.pkl"
LEVELS = (0.7, 0.8, 0.85, 0.9, 0.95)
CAP = 600


def features() -> dict:
    if os.path.exists(CACHE):
        with open(CACHE, "rb") as fh:
            return pickle.load(fh)
    feats = tasks_features(TASKS)
    with open(CACHE, "wb") as fh:
        pickle.dump(feats, fh)
    return feats


FEATS = features()
OPTS: dict = {}  # the tuner options of this run (main's first argument)


def run(item: tuple[int, int]) -> tuple[str, list[int]]:
    i, seed = item
    t = TASKS[i]
    costs = replay_tune(REPLAY, t, "xgb", CAP, seed=seed, transfer=False,
                        feature_cache=dict(FEATS[t.key][0]), tuner_options=OPTS,
                        stop_when=lambda c: trials_to_reach(c, t.best_s, 0.95) is not None)
    return t.label, [trials_to_reach(costs, t.best_s, f) or CAP + 1 for f in LEVELS]


def main() -> None:
    OPTS.update(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    items = [(i, s) for i in range(len(TASKS)) for s in range(first, first + seeds)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        res = pool.map(run, items, chunksize=1)
    hits = []
    for t in TASKS:
        rows = [r for label, r in res if label == t.label]
        print(t.label[:28], [statistics.median(r[i] for r in rows) for i in range(len(LEVELS))],
              [r[-1] for r in rows])
        hits += [r[-1] for r in rows]
    print(OPTS, "pooled 95% median", statistics.median(hits), flush=True)


if __name__ == "__main__":
    main()
