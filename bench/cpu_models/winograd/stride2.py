"""Do stride-2 3x3 convolutions as Winograd make a tuned model faster? The model compiled twice
from one tuning database, once with Winograd for stride-1 convolutions only (``winograd.STRIDES``
narrowed to 1 while it builds) and once for both strides, each convolution in whichever form the
database records as fastest; both checked against onnxruntime and timed with it in interleaved
rounds in one process.

    python bench/cpu_models/winograd/stride2.py MODEL DB OUT.json [ROUNDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interleaved import ab_run, estimated_ms, save  # noqa: E402

import autotune.graph.winograd as winograd  # noqa: E402
from autotune.cli.model import build_module, load  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, db_path, out_path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    target, model = cpu_target(), load(spec, [])
    strides = winograd.STRIDES
    modules = {}
    with TuningDatabase(db_path, readonly=True) as db:
        for name, allowed in (("stride1", (1,)), ("stride1_2", strides)):
            winograd.STRIDES = allowed  # eligible() reads it when the forms are chosen
            try:
                modules[name] = build_module(model, target, db, "NHWC")
            finally:
                winograd.STRIDES = strides
    result, _ = ab_run(model, modules, "stride1", "stride1_2", rounds, model=spec, db=db_path,
                       rounds=rounds, summaries={k: m.summary.line() for k, m in modules.items()},
                       estimated_ms=estimated_ms(modules))
    save(result, out_path, ("rounds_ms", "summaries"))


if __name__ == "__main__":
    main()
