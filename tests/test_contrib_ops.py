"""onnxruntime's contrib operators (com.microsoft) import as the graph's own operators and compute
what onnxruntime computes; the forms not covered are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, zoo  # noqa: E402
from autotune.graph.frontend import UnsupportedModelError, from_onnx  # noqa: E402

MS = "com.microsoft"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("contrib"))


def _model(nodes: list, inputs: dict, outputs: list[str], consts: dict,
           shape: list[int] | None = None, opset: int = 17) -> bytes:
    """A model of ``nodes``; its outputs are declared of ``shape`` (default: the first input's)."""
    shape = shape or next(iter(inputs.values()))
    g = helper.make_graph(
        nodes, "contrib",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o in outputs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    return m.SerializeToString()


def _matches_onnxruntime(data: bytes, cache: str, seed: int = 0) -> None:
    module = compile_model(data, cache_dir=cache, verbose=False)
    feeds = module.random_inputs(np.random.default_rng(seed))
    ours = module.run(feeds)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(r).max())))


RNG = np.random.default_rng(1)
W = {"b": RNG.standard_normal(24), "g": 1 + 0.1 * RNG.standard_normal(24), "be": RNG.standard_normal(24)}
CASES = {
    "gelu": ([helper.make_node("Gelu", ["x"], ["y"], domain=MS)], ["y"], {}),
    "bias_gelu": ([helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=MS)], ["y"], {"b": W["b"]}),
    "fast_gelu": ([helper.make_node("FastGelu", ["x"], ["y"], domain=MS)], ["y"], {}),
    "fast_gelu_bias": ([helper.make_node("FastGelu", ["x", "b"], ["y"], domain=MS)], ["y"], {"b": W["b"]}),
    "quick_gelu": ([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS)], ["y"], {}),
    "quick_gelu_alpha": ([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.3)], ["y"], {}),
    "silu": ([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.0)], ["y"], {}),
    "skip_layer_norm": (
        [helper.make_node("SkipLayerNormalization", ["x", "s", "g", "be", "b"], ["y", "", "", "sum"],
                          domain=MS, epsilon=1e-5)], ["y", "sum"], W),
    "skip_layer_norm_plain": (
        [helper.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS, epsilon=1e-12)],
        ["y"], {"g": W["g"]}),
    "skip_rms_norm": (
        [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y", "", "", "sum"],
                          domain=MS, epsilon=1e-6)], ["y", "sum"], {"g": W["g"]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_contrib_elementwise_and_norms_match_onnxruntime(case: str, cache: str) -> None:
    nodes, outputs, consts = CASES[case]
    inputs = {"x": [2, 5, 24]}
    if any("s" in n.input for n in nodes):
        inputs["s"] = [2, 5, 24]
    _matches_onnxruntime(_model(nodes, inputs, outputs, consts), cache)


@pytest.mark.parametrize("op,opset", [("LayerNormalization", 14), ("SimplifiedLayerNormalization", 17)])
def test_onnxruntimes_norms_in_the_onnx_domain_match_onnxruntime(op: str, opset: int, cache: str) -> None:
    """onnxruntime registers LayerNormalization below opset 17 and SimplifiedLayerNormalization in
    the ONNX domain itself; models it saves carry them there."""
    extra = ["be"] if op == "LayerNormalization" else []
    node = helper.make_node(op, ["x", "g", *extra], ["y"], axis=-1, epsilon=1e-5)
    consts = {"g": W["g"]} | ({"be": W["be"]} if extra else {})
    _matches_onnxruntime(_model([node], {"x": [2, 5, 24]}, ["y"], consts, opset=opset), cache)


def _operand_shape(logical: list[int], batch: int, swap: int) -> list[int]:
    """The stored shape of an operand FusedMatMul reads as ``logical`` (the inverse of its view)."""
    from autotune.graph.ops.movement import operand_perm

    shape = [0] * len(logical)
    for i, p in enumerate(operand_perm(len(logical), bool(batch), bool(swap))):
        shape[p] = logical[i]
    return shape


@pytest.mark.parametrize("batch_a,batch_b,trans_a,trans_b,alpha", [
    (0, 0, 0, 0, 1.0), (0, 0, 0, 1, 0.125), (0, 0, 1, 0, 2.0), (0, 0, 1, 1, 0.5),
    (1, 0, 0, 0, 1.0), (0, 1, 0, 1, 0.25), (1, 1, 1, 0, 1.0), (1, 1, 1, 1, 0.5),
])
def test_fused_matmul_matches_onnxruntime(batch_a: int, batch_b: int, trans_a: int, trans_b: int,
                                          alpha: float, cache: str) -> None:
    a = _operand_shape([2, 3, 5, 7], batch_a, trans_a)
    b = _operand_shape([2, 3, 7, 6], batch_b, trans_b)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=trans_a, transB=trans_b,
                            transBatchA=batch_a, transBatchB=batch_b, alpha=alpha)
    _matches_onnxruntime(_model([node], {"a": a, "b": b}, ["y"], {}, [2, 3, 5, 6]), cache)


