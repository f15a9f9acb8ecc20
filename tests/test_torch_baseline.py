"""The PyTorch-eager baseline of ``bench.py --model --target cuda``, checked on the CPU: it runs the
imported graph node by node and must agree with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from autotune.graph import zoo  # noqa: E402
from autotune.graph.frontend import from_onnx  # noqa: E402
from autotune.graph.ir import GraphError  # noqa: E402
from autotune.graph.torch_eager import TorchModel, fastest_cudnn_mode, strict_fp32  # noqa: E402

SPECS = ["zoo:mlp?batch=2,inputs=16,hidden=32,classes=8", "zoo:resnet18?image=32,width=8",
         "zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64"]


@pytest.mark.parametrize("spec", SPECS, ids=["mlp", "resnet", "bert"])
def test_torch_eager_matches_onnxruntime(spec: str) -> None:
    proto = zoo.make_model(spec)
    graph = from_onnx(proto)
    model = TorchModel(graph, "cpu")
    rng = np.random.default_rng(11)
    feeds = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for o, r in zip(model.run(feeds), ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))
    costs = model.time(feeds, repeat=2, min_repeat_ms=1)
    assert len(costs) == 2 and all(c > 0 for c in costs)


def test_unmapped_operator_is_named() -> None:
    graph = from_onnx(zoo.make_model(SPECS[0]))
    model = TorchModel(graph, "cpu")
    model.plan[0].op = "NotAnOp"  # as if the frontend had learned an op this baseline does not map
    with pytest.raises(GraphError, match="NotAnOp"):
        model.run({n: np.ones(graph.types[n].shape, np.float32) for n in graph.inputs})


def test_training_forms_and_further_outputs_are_refused_not_computed_as_inference() -> None:
    from onnx import TensorProto, helper, numpy_helper

    c = np.ones(3, np.float32)
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)
    g = helper.make_graph([bn], "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                          initializer=[numpy_helper.from_array(c, k) for k in "sbmv"])
    graph = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)]))
    with pytest.raises(GraphError, match="BatchNormalization node .*training form"):
        TorchModel(graph, "cpu")


@pytest.mark.parametrize("slow_mode", [False, True])
def test_baseline_takes_the_faster_cudnn_setting(slow_mode: bool) -> None:
    """Neither cudnn.benchmark setting is always faster; the baseline keeps whichever was."""
    saved = torch.backends.cudnn.benchmark
    try:
        seen = []

        def measure() -> list[float]:
            mode = torch.backends.cudnn.benchmark
            seen.append(mode)
            return [3.0, 2.0, 9.0] if mode == slow_mode else [1.0, 2.5, 1.5]

        best, costs = fastest_cudnn_mode(torch, measure)
        assert seen == [False, True]
        assert best is (not slow_mode) and torch.backends.cudnn.benchmark is best
        assert costs[slow_mode] == [3.0, 2.0, 9.0]
    finally:
        torch.backends.cudnn.benchmark = saved


def test_strict_fp32_turns_tf32_off() -> None:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        strict_fp32(torch)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
