"""Fusion across views: elementwise ops sunk below views (graph/passes/views.py), so a product behind
the reshapes exporters write around it (GPT-2's addmm on a flattened view, ViT's attention output)
takes the residual add and the activation as its epilogue; views, slices and constant gathers
read in place inside kernels (graph/fusion.py); a product's scaled operands read unscaled
(passes.scales_after_products). Compiled modules are checked against the numpy interpreter of
the original graph on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import build_graph

from autotune.graph import compile_model, passes
from autotune.graph.compiler import prepare
from autotune.graph.interpreter import run_graph
from autotune.graph.ir import Graph, Node, TensorType

RNG = np.random.default_rng(5)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def block(tail_bias: np.ndarray, unflat: tuple[int, ...] = (1, 8, 32)) -> Graph:
    """x [1,8,16] flattened, a product with bias, viewed as ``unflat``, then a residual add, a
    cubic activation reading its input three times, a bias of shape ``tail_bias`` and a view as
    [8, 32] before the output."""
    nodes = [
        Node("Reshape", ["x", "flat"], ["xf"], name="flatten"),
        Node("MatMul", ["xf", "w"], ["m"], name="mm"),
        Node("Add", ["m", "b"], ["mb"], name="bias"),
        Node("Reshape", ["mb", "unflat"], ["v"], name="unflatten"),
        Node("Add", ["v", "r"], ["s"], name="residual"),
        Node("Mul", ["s", "s"], ["sq"], name="sq"),
        Node("Mul", ["sq", "s"], ["cube"], name="cube"),
        Node("Add", ["s", "cube"], ["t"], name="t"),
        Node("Tanh", ["t"], ["th"], name="tanh"),
        Node("Add", ["th", "tb"], ["tt"], name="tail_bias"),
        Node("Reshape", ["tt", "flat2"], ["tv"], name="drop_batch"),
        Node("Sigmoid", ["tv"], ["y"], name="out"),
    ]
    consts = {"flat": i64(8, 16), "w": f32(16, 32), "b": f32(32), "unflat": i64(*unflat),
              "tb": tail_bias, "flat2": i64(8, 32)}
    types = {"x": TensorType((1, 8, 16)), "r": TensorType(unflat)}
    types.update({k: TensorType(tuple(v.shape), str(v.dtype)) for k, v in consts.items()})
    return passes.infer_types(Graph("g", ["x", "r"], ["y"], nodes, types, consts))


def _kernel_ops(g: Graph) -> list[list[str]]:
    return [grp.ops for grp in prepare(g).groups]


def test_a_residual_and_an_activation_behind_a_view_become_the_products_epilogue() -> None:
    ops = _kernel_ops(block(f32(32)))
    assert ops == [["MatMul", "Add", "Add", "Mul", "Mul", "Add", "Tanh", "Add", "Sigmoid"]]


def test_a_bias_the_view_does_not_keep_stops_the_sinking_there() -> None:
    # [8, 1] broadcast over [1, 8, 32] spans the rows the source [8, 32] has too: it is [8, 1]
    # there. Broadcast over [2, 4, 32], [4, 1] spans no dims of the source: the add stays behind.
    whole = ["MatMul", "Add", "Add", "Mul", "Mul", "Add", "Tanh", "Add", "Sigmoid"]
    assert _kernel_ops(block(f32(8, 1))) == [whole]
    ops = _kernel_ops(block(f32(4, 1), (2, 4, 32)))
    assert ops == [["MatMul", "Add", "Add", "Mul", "Mul", "Add", "Tanh"], ["Add", "Sigmoid"]]


def test_sunk_views_compute_what_the_interpreter_does(tmp_path) -> None:  # noqa: ANN001
    for tail, unflat in ((f32(32), (1, 8, 32)), (f32(8, 1), (1, 8, 32)), (f32(1), (1, 8, 32)),
                         (f32(4, 1), (2, 4, 32))):
        g = block(tail, unflat)
        x, r = f32(1, 8, 16), f32(*unflat)
        (ref,) = run_graph(g, {"x": x, "r": r})
        module = compile_model(g, cache_dir=str(tmp_path), verbose=False)
        (got,) = module.run({"x": x, "r": r})
        assert got.shape == ref.shape == (8, 32)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def heads() -> Graph:
    """Attention's head split as exporters write it: a [S, 3E] product viewed as [S, 3, H, D],
    transposed, one of the three picked by a Gather, viewed with a batch dim and scaled; K
    transposed and split into heads by a view; their product's heads transposed back and merged
    by a view, then a copy."""
    s, h, d = 6, 2, 8
    nodes = [
        Node("MatMul", ["x", "wqkv"], ["qkv"], name="qkv"),
        Node("Reshape", ["qkv", "split"], ["qkv4"], name="split_heads"),
        Node("Transpose", ["qkv4"], ["t"], {"perm": [1, 2, 0, 3]}, "to_heads"),
        Node("Gather", ["t", "zero"], ["q"], {"axis": 0}, "pick_q"),
        Node("Unsqueeze", ["q", "ax0"], ["q4"], name="batch"),
        Node("Mul", ["q4", "scale"], ["qs"], name="scale"),
        Node("Transpose", ["kin"], ["kt"], {"perm": [1, 0]}, "k_t"),
        Node("Reshape", ["kt", "khead"], ["k"], name="k_heads"),
        Node("MatMul", ["qs", "k"], ["att"], name="scores"),
        Node("Transpose", ["att"], ["back"], {"perm": [0, 2, 1, 3]}, "from_heads"),
        Node("Reshape", ["back", "merge"], ["merged"], name="merge_heads"),
        Node("Transpose", ["merged"], ["y"], {"perm": [1, 0]}, "out"),
    ]
    consts = {"wqkv": f32(16, 3 * h * d), "split": i64(s, 3, h, d), "zero": np.asarray(0, np.int64),
              "ax0": i64(0), "scale": np.asarray([0.35], np.float32), "merge": i64(s, h * s),
              "khead": i64(1, h, d, s)}
    return build_graph(nodes, {"x": (s, 16), "kin": (s, h * d)}, ["y"], consts)


def test_copies_fuse_across_views_and_a_split_view_reads_into_a_product() -> None:
    ops = _kernel_ops(heads())
    assert ops == [
        ["MatMul"],
        # Q picked through a transpose and a view, K's transposed, split read, both inside the
        # product; the scale moved onto the product's result
        ["Transpose", "Gather", "Unsqueeze", "Transpose", "Reshape", "MatMul", "Mul"],
        ["Transpose", "Reshape", "Transpose"],  # the merging view divides inside a copy
    ]


def test_views_inside_kernels_compute_what_the_interpreter_does(tmp_path) -> None:  # noqa: ANN001
    g = heads()
    for _ in range(2):
        feeds = {"x": f32(6, 16), "kin": f32(6, 16)}
        (ref,) = run_graph(g, feeds)
        (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run(feeds)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_view_that_merges_dims_is_not_read_inside_a_product() -> None:
    nodes = [Node("Transpose", ["a"], ["t"], {"perm": [1, 0, 2]}, "t"),
             Node("Reshape", ["t", "merge"], ["m"], name="merge"),
             Node("MatMul", ["m", "w"], ["y"], name="mm")]
    g = build_graph(nodes, {"a": (2, 6, 8)}, ["y"], {"merge": i64(6, 16), "w": f32(16, 4)})
    assert _kernel_ops(g) == [["Transpose"], ["MatMul"]]
    nodes[1] = Node("Reshape", ["t", "split"], ["m"], name="split")
    g = build_graph(nodes, {"a": (2, 6, 8)}, ["y"], {"split": i64(6, 2, 2, 4), "w": f32(4, 3)})
    assert _kernel_ops(g) == [["Transpose", "Reshape", "MatMul"]]
    # a merging view inside a copy of transposes keeps that copy out of the product too
    nodes[1:] = [Node("Reshape", ["t", "merge"], ["m"], name="merge"),
                 Node("Transpose", ["m"], ["mt"], {"perm": [1, 0]}, "t2"),
                 Node("MatMul", ["w", "mt"], ["y"], name="mm")]
    g = build_graph(nodes, {"a": (2, 6, 8)}, ["y"], {"merge": i64(6, 16), "w": f32(5, 16)})
    assert _kernel_ops(g) == [["Transpose", "Reshape", "Transpose"], ["MatMul"]]


def test_two_products_behind_views_give_the_add_to_one_of_them(tmp_path) -> None:  # noqa: ANN001
    # (two products of different activations: products of one are merged into one product)
    nodes = [Node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             Node("MatMul", ["x2", "w2"], ["m2"], name="mm2"),
             Node("Reshape", ["m1", "up"], ["v1"], name="v1"),
             Node("Reshape", ["m2", "up"], ["v2"], name="v2"),
             Node("Add", ["v1", "v2"], ["y"], name="add")]
    g = build_graph(nodes, {"x": (8, 16), "x2": (8, 16)}, ["y"],
                    {"w1": f32(16, 32), "w2": f32(16, 32), "up": i64(1, 8, 32)})
    assert sorted(_kernel_ops(g)) == [["MatMul"], ["MatMul", "Add"]]
    feeds = {"x": f32(8, 16), "x2": f32(8, 16)}
    (ref,) = run_graph(g, feeds)
    (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run(feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def shuffle_unit() -> Graph:
    """ShuffleNet-V2's unit: half the channels through a 1x1 conv, concatenated with the other
    half, shuffled (view, transpose, view), halved again for the next unit's conv and add."""
    nodes = [
        Node("Slice", ["x", "s0", "s4", "ax1"], ["x1"], name="x1"),
        Node("Slice", ["x", "s4", "s8", "ax1"], ["x2"], name="x2"),
        Node("Conv", ["x2", "w1"], ["c"], {"kernel_shape": [1, 1]}, "c"),
        Node("Relu", ["c"], ["b"], name="b"),
        Node("Concat", ["x1", "b"], ["cat"], {"axis": 1}, "cat"),
        Node("Reshape", ["cat", "groups"], ["g5"], name="groups"),
        Node("Transpose", ["g5"], ["sh"], {"perm": [0, 2, 1, 3, 4]}, "shuffle"),
        Node("Reshape", ["sh", "back"], ["y"], name="back"),
        Node("Slice", ["y", "s0", "s4", "ax1"], ["y1"], name="y1"),
        Node("Slice", ["y", "s4", "s8", "ax1"], ["y2"], name="y2"),
        Node("Conv", ["y2", "w2"], ["d"], {"kernel_shape": [1, 1]}, "d"),
        Node("Add", ["d", "y1"], ["out"], name="out"),
    ]
    consts = {"s0": i64(0), "s4": i64(4), "s8": i64(8), "ax1": i64(1), "w1": f32(4, 4, 1, 1),
              "w2": f32(4, 4, 1, 1), "groups": i64(1, 2, 4, 6, 6), "back": i64(1, 8, 6, 6)}
    return build_graph(nodes, {"x": (1, 8, 6, 6)}, ["out"], consts)


