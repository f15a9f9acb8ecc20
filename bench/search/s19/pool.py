"""Pool the per-run trials to 95% of the best on the larger H200 replay set over several files:
bench_search JSON (``runs[].trials_to_target``) and trajectory.py text output (the first block's run
lists). Prints each file's median, the pooled median against random search's exact median (119 on
that set) with a bootstrap interval, and per workload the pooled median against random's exact
one for that workload.

    python bench/search/s19/pool.py FILE [FILE ...]
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import median_interval  # noqa: E402

EXACT_RANDOM = 119
# random search's exact median per workload (bench_search's 'exact' column), by label prefix
EXACT_BY_WORKLOAD = {"batch_matmul[4,254,251,502]": 54, "conv2d_nhwc[1,29,29,254,254,": 130,
                     "conv2d_nhwc[1,29,29,508,268,": 82, "dense[254,508,1004]": 1019,
                     "dense_bias_relu[508,502,1004": 109}


def runs_of(path: str) -> list[tuple[str, int]]:
    """(workload label prefix, trials) of every run in a file."""
    def prefix(label: str) -> str:
        return next(p for p in EXACT_BY_WORKLOAD if label.startswith(p))

    if path.endswith(".json"):
        with open(path) as fh:
            return [(prefix(r["workload"]), r["trials_to_target"]) for r in json.load(fh)["runs"]]
    out: list[tuple[str, int]] = []
    with open(path) as fh:
        for line in fh:
            if "pooled 95% median" in line:  # the end of the first block
                break
            if line.rstrip().endswith("]") and "] [" in line:
                out += [(prefix(line), t) for t in ast.literal_eval(line[line.rindex("] [") + 2:])]
    return out


def main() -> None:
    pooled: list[tuple[str, int]] = []
    for path in sys.argv[1:]:
        runs = runs_of(path)
        pooled += runs
        print(f"{path}: {len(runs)} runs, median {statistics.median(t for _, t in runs)}")
    ratios = []
    for wl, exact in EXACT_BY_WORKLOAD.items():
        med = statistics.median(t for w, t in pooled if w == wl)
        ratios.append(med / exact)
        print(f"  {wl:30s} median {med:6.1f} against random's exact {exact:5d}: {med / exact:.3f} x")
    med = statistics.median(t for _, t in pooled)
    lo, hi = median_interval([[t for w, t in pooled if w == wl] for wl in EXACT_BY_WORKLOAD])
    print(f"pooled: {len(pooled)} runs, median {med} = {med / EXACT_RANDOM:.3f} x random's exact "
          f"{EXACT_RANDOM} "
          f"(90% bootstrap interval {lo:g}-{hi:g} = {lo / EXACT_RANDOM:.3f}-{hi / EXACT_RANDOM:.3f} x); "
          f"median of the per-workload ratios {statistics.median(ratios):.3f} x")


if __name__ == "__main__":
    main()
