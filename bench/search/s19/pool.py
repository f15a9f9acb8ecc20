"""Pool the per-run trials to 95% of xgb (without transfer) on the larger H200 replay set over
several files: bench_search JSON (``runs[].trials_to_target``) and trajectory.py text output (the
first block's run lists). Prints each file's median and the pooled median against random search's
exact median (119 on that set).

    python bench/search/s19/pool.py FILE [FILE ...]
"""

from __future__ import annotations

import ast
import json
import statistics
import sys

EXACT_RANDOM = 119


def runs_of(path: str) -> list[int]:
    if path.endswith(".json"):
        with open(path) as fh:
            return [r["trials_to_target"] for r in json.load(fh)["runs"]]
    out: list[int] = []
    with open(path) as fh:
        for line in fh:
            if "pooled 95% median" in line:  # the end of the first block
                break
            if line.rstrip().endswith("]") and "] [" in line:
                out += ast.literal_eval(line[line.rindex("] [") + 2:])
    return out


def main() -> None:
    pooled: list[int] = []
    for path in sys.argv[1:]:
        runs = runs_of(path)
        pooled += runs
        print(f"{path}: {len(runs)} runs, median {statistics.median(runs)}")
    med = statistics.median(pooled)
    ratio = med / EXACT_RANDOM
    print(f"pooled: {len(pooled)} runs, median {med} = {ratio:.3f} x random's exact {EXACT_RANDOM}")


if __name__ == "__main__":
    main()
