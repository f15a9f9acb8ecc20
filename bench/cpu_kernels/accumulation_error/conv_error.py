"""How far single convolutions compiled untuned (empty database) and onnxruntime are from a float64
evaluation: rms and max error relative to the largest output, on fresh random inputs.

    python bench/cpu_kernels/accumulation_error/conv_error.py > conv_error.txt
"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from autotune.graph import compile_model, from_onnx

rng = np.random.default_rng(0)
for (c, k, hw, ks) in [(1024, 256, 14, 1), (64, 64, 56, 3), (256, 256, 14, 3)]:
    w = (rng.standard_normal((k, c, ks, ks)) / np.sqrt(c * ks * ks)).astype(np.float32)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[ks // 2] * 4)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, k, hw, hw))],
                          initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    o = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = compile_model(from_onnx(m), db=None, verbose=False, workers=2).run({"x": x})[0]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ks // 2,) * 2, (ks // 2,) * 2))
    ref = np.zeros((1, k, hw, hw))
    for i in range(ks):
        for j in range(ks):
            ref += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + hw, j:j + hw], w[:, :, i, j].astype(np.float64))
    s = np.abs(ref).max()
    eo, ey = np.abs(o - ref) / s, np.abs(y - ref) / s
    ro, ry = np.sqrt((eo**2).mean()), np.sqrt((ey**2).mean())
    print(c, k, hw, ks, f"ORT rms {ro:.2e} max {eo.max():.2e} | ours rms {ry:.2e} max {ey.max():.2e}")
