"""Per 3x3 convolution of a model (default ResNet-18): the best recorded time of the direct form
and of each Winograd form (input transform + GEMM + output transform), from a records DB or export.

    python bench/cpu_models/winograd/winograd_forms.py DB_OR_JSONL.gz [MODEL]
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from autotune.graph.compiler import _node_costs, choose_forms, load_model, prepare  # noqa: E402
from autotune.graph.winograd import SUFFIXES, TILE_SIZES  # noqa: E402
from autotune.search.replay import open_records  # noqa: E402
from autotune.target import cpu_target  # noqa: E402


def main() -> None:
    spec = sys.argv[2] if len(sys.argv) > 2 else "zoo:resnet18"
    db, target, g = open_records(sys.argv[1]), cpu_target(), load_model(spec)
    direct = _node_costs(prepare(g, "NHWC"), target, db)
    forms = {m: prepare(g, "NHWC", forms=f"winograd{m}") for m in TILE_SIZES}
    costs = {m: _node_costs(p, target, db) for m, p in forms.items()}
    convs = forms[TILE_SIZES[0]].winograd_convs
    print(f"{'conv':10} {'out':>12} {'direct':>8} " + " ".join(f"{'F' + str(m):>28}" for m in TILE_SIZES))
    for c in convs:
        shape = "x".join(map(str, forms[TILE_SIZES[0]].graph.types[c + SUFFIXES[2]].shape[1:]))
        cols = []
        for m in TILE_SIZES:
            parts = [costs[m].get(c + s, (None, math.inf))[1] * 1e3 for s in SUFFIXES]
            cols.append(f"{sum(parts):6.3f} = " + " + ".join(f"{p:.3f}" for p in parts))
        row = f"{c:10} {shape:>12} {direct.get(c, (None, math.inf))[1] * 1e3:8.3f} "
        print(row + " ".join(f"{x:>28}" for x in cols))
    print(choose_forms(g, target, db, "NHWC", [f"winograd{m}" for m in TILE_SIZES]).describe())


if __name__ == "__main__":
    main()
