"""A/B of the CPU ``outer_order`` knob on one graph task, everything else the tuned config.

    python bench/cpu_models/outer_order/ab_outer_order.py gelu bert_layer BERT.db

takes the best record of the first task of the zoo model whose label contains "gelu" (the BERT
layer's FFN1) from the DB, builds it with outer_order 0 and 1 (same tiles), checks both give the
same output on random inputs, and times each, alternating, hot and after a 256 MiB write that evicts
the caches (ms, median of 15 calls).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import numpy as np  # noqa: E402

from autotune.graph.compiler import prepare, render  # noqa: E402
from autotune.graph.zoo import make_model  # noqa: E402
from autotune.measure.builder import BuildOptions  # noqa: E402
from autotune.measure.harness import full_source  # noqa: E402
from autotune.prepack import prepack_array  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402
from schedules import make_space  # noqa: E402


def load_kernel(prog, arrays: list[np.ndarray], name: str) -> tuple:  # noqa: ANN001 - a Program
    """Build a rendered CPU program alone, bind copies of ``arrays`` (pre-tiled where the program
    reads a weight's tiles) and return (function, argument pointers, buffers); the output is last."""
    base = f"{tempfile.gettempdir()}/{name}"
    Path(base + ".c").write_text(full_source(prog.kernel_name, prog.source))
    subprocess.run(["gcc", *BuildOptions().flags, base + ".c", "-o", base + ".so"], check=True)
    pre = dict(prog.prepack or ())
    bufs = [np.ascontiguousarray(prepack_array(a, pre[i]) if i in pre else a).copy()
            for i, a in enumerate(arrays)]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    return getattr(ctypes.CDLL(base + ".so"), prog.kernel_name), ptrs, bufs


def main() -> None:
    label, model, db_path = sys.argv[1], sys.argv[2], sys.argv[3]
    target = cpu_target()
    task = next(t for t in prepare(make_model(model)).tasks if label in t.label)
    wl = task.workload
    rec = TuningDatabase(db_path, create=False).best(wl.key, target.key)
    space = make_space(wl, target)
    print(task.label, rec.config, [k.name for k in space.knobs])
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in wl.args]
    calls, outs = {}, {}
    for order in (0, 1):
        prog = render(wl, space.steps(dict(rec.config, outer_order=order)), target)
        fn, ptrs, bufs = load_kernel(prog, arrays, f"ab_outer_order_{order}")
        fn(ptrs)
        outs[order], calls[order] = bufs[-1].copy(), (fn, ptrs, bufs)
    print("same:", np.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4))
    evict = np.ones(64 << 20, np.float32)

    def ms(order: int, cold: bool) -> float:
        fn, ptrs, _ = calls[order]
        times = []
        for _ in range(15):
            if cold:
                np.add(evict, 1.0, out=evict)
            t0 = time.perf_counter()
            fn(ptrs)
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e3

    for _ in range(3):
        cells = [f"oo={o} {'cold' if c else 'hot'} {ms(o, c):.3f}" for c in (False, True) for o in (0, 1)]
        print(" ".join(cells))


if __name__ == "__main__":
    main()
