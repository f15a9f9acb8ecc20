"""Table of real-CPU runs (bench_search --real JSON): per seed, xgb@200 against random@600 by the
best tuning measurement and by the re-measured finalists, and the medians of both ratios.

    python bench/search/current_default/real_table.py FILE [FILE ...]
"""

from __future__ import annotations

import json
import statistics
import sys


def main() -> None:
    tuned, again = [], []
    print("| seed | xgb@200 | random@600 | ratio | xgb re-measured | random re-measured | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in sys.argv[1:]:
        d = json.load(open(path))
        x, r = d["results"]["xgb"], d["results"]["random"]
        t = x["best_gflops"] / r["best_gflops"]
        a = x["remeasured_best_gflops"] / r["remeasured_best_gflops"]
        tuned.append(t)
        again.append(a)
        print(f"| {d['seed']} | {x['best_gflops']:.1f} | {r['best_gflops']:.1f} | {t:.3f} | "
              f"{x['remeasured_best_gflops']:.1f} | {r['remeasured_best_gflops']:.1f} | {a:.3f} |")
    def reading(ratios: list[float]) -> str:
        return f"{statistics.median(ratios):.3f} ({sum(v >= 1 for v in ratios)} of {len(ratios)} >= 1)"

    print(f"median ratio: tuning {reading(tuned)}, re-measured {reading(again)}")

if __name__ == "__main__":
    main()