@pytest.mark.parametrize("activation,params,z", [
    ("Relu", [], False), ("Relu", [], True), ("Clip", [0.0, 6.0], False), ("Sigmoid", [], False),
    ("Tanh", [], False), ("LeakyRelu", [0.1], True), ("HardSigmoid", [0.2, 0.5], False),
])
def test_fused_conv_matches_onnxruntime(activation: str, params: list, z: bool, cache: str) -> None:
    rng = np.random.default_rng(2)
    consts = {"w": rng.standard_normal((6, 4, 3, 3)) * 0.3, "b": rng.standard_normal(6)}
    extra = {"activation_params": params} if params else {}
    node = helper.make_node("FusedConv", ["x", "w", "b"] + (["z"] if z else []), ["y"], domain=MS,
                            activation=activation, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                            **extra)
    inputs = {"x": [1, 4, 9, 9]} | ({"z": [1, 6, 5, 5]} if z else {})
    _matches_onnxruntime(_model([node], inputs, ["y"], consts, [1, 6, 5, 5]), cache)


@pytest.mark.parametrize("activation,params,trans_b", [
    ("Relu", {}, 0), ("Relu", {}, 1), ("LeakyRelu", {"activation_alpha": 0.1}, 1), ("Tanh", {}, 0),
    ("HardSigmoid", {"activation_alpha": 0.2, "activation_beta": 0.5}, 0),
])
def test_fused_gemm_matches_onnxruntime(activation: str, params: dict, trans_b: int, cache: str) -> None:
    rng = np.random.default_rng(3)
    consts = {"w": rng.standard_normal((6, 9) if trans_b else (9, 6)) * 0.3, "c": rng.standard_normal(6)}
    node = helper.make_node("FusedGemm", ["x", "w", "c"], ["y"], domain=MS, activation=activation,
                            alpha=0.7, beta=1.5, transB=trans_b, **params)
    _matches_onnxruntime(_model([node], {"x": [4, 9]}, ["y"], consts, [4, 6]), cache)


@pytest.mark.parametrize("node,why", [
    (helper.make_node("SkipLayerNormalization", ["x", "x", "g"], ["y", "mean"], domain=MS), "mean"),
    (helper.make_node("FusedConv", ["x", "x"], ["y"], domain=MS, activation="Selu"), "Selu"),
    (helper.make_node("FusedGemm", ["x", "x"], ["y"], domain=MS, activation="LeakyRelu"), "LeakyRelu"),
    (helper.make_node("EmbedLayerNormalization", ["x"], ["y"], domain=MS),
     "com.microsoft.EmbedLayerNormalization"),
])
def test_contrib_forms_not_covered_are_refused_by_name(node, why: str) -> None:  # noqa: ANN001
    outs = [o for o in node.output if o]
    data = _model([node], {"x": [4, 4]}, outs, {"g": np.ones(4)})
    with pytest.raises(UnsupportedModelError, match=why):
        from_onnx(data)


@pytest.mark.parametrize("spec", ["zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64",
                                  "zoo:resnet18?image=32,width=8"], ids=["bert", "resnet"])
def test_models_onnxruntime_optimized_compile_and_match(spec: str, tmp_path, cache: str) -> None:  # noqa: ANN001
    """A zoo model saved by onnxruntime at its extended optimization level (Gelu,
    SkipLayerNormalization, FusedMatMul, FusedConv in place of their subgraphs) compiles and
    matches onnxruntime."""
    src = zoo.make_model(spec).SerializeToString()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    data = (tmp_path / "optimized.onnx").read_bytes()
    fused = {n.op_type for n in onnx.load_from_string(data).graph.node if n.domain == MS}
    assert fused, "onnxruntime fused nothing: the test would not test the contrib operators"
    _matches_onnxruntime(data, cache, seed=4)