def test_a_channel_slice_is_read_inside_the_convolution() -> None:
    ops = _kernel_ops(shuffle_unit())
    assert ["Slice"] not in ops
    assert sum("Conv" in o and "Slice" in o for o in ops) == 2


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_a_shuffle_unit_computes_what_the_interpreter_does(tmp_path, layout: str) -> None:  # noqa: ANN001
    g = shuffle_unit()
    for _ in range(2):
        x = f32(1, 8, 6, 6)
        (ref,) = run_graph(g, {"x": x})
        (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False, layout=layout).run({"x": x})
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index", [np.asarray(2, np.int64), np.asarray([1], np.int64)])
def test_a_gather_of_one_constant_index_is_read_inside_the_product(tmp_path, index: np.ndarray) -> None:  # noqa: ANN001
    """ViT's V: one of the stacked Q/K/V picked by a constant Gather, split into heads by a view and
    transposed, read by the product with the attention weights without a copy."""
    nodes = [Node("Gather", ["qkv", "i"], ["v"], {"axis": 0}, "pick"),
             Node("Reshape", ["v", "heads"], ["vh"], name="heads"),
             Node("Transpose", ["vh"], ["vt"], {"perm": [0, 2, 1, 3]}, "vt"),
             Node("MatMul", ["p", "vt"], ["y"], name="pv")]
    consts = {"i": index, "heads": i64(1, 6, 2, 8)}
    g = build_graph(nodes, {"qkv": (3, 6, 16), "p": (1, 2, 6, 6)}, ["y"], consts)
    assert g.types["v"].shape == ((6, 16) if index.ndim == 0 else (1, 6, 16))
    assert _kernel_ops(g) == [["Gather", "Reshape", "Transpose", "MatMul"]]
    feeds = {"qkv": f32(3, 6, 16), "p": f32(1, 2, 6, 6)}
    (ref,) = run_graph(g, feeds)
    (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run(feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_scaled_operands_of_a_product_become_its_epilogue(tmp_path) -> None:  # noqa: ANN001
    """Scaled dot-product attention as exporters decompose it: q * s and k * s (s a constant) before
    the product; the scalings move onto the product, so the transposed K is read in place. A
    scaling by a vector stays where it is."""
    nodes = [Node("Mul", ["q", "s"], ["qs"], name="qs"),
             Node("Transpose", ["k"], ["kt"], {"perm": [0, 2, 1]}, "kt"),
             Node("Div", ["kt", "d"], ["ks"], name="ks"),
             Node("MatMul", ["qs", "ks"], ["y"], name="qk")]
    consts = {"s": np.asarray([0.5], np.float32), "d": np.asarray(1.7, np.float32)}
    g = build_graph(nodes, {"q": (2, 5, 8), "k": (2, 5, 8)}, ["y"], consts)
    assert _kernel_ops(g) == [["Transpose", "MatMul", "Div", "Mul"]]
    feeds = {"q": f32(2, 5, 8), "k": f32(2, 5, 8)}
    (ref,) = run_graph(g, feeds)
    (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run(feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    g.consts["s"] = f32(8)
    g.types["s"] = TensorType((8,))
    assert _kernel_ops(passes.infer_types(g)) == [["Mul"], ["Transpose", "MatMul", "Div"]]


def test_a_bias_over_a_row_the_view_splits_is_viewed_in_the_sources_last_dims() -> None:
    from autotune.graph.passes.views import _operand_in

    # a kernel computing [rows, 2, half] (a row's two halves), viewed as [1, rows, 2 * half]
    assert _operand_in((1, 8, 32), (8, 2, 16), (32,)) == (2, 16)
    assert _operand_in((1, 8, 32), (8, 2, 16), (1, 8, 32)) == (8, 2, 16)
    assert _operand_in((1, 8, 32), (8, 2, 16), (1, 32)) == (2, 16)
    # the row split in more than two dims; a source whose last dims never hold 32 elements
    assert _operand_in((8, 32), (8, 4, 8), (32,)) == (4, 8)
    assert _operand_in((8, 32), (16, 16), (32,)) is None
    # a bias over half of the source's row (it repeats along it): no view of it is the source's
    assert _operand_in((8, 2, 16), (8, 32), (1, 16)) is None


def _split_heads(out_too: bool) -> Graph:
    """x [2, 6, 8] transposed to [6, 2, 8] and read by two batched products, the second through a
    constant-index gather (torch's packed attention projection split into q, k, v)."""
    nodes = [Node("Transpose", ["x"], ["t"], {"perm": [1, 0, 2]}, "t"),
             Node("MatMul", ["t", "y1"], ["p1"], name="p1"),
             Node("Gather", ["t", "one"], ["t1"], {"axis": 0}, "g"),
             Node("MatMul", ["t1", "y2"], ["p2"], name="p2"),
             Node("Add", ["p1", "p2"], ["z"], name="add")]
    outs = ["z", "t"] if out_too else ["z"]
    return build_graph(nodes, {"x": (2, 6, 8), "y1": (6, 8, 2), "y2": (8, 2)}, outs, {"one": i64(1)[0]})


def test_a_transpose_read_by_several_products_is_copied_into_each(tmp_path) -> None:  # noqa: ANN001
    g = _split_heads(out_too=False)
    assert _kernel_ops(g) == [["Transpose", "Gather", "MatMul"], ["Transpose", "MatMul", "Add"]]
    feeds = {"x": f32(2, 6, 8), "y1": f32(6, 8, 2), "y2": f32(8, 2)}
    (ref,) = run_graph(g, feeds)
    (got,) = compile_model(g, cache_dir=str(tmp_path), verbose=False).run(feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_transpose_that_is_also_an_output_stays_a_kernel() -> None:
    assert _kernel_ops(_split_heads(out_too=True)) == [["Transpose"], ["Gather", "MatMul"], ["MatMul", "Add"]]
