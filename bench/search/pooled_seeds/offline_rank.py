"""offline_top_rank.py's study on the larger H200 replay set with trajectory.py's feature cache
(/tmp/large_feats.pkl, written on first use): median position of the first config within 5% of
the best after training on n random configs, per variant (geometric mean over workloads too).

    OMP_NUM_THREADS=1 python bench/search/pooled_seeds/offline_rank.py N[,N...] DRAWS VARIANTS_JSON
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "seeds_and_tuner_options"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "novel_picks"))
from offline_top_rank import first_good_position, space_arrays  # noqa: E402
from trajectory import FEATS, TASKS  # noqa: E402


def cell(job: tuple[dict, int, int, int]) -> int:
    variant, ti, n, d = job
    t = TASKS[ti]
    _, X, K, cost = space_arrays(t, FEATS[t.key][0])
    return first_good_position(variant, X, K, cost, cost.min() / cost >= 0.95, n, d)[0]


def main() -> None:
    ns, draws, variants = [int(x) for x in sys.argv[1].split(",")], int(sys.argv[2]), json.loads(sys.argv[3])
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for name, variant in variants.items():
            for n in ns:
                jobs = [(variant, ti, n, d) for ti in range(len(TASKS)) for d in range(draws)]
                res = pool.map(cell, jobs, chunksize=4)
                meds = [statistics.median(res[ti * draws:(ti + 1) * draws]) for ti in range(len(TASKS))]
                geo = math.exp(statistics.mean(math.log(max(m, 1)) for m in meds))
                print(f"{name:12s} n={n:3d} " + " ".join(f"{m:6.1f}" for m in meds)
                      + f" | median {statistics.median(meds):6.1f} geo {geo:6.1f}", flush=True)


if __name__ == "__main__":
    main()