def test_a_model_from_onnxruntimes_transformer_optimizer_compiles_and_matches(tmp_path, cache: str) -> None:  # noqa: ANN001
    """The zoo's BERT layer through onnxruntime's transformer optimizer (``optimize_model``) compiles
    and matches onnxruntime."""
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    src = tmp_path / "bert.onnx"
    src.write_bytes(zoo.make_model("zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64").SerializeToString())
    optimized = optimizer.optimize_model(str(src), model_type="bert", num_heads=2, hidden_size=32,
                                         opt_level=0)
    optimized.save_model_to_file(str(tmp_path / "optimized.onnx"))
    data = (tmp_path / "optimized.onnx").read_bytes()
    ops = {(n.domain, n.op_type) for n in onnx.load_from_string(data).graph.node}
    assert any(d == MS for d, _ in ops), f"nothing fused: {sorted(ops)}"
    _matches_onnxruntime(data, cache, seed=6)


def _float_net(path: str) -> None:
    """A small network of the layers onnxruntime's static quantizer writes QOperator nodes for."""
    rng = np.random.default_rng(3)
    w = {"w1": rng.normal(0, 0.3, (8, 4, 3, 3)), "w2": rng.normal(0, 0.3, (8, 8, 1, 1)),
         "w3": rng.normal(0, 0.3, (8, 8, 3, 3)), "fc": rng.normal(0, 2.0, (16, 5)),
         "b1": rng.normal(0, 0.01, 8), "fcb": rng.normal(0, 0.01, 5)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["r1", "c2"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("LeakyRelu", ["p"], ["l"], alpha=0.1),
        helper.make_node("Conv", ["l", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c3"], ["g"]),
        helper.make_node("Mul", ["l", "g"], ["m"]),
        helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "l"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])
    g = helper.make_graph(nodes, "qnet", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_model_quantized_by_onnxruntime_in_each_format_matches_it(tmp_path, cache: str) -> None:  # noqa: ANN001
    """onnxruntime's quantizer, statically in its QOperator format (QLinearConv, QLinearAdd,
    QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool, QLinearConcat,
    QLinearGlobalAveragePool, QGemm, an int8 MaxPool) and its QDQ format, and dynamically
    (ConvInteger, MatMulInteger): each compiles and stays within two quantization steps of
    onnxruntime's output (the steps onnxruntime's own arithmetic rounds to one side or the other)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    src = str(tmp_path / "net.onnx")
    _float_net(src)

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.feeds = iter([{"x": rng.standard_normal((1, 4, 12, 12)).astype(np.float32)}
                               for _ in range(8)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    paths = {}
    for fmt in (QuantFormat.QOperator, QuantFormat.QDQ):
        paths[fmt.name] = str(tmp_path / f"net.{fmt.name}.onnx")
        quantize_static(src, paths[fmt.name], Calibration(), quant_format=fmt,
                        activation_type=QuantType.QUInt8)
    paths["dynamic"] = str(tmp_path / "net.dynamic.onnx")
    quantize_dynamic(src, paths["dynamic"])
    ops = {n.op_type for n in onnx.load(paths["QOperator"]).graph.node}
    assert {"QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
            "QLinearAveragePool", "QLinearConcat", "QLinearGlobalAveragePool", "QGemm", "MaxPool"} <= ops, ops
    for kind, path in paths.items():
        module = compile_model(path, cache_dir=cache, verbose=False)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for seed in range(3):
            feeds = module.random_inputs(np.random.default_rng(seed))
            (got,), (want,) = module.run(feeds), session.run(None, feeds)
            (other,) = session.run(None, module.random_inputs(np.random.default_rng(seed + 10)))
            # the static formats' outputs are whole steps of the output's scale; the dynamic one's float
            tolerance = 2.01 * _output_scale(path) if kind != "dynamic" else 0.03 * float(np.abs(want).max())
            assert np.abs(got - want).max() <= tolerance, (kind, seed, got, want)
            assert np.abs(other - want).max() > 2 * tolerance  # another input: a check that could fail


def _output_scale(path: str) -> float:
    """The scale of the DequantizeLinear that gives a quantized model its float output."""
    m = onnx.load(path)
    (last,) = [n for n in m.graph.node if m.graph.output[0].name in n.output]
    return float(numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == last.input[1])))
