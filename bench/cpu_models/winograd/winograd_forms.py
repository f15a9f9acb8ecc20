"""Per stride-1 3x3 convolution of ResNet-18: the best recorded time of the direct form and of
each Winograd form (input transform + GEMM + output transform), from a records DB or export.

    python bench/cpu_models/winograd/winograd_forms.py DB_OR_JSONL.gz
"""

import math
import sys

from autotune.graph.compiler import _node_costs, choose_forms, load_model, prepare
from autotune.graph.winograd import SUFFIXES, TILE_SIZES
from autotune.search.replay import open_records
from autotune.target import cpu_target


def main() -> None:
    db, target, g = open_records(sys.argv[1]), cpu_target(), load_model("zoo:resnet18")
    direct = _node_costs(prepare(g, "NHWC"), target, db)
    forms = {m: prepare(g, "NHWC", forms=f"winograd{m}") for m in TILE_SIZES}
    costs = {m: _node_costs(p, target, db) for m, p in forms.items()}
    convs = forms[TILE_SIZES[0]].winograd_convs
    print(f"{'conv':10} {'out':>12} {'direct':>8} " + " ".join(f"{'F' + str(m):>28}" for m in TILE_SIZES))
    for c in convs:
        shape = "x".join(map(str, forms[TILE_SIZES[0]].graph.types[c + SUFFIXES[2]].shape[1:]))
        cols = []
        for m in TILE_SIZES:
            parts = [costs[m].get(c + s, math.inf) * 1e3 for s in SUFFIXES]
            cols.append(f"{sum(parts):6.3f} = " + " + ".join(f"{p:.3f}" for p in parts))
        row = f"{c:10} {shape:>12} {direct.get(c, math.inf) * 1e3:8.3f} "
        print(row + " ".join(f"{x:>28}" for x in cols))
    print(choose_forms(g, target, db, "NHWC", [f"winograd{m}" for m in TILE_SIZES]).describe())


if __name__ == "__main__":
    main()
