"""Pool the per-run trials to 95% of the best on the larger H200 replay set over several files:
bench_search JSON (``runs[].trials_to_target``) and trajectory.py text output (the first block's run
lists). Prints each file's median, the pooled median against random search's exact median (119 on
that set) with a bootstrap interval, and per workload the pooled median against random's exact
one for that workload.

    python bench/search/pooled_seeds/pool.py FILE [FILE ...]
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import median_interval, random_search_median  # noqa: E402

from autotune.search.replay import ReplayDB  # noqa: E402

REPLAY = "tests/data/replay_cuda_large.jsonl.gz"


def exact_medians() -> tuple[dict[str, int], int]:
    """Random search's exact median trials to 95% per workload (by the first 28 characters of its
    label, as trajectory.py prints it) and pooled over the set, as bench_search computes them."""
    spaces = {t.label[:28]: (len(t.records), t.good_count(0.95)) for t in ReplayDB(REPLAY).tasks()}
    return ({w: random_search_median([sp]) for w, sp in spaces.items()},
            random_search_median(list(spaces.values())))


def runs_of(path: str) -> list[tuple[str, int]]:
    """(workload label prefix, trials) of every run in a file."""
    if path.endswith(".json"):
        with open(path) as fh:
            return [(r["workload"][:28], r["trials_to_target"]) for r in json.load(fh)["runs"]]
    out: list[tuple[str, int]] = []
    with open(path) as fh:
        for line in fh:
            if "pooled 95% median" in line:  # the end of the first block
                break
            if line.rstrip().endswith("]") and "] [" in line:
                out += [(line[:line.index(" [")], t) for t in ast.literal_eval(line[line.rindex("] [") + 2:])]
    return out


def main() -> None:
    by_workload, exact_all = exact_medians()
    pooled: list[tuple[str, int]] = []
    for path in sys.argv[1:]:
        runs = runs_of(path)
        pooled += runs
        print(f"{path}: {len(runs)} runs, median {statistics.median(t for _, t in runs)}")
    ratios = []
    for wl, exact in by_workload.items():
        med = statistics.median(t for w, t in pooled if w == wl)
        ratios.append(med / exact)
        print(f"  {wl:30s} median {med:6.1f} against random's exact {exact:5d}: {med / exact:.3f} x")
    med = statistics.median(t for _, t in pooled)
    lo, hi = median_interval([[t for w, t in pooled if w == wl] for wl in by_workload])
    print(f"pooled: {len(pooled)} runs, median {med} = {med / exact_all:.3f} x random's exact {exact_all} "
          f"(90% bootstrap interval {lo:g}-{hi:g} = {lo / exact_all:.3f}-{hi / exact_all:.3f} x); "
          f"median of the per-workload ratios {statistics.median(ratios):.3f} x")


if __name__ == "__main__":
    main()
