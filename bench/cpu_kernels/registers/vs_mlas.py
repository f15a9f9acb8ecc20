"""One BERT-layer GEMM task, our kernels against onnxruntime's MatMul+Add on the same shapes,
timed alternately in one process (ms per call: median and min of 20 calls, several rounds).

    python bench/cpu_kernels/registers/vs_mlas.py gelu RECORDS.jsonl.gz [CONFIG_JSON ...]

Configs are the task's best record, then the best record with the given knobs replaced. The
onnxruntime side computes MatMul+Add only (no epilogue), so it is the easier side to be fast.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cpu_models" / "outer_order"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from ab_outer_order import load_kernel  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph.compiler import prepare, render  # noqa: E402
from autotune.graph.zoo import make_model  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import TuningDatabase  # noqa: E402
from schedules import make_space  # noqa: E402


def ort_matmul_add(a: np.ndarray, w: np.ndarray, bias: np.ndarray):  # noqa: ANN201
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["out"])],
        "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"a": a})


def main() -> None:
    label, records = sys.argv[1], sys.argv[2]
    target = cpu_target()
    task = next(t for t in prepare(make_model("bert_layer")).tasks if label in t.label)
    wl = task.workload
    db = TuningDatabase(Path(tempfile.mkdtemp()) / "r.db")
    with gzip.open(records, "rt") as fh:
        db.import_jsonl(fh)
    best = db.best(wl.key, target.key)
    space = make_space(wl, target)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(a.shape).astype(np.float32) for a in wl.args]
    a, w, bias = arrays[0], arrays[1], arrays[2]
    runs = {"onnxruntime": ort_matmul_add(a, w, bias)}
    print(task.label, f"tuned {best.mean_s * 1e3:.3f} ms", [tuple(x.shape) for x in arrays])
    for n, extra in enumerate([{}] + [json.loads(x) for x in sys.argv[3:]]):
        config = dict(best.config, **extra)
        assert space.is_valid(config), space.violated(config)
        fn, ptrs, bufs = load_kernel(render(wl, space.steps(config), target), arrays, f"vs_mlas_{n}")
        runs[f"config{n} {json.dumps(extra)}"] = (lambda f, p: lambda: f(p))(fn, ptrs)

    def ms(call) -> tuple[float, float]:  # noqa: ANN001
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e3, float(np.min(times)) * 1e3

    for _ in range(3):
        for name, call in runs.items():
            med, low = ms(call)
            print(f"  {med:7.3f} med {low:7.3f} min  {name}", flush=True)
        print()


if __name__ == "__main__":
    main()
