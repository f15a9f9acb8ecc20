"""Graph passes, each on its own: the rewrite happens and the numpy interpreter gives the same
outputs before and after."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnx")

from graphs import build_graph  # noqa: E402

from autotune.graph import passes, zoo  # noqa: E402
from autotune.graph.frontend import from_onnx  # noqa: E402
from autotune.graph.interpreter import run_graph  # noqa: E402
from autotune.graph.ir import Graph, Node  # noqa: E402

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def same_outputs(a: Graph, b: Graph, rtol: float = 1e-5) -> None:
    feeds = {i: f32(*a.types[i].shape) for i in a.inputs}
    for x, y in zip(run_graph(a, feeds), run_graph(b, feeds)):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * max(1.0, float(np.abs(x).max())))


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def test_fold_constants_and_dead_code() -> None:
    g = build_graph(
        [
            Node("Mul", ["c1", "c2"], ["c3"], name="m"),
            Node("Add", ["x", "c3"], ["y"], name="a"),
            Node("Relu", ["x"], ["dead"], name="r"),
        ],
        {"x": (4,)},
        ["y"],
        {"c1": np.float32(2.0), "c2": np.ones(4, np.float32)},
    )
    folded = passes.fold_constants(g)
    assert ops(folded) == ["Add"] and "c3" in folded.consts and "dead" not in folded.types
    same_outputs(g, folded)
    assert ops(passes.eliminate_dead_code(g)) == ["Mul", "Add"]


def test_batch_norm_folds_into_the_conv() -> None:
    c = 4
    bn = [np.float32(1.0) + f32(c) ** 2, f32(c), f32(c), np.float32(0.5) + f32(c) ** 2]
    g = build_graph(
        [
            Node("Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "conv"),
            Node("BatchNormalization", ["y", "s", "b", "m", "v"], ["z"], {"epsilon": 1e-5}, "bn"),
            Node("Relu", ["z"], ["out"], name="relu"),
        ],
        {"x": (1, 3, 6, 6)},
        ["out"],
        {"w": f32(c, 3, 3, 3), "s": bn[0], "b": bn[1], "m": bn[2], "v": bn[3]},
    )
    folded = passes.fold_batch_norm(g)
    assert ops(folded) == ["Conv", "Relu"] and len(folded.nodes[0].inputs) == 3
    same_outputs(g, folded)


def test_batch_norm_without_a_conv_becomes_mul_add() -> None:
    g = build_graph(
        [Node("BatchNormalization", ["x", "s", "b", "m", "v"], ["z"], {}, "bn")],
        {"x": (2, 3, 4, 4)},
        ["z"],
        {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.ones(3, np.float32)},
    )
    assert ops(passes.fold_batch_norm(g)) == ["BatchNormalization"]
    lowered = passes.lower_batch_norm(g)
    assert ops(lowered) == ["Mul", "Add"]
    same_outputs(g, lowered)


def test_gemm_becomes_matmul_with_pretransposed_weights() -> None:
    g = build_graph(
        [Node("Gemm", ["x", "w", "c"], ["y"], {"transB": 1, "alpha": 0.5, "beta": 2.0}, "gemm")],
        {"x": (3, 5)},
        ["y"],
        {"w": f32(4, 5), "c": f32(4)},
    )
    canon = passes.canonicalize_gemm(g)
    assert ops(canon) == ["MatMul", "Mul", "Add"]
    assert canon.consts[canon.nodes[0].inputs[1]].shape == (5, 4)
    same_outputs(g, canon)


def _siblings(k: int = 6) -> Graph:
    """x [2, 5, k] times three constant matrices: one plain, one + a bias, one bias + it (the
    bias first), and a fourth product of another K (x's square-rooted sum is not a sibling)."""
    return build_graph(
        [
            Node("MatMul", ["x", "wq"], ["q"], name="q"),
            Node("MatMul", ["x", "wk"], ["k0"], name="k"),
            Node("Add", ["k0", "bk"], ["k"], name="kb"),
            Node("MatMul", ["x", "wv"], ["v0"], name="v"),
            Node("Add", ["bv", "v0"], ["v"], name="vb"),
            Node("Relu", ["v"], ["vr"], name="relu"),
            Node("MatMul", ["k", "wo"], ["o"], name="o"),
        ],
        {"x": (2, 5, k)},
        ["q", "vr", "o"],
        {"wq": f32(k, 4), "wk": f32(k, 3), "bk": f32(3), "wv": f32(k, 5), "bv": f32(5), "wo": f32(3, 2)},
    )


def test_products_of_one_activation_by_constant_matrices_become_one() -> None:
    g = _siblings()
    merged = passes.merge_sibling_products(g)
    assert ops(merged) == ["MatMul", "Add", "Slice", "Slice", "Slice", "Relu", "MatMul"]
    assert merged.consts[merged.nodes[0].inputs[1]].shape == (6, 12)
    bias = merged.consts[merged.nodes[1].inputs[1]]
    want = np.concatenate([np.zeros(4, np.float32), g.consts["bk"], g.consts["bv"]])
    np.testing.assert_array_equal(bias, want)
    assert merged.outputs == g.outputs
    same_outputs(g, merged)


def test_a_lone_product_or_one_by_a_computed_matrix_is_left_alone() -> None:
    lone = build_graph([Node("MatMul", ["x", "w"], ["y"], name="m"), Node("Relu", ["x"], ["r"], name="r")],
                       {"x": (3, 4)}, ["y", "r"], {"w": f32(4, 2)})
    assert passes.merge_sibling_products(lone) is lone
    computed = build_graph([Node("MatMul", ["x", "w"], ["y"], name="m"),
                            Node("MatMul", ["x", "x2"], ["z"], name="n")],
                           {"x": (3, 4), "x2": (4, 4)}, ["y", "z"], {"w": f32(4, 2)})
    assert ops(passes.merge_sibling_products(computed)) == ["MatMul", "MatMul"]


@pytest.mark.parametrize("form", ["x*a*0.5", "a*0.5*x", "(x*0.5)*a", "mul_inv_sqrt2"])
def test_erf_gelu_patterns_become_one_gelu(form: str) -> None:
    consts = {
        "s2": np.float32(math.sqrt(2.0)),
        "r2": np.float32(1 / math.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    pre = (
        Node("Mul", ["x", "r2"], ["u"], name="pre")
        if form == "mul_inv_sqrt2"
        else Node("Div", ["x", "s2"], ["u"])
    )
    nodes = [pre, Node("Erf", ["u"], ["e"], name="erf"), Node("Add", ["one", "e"], ["a"], name="add")]
    if form == "a*0.5*x":
        nodes += [Node("Mul", ["a", "half"], ["h"]), Node("Mul", ["x", "h"], ["y"])]
    elif form == "(x*0.5)*a":
        nodes += [Node("Mul", ["x", "half"], ["h"]), Node("Mul", ["h", "a"], ["y"])]
    else:
        nodes += [Node("Mul", ["x", "a"], ["m"]), Node("Mul", ["m", "half"], ["y"])]
    nodes.append(Node("Relu", ["y"], ["out"]))
    g = build_graph(nodes, {"x": (2, 8)}, ["out"], consts)
    fused = passes.fuse_gelu(g)
    assert ops(fused) == ["Gelu", "Relu"]
    same_outputs(g, fused)


def test_gelu_pattern_with_a_shared_intermediate_is_left_alone() -> None:
    consts = {"s2": np.float32(math.sqrt(2.0)), "one": np.float32(1.0), "half": np.float32(0.5)}
    nodes = [
        Node("Div", ["x", "s2"], ["u"]),
        Node("Erf", ["u"], ["e"]),
        Node("Add", ["e", "one"], ["a"]),
        Node("Mul", ["x", "a"], ["m"]),
        Node("Mul", ["m", "half"], ["y"]),
        Node("Add", ["y", "e"], ["out"]),
    ]
    g = build_graph(nodes, {"x": (4,)}, ["out"], consts)
    assert "Gelu" not in ops(passes.fuse_gelu(g))


def test_transposes_compose_cancel_and_become_reshapes() -> None:
    g = build_graph(
        [
            Node("Transpose", ["x"], ["t1"], {"perm": [0, 2, 3, 1]}),
            Node("Transpose", ["t1"], ["t2"], {"perm": [0, 3, 1, 2]}),
            Node("Relu", ["t2"], ["r"]),
            Node("Transpose", ["r"], ["t3"], {"perm": [0, 2, 1, 3]}),
        ],
        {"x": (2, 3, 1, 5)},
        ["t3"],
        {},
    )
    simple = passes.simplify_transposes(g)
    assert ops(simple) == ["Relu", "Reshape"]
    same_outputs(g, simple)


def test_nhwc_layout_keeps_results_and_leaves_few_transposes() -> None:
    g = passes.fold_batch_norm(
        passes.canonicalize_gemm(from_onnx(zoo.make_model("zoo:resnet18?image=32,width=8")))
    )
    nhwc = passes.simplify_transposes(passes.convert_layout(g, "NHWC"))
    convs = [n for n in nhwc.nodes if n.op == "Conv"]
    assert convs and all(n.attrs.get("layout") == "NHWC" for n in convs)
    assert sum(n.op == "Transpose" for n in nhwc.nodes) == 1  # the input; the pooled output became a Reshape
    assert nhwc.types[convs[0].inputs[1]].shape == (7, 7, 3, 8)  # HWIO weights, transposed at compile time
    same_outputs(g, nhwc, rtol=1e-4)
    assert passes.convert_layout(g, "NCHW") is g


def test_optimize_pipeline_on_bert_keeps_outputs() -> None:
    g = from_onnx(zoo.make_model("zoo:bert_layer?seq=8,hidden=32,heads=2,ffn=64"))
    opt = passes.optimize(g)
    counts = opt.op_counts()
    # 8 products: Q, K, V (merged into one), the scores, the context, the output and FFN ones
    assert counts["Gelu"] == 1 and "Erf" not in counts and counts["MatMul"] == 6 and counts["Slice"] == 3
    same_outputs(g, opt, rtol=1e-4)


def compiled_matches_interpreter(g: Graph, x: np.ndarray, tmp_path) -> None:  # noqa: ANN001
    """The compiled module (NHWC) of ``g`` computes its interpreter's output for input ``x``."""
    from autotune.graph import compile_model

    (ref,) = run_graph(g, {"x": x})
    (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run({"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_concat_slices_and_channel_shuffles_stay_nhwc(tmp_path) -> None:  # noqa: ANN001
    """A ShuffleNet unit: convolutions, Concat on channels, the channel shuffle (Reshape to
    [N,g,C/g,H,W], Transpose (0,2,1,3,4), Reshape back) and Slices on channels run NHWC, with no
    transposes between them; same outputs, in the interpreter and compiled."""
    c, side = 8, 5
    shape5 = np.asarray([1, 2, c, side, side], np.int64)
    shape4 = np.asarray([1, 2 * c, side, side], np.int64)
    g = build_graph(
        [
            Node("Conv", ["x", "w1"], ["a"], {"kernel_shape": [1, 1]}, "c1"),
            Node("Conv", ["x", "w2"], ["b"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "c2"),
            Node("Concat", ["a", "b"], ["cat"], {"axis": 1}, "cat"),
            Node("Reshape", ["cat", "shape5"], ["r5"], name="split"),
            Node("Transpose", ["r5"], ["t5"], {"perm": [0, 2, 1, 3, 4]}, "shuffle"),
            Node("Reshape", ["t5", "shape4"], ["mixed"], name="merge"),
            Node("Slice", ["mixed", "s0", "e0", "ax"], ["left"], name="left"),
            Node("Slice", ["mixed", "s1", "e1", "ax"], ["right"], name="right"),
            Node("Conv", ["right", "w3"], ["rc"], {"kernel_shape": [1, 1]}, "c3"),
            Node("Concat", ["left", "rc"], ["out"], {"axis": -3}, "cat2"),
        ],
        {"x": (1, 3, side, side)},
        ["out"],
        {"w1": f32(c, 3, 1, 1), "w2": f32(c, 3, 3, 3), "w3": f32(c, c, 1, 1), "shape5": shape5,
         "shape4": shape4, "s0": np.asarray([0]), "e0": np.asarray([c]), "s1": np.asarray([c]),
         "e1": np.asarray([2 * c]), "ax": np.asarray([1])},
    )
    nhwc = passes.simplify_transposes(passes.convert_layout(g, "NHWC"))
    transposes = [n for n in nhwc.nodes if n.op == "Transpose"]
    assert [list(n.attrs["perm"]) for n in transposes] == [[0, 2, 3, 1], [0, 1, 2, 4, 3], [0, 3, 1, 2]]
    assert [n.attrs["axis"] for n in nhwc.nodes if n.op == "Concat"] == [3, 3]
    same_outputs(g, nhwc)
    compiled_matches_interpreter(g, f32(1, 3, side, side), tmp_path)
    # a split to 5-d read by two nodes is no shuffle: left as it was
    two = build_graph(
        [Node("Conv", ["x", "w1"], ["a"], {"kernel_shape": [1, 1]}, "c1"),
         Node("Reshape", ["a", "shape5"], ["r5"], name="split"),
         Node("Relu", ["r5"], ["o1"], name="u1"), Node("Neg", ["r5"], ["o2"], name="u2")],
        {"x": (1, 3, side, side)}, ["o1", "o2"], {"w1": f32(2 * c, 3, 1, 1), "shape5": shape5},
    )
    same_outputs(two, passes.convert_layout(two, "NHWC"))


def test_a_split_on_channels_runs_nhwc(tmp_path) -> None:  # noqa: ANN001
    """Split (opset 18, ``num_outputs``: how the dynamo exporter writes ShuffleNet's chunk) becomes
    Slices whose bounds are attributes; in NHWC their axis moves with the channels."""
    c, side = 8, 5
    g = build_graph(
        [
            Node("Conv", ["x", "w1"], ["a"], {"kernel_shape": [1, 1]}, "c1"),
            Node("Split", ["a"], ["left", "right"], {"axis": 1, "num_outputs": 2}, "halves"),
            Node("Conv", ["right", "w2"], ["rc"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "c2"),
            Node("Concat", ["rc", "left"], ["out"], {"axis": 1}, "cat"),
        ],
        {"x": (1, 3, side, side)},
        ["out"],
        {"w1": f32(2 * c, 3, 1, 1), "w2": f32(c, c, 3, 3)},
    )
    nhwc = passes.convert_layout(passes.split_to_slices(g), "NHWC")
    assert [n.attrs["_axes"] for n in nhwc.nodes if n.op == "Slice"] == [[3], [3]]
    same_outputs(g, nhwc)
    compiled_matches_interpreter(g, f32(1, 3, side, side), tmp_path)
