"""Where the rounding of a deep model builds up: the model cut after each named value (onnx.utils
Extractor), compiled untuned, and it and onnxruntime set against the reference interpreter in float64.

    python bench/cpu_kernels/accumulation_error/fcn_stages.py MODEL.onnx VALUE...
    (MODEL: bench/gallery/exports/fcn_resnet50.legacy.onnx; VALUE: a value's name in it)
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from autotune.graph import compile_model, from_onnx
from autotune.graph.interpreter import run_graph
from autotune.graph.passes import optimize

f = sys.argv[1]
m = onnx.shape_inference.infer_shapes(onnx.load(f))
inp = m.graph.input[0].name
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
ends = sys.argv[2:]
for end in ends:
    sub = Extractor(m).extract_model([inp], [end])
    g = from_onnx(sub)
    ref = run_graph(optimize(g, "NCHW"), {inp: x.astype(np.float64)})[0]
    session = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    o = session.run(None, {inp: x})[0]
    y = compile_model(g, db=None, verbose=False, workers=2).run({inp: x})[0]
    s = np.abs(ref).max()
    eo, ey = np.abs(o - ref) / s, np.abs(y - ref) / s
    label = end.split("/")[-2] if "/" in end else end
    print(label, f"ORT max {eo.max():.2e} med {np.median(eo):.2e} |",
          f"ours max {ey.max():.2e} med {np.median(ey):.2e}", flush=True)
