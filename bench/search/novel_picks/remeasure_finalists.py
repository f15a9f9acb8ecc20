"""Re-measure the finalists of earlier ``bench_search.py --real`` runs with more interleaved rounds
(the 5 rounds of the run itself spread by +-25% on a 16-core host).

    python bench/search/novel_picks/remeasure_finalists.py ROUNDS RUN.json [RUN.json ...] > out.txt

Prints, per run, each finalist's median over ROUNDS and the verdict xgb >= random on the best
finalist median; writes nothing else.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from bench_search import remeasure  # noqa: E402

from autotune.measure import Builder, CpuRunner  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from autotune.te import make_workload  # noqa: E402


def main() -> None:
    rounds, paths = int(sys.argv[1]), sys.argv[2:]
    wl, target = make_workload("matmul", "1024,1024,1024"), cpu_target()
    print(f"{target.describe()}; {rounds} rounds")
    with Builder() as builder, CpuRunner() as runner:
        for path in paths:
            res = json.loads(Path(path).read_text())["results"]
            finalists = {name: [c["config"] for c in r["remeasured"]] for name, r in res.items()}
            print(f"\n{path}")
            again = remeasure(wl, target, builder, runner, finalists, rounds)
            best = {name: max(c["gflops"] for c in rows) for name, rows in again.items()}
            x, r = best["xgb"], best["random"]
            verdict = ">=" if x >= r else "<"
            print(f"verdict: xgb@200 {x:.1f} {verdict} random@600 {r:.1f} GFLOP/s ({x / r:.3f}x)", flush=True)


if __name__ == "__main__":
    main()
