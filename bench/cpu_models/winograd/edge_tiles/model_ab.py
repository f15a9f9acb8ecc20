"""The model compiled from two tuning databases that differ only in the records of its Winograd
output transforms: ``BEFORE`` measured them when a guarded copy ran as a scalar loop, ``AFTER``
again with today's vectorizer (the same compiler builds both modules; a record that does not
unroll compiles to the same code either way). Each convolution takes the form its database
records as fastest. Both checked against onnxruntime and timed with it in interleaved rounds.

    python bench/cpu_models/winograd/edge_tiles/model_ab.py MODEL BEFORE.db AFTER.db OUT.json [ROUNDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from interleaved import ab_run, estimated_ms, save  # noqa: E402

from autotune.cli.model import build_module, load  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402


def main() -> None:
    spec, before, after, out_path = sys.argv[1:5]
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 12
    target, model = cpu_target(), load(spec, [])
    modules = {}
    for name, path in (("before", before), ("after", after)):
        with TuningDatabase(path, readonly=True) as db:
            modules[name] = build_module(model, target, db, "NHWC")
    result, _ = ab_run(model, modules, "before", "after", rounds, model=spec, before=before, after=after,
                       rounds=rounds, summaries={k: m.summary.line() for k, m in modules.items()},
                       estimated_ms=estimated_ms(modules))
    save(result, out_path, ("rounds_ms", "summaries"))


if __name__ == "__main__":
    main()
