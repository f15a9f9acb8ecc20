"""Which picks of a model-guided batch reach 95% of the best: per pick category (the model's top
picks, its `novel` picks kept away from measured configs, epsilon-random) and position in the
batch, on the larger H200 replay set (xgb without transfer, as bench_search's "xgb").

    OMP_NUM_THREADS=1 python bench/search/current_default/hits.py TUNER_OPTIONS_JSON SEEDS [FIRST_SEED [JSON]]

Prints, per category, how many picks were made before the run's first hit and how many of them
hit (the hit rate each category earns while it matters), the category of each run's first hit,
and the pooled median trials to 95%; JSON gets each run's trials to 95% by workload and seed.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "novel_picks"))
import trajectory as tr  # noqa: E402

from autotune.search.replay import replay_tune, trials_to_reach  # noqa: E402
from autotune.search.xgb_tuner import ModelTuner  # noqa: E402
from records import config_key  # noqa: E402

TAGS: dict[str, str] = {}  # config key -> category of the pick (filled while a run proposes)


def _tagging(cls: type) -> None:
    take, rand = cls._take, cls._random_unseen

    def tagged_take(self, ranked, k, taken, picked, away=()):
        before = len(picked)
        take(self, ranked, k, taken, picked, away)
        for c in picked[before:]:
            TAGS[config_key(c)] = "novel" if away else "top"

    def tagged_random(self, n, taken, max_misses=500):
        out = rand(self, n, taken, max_misses)
        for c in out:
            TAGS.setdefault(config_key(c), "random" if self.trained else "first")
        return out

    cls._take, cls._random_unseen = tagged_take, tagged_random


def run(item: tuple[int, int]) -> tuple[str, list[tuple[str, int, bool]], int, int]:
    i, seed = item
    t = tr.TASKS[i]
    TAGS.clear()
    order: list[str] = []
    orig = ModelTuner.next_batch

    def next_batch(self, n):
        out = orig(self, n)
        order.extend(TAGS.get(config_key(c), "?") for c in out)
        return out

    ModelTuner.next_batch = next_batch
    try:
        costs = replay_tune(tr.REPLAY, t, "xgb", tr.CAP, seed=seed, transfer=False,
                            feature_cache=dict(tr.FEATS[t.key][0]), tuner_options=tr.OPTS,
                            stop_when=lambda c: trials_to_reach(c, t.best_s, 0.95) is not None)
    finally:
        ModelTuner.next_batch = orig
    first = trials_to_reach(costs, t.best_s, 0.95) or tr.CAP + 1
    picks = [(cat, j % 8, c > 0 and t.best_s / c >= 0.95) for j, (cat, c) in enumerate(zip(order, costs))]
    return t.label, picks, first, seed


def main() -> None:
    _tagging(ModelTuner)
    tr.OPTS.update(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    items = [(i, s) for i in range(len(tr.TASKS)) for s in range(first, first + seeds)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        res = pool.map(run, items, chunksize=1)
    made, hit = collections.Counter(), collections.Counter()
    by_pos = collections.defaultdict(lambda: [0, 0])
    first_cat = collections.Counter()
    for _, picks, n, _ in res:
        for cat, pos, ok in picks:
            made[cat] += 1
            hit[cat] += ok
            if cat != "first":
                by_pos[(cat, pos)][0] += 1
                by_pos[(cat, pos)][1] += ok
        if n <= len(picks):
            first_cat[picks[n - 1][0]] += 1
    for cat in sorted(made):
        print(f"{cat:7s} picks {made[cat]:5d} hits {hit[cat]:4d} rate {hit[cat] / made[cat]:.3f}"
              f"  first hits {first_cat[cat]}")
    for (cat, pos), (m, h) in sorted(by_pos.items()):
        print(f"  {cat:7s} pos {pos} picks {m:4d} rate {h / m:.3f}")
    print(tr.OPTS, "pooled 95% median", statistics.median(r[2] for r in res), flush=True)
    if len(sys.argv) > 4:
        Path(sys.argv[4]).write_text(json.dumps([[label, seed, n] for label, _, n, seed in res]))


if __name__ == "__main__":
    main()
