"""Winograd F(m x m, 3 x 3) convolutions of stride 1 and 2: the transform matrices, the graph
rewrite, the per-convolution choice from the records DB, and compiled modules against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.graph import GraphError, compile_model, load_model, prepare
from autotune.graph.interpreter import run_graph
from autotune.graph.passes import optimize
from autotune.graph.winograd import STRIDES, SUFFIXES, TILE_SIZES, matrices, tile_side, transform_weight
from autotune.ir.simplify import simplify
from autotune.te.expr import FloatImm, Var
from autotune.te.expr import binary as te_binary

RESNET = "zoo:resnet18?image=32,width=8"


@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("m", TILE_SIZES)
def test_transform_matrices_compute_a_correlation(m: int, stride: int) -> None:
    at, g, bt = matrices(m, stride)
    a = tile_side(m, stride)
    assert at.shape == (m, a) and g.shape == (a, 3) and bt.shape == (a, a)
    assert a == (m + 2 if stride == 1 else 2 * m + 1)
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal(a), rng.standard_normal(3)
    direct = np.array([d[i * stride : i * stride + 3] @ w for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), direct, rtol=1e-12, atol=1e-12)
    # and in 2-D, through the weight transform the graph pass uses (HWIO weight)
    tile, w2 = rng.standard_normal((a, a)), rng.standard_normal((3, 3, 1, 1))
    u = transform_weight(w2, m, stride)[:, :, 0, 0]
    y = at @ (u * (bt @ tile @ bt.T)) @ at.T
    k = w2[:, :, 0, 0]
    ref = np.array([[np.sum(tile[i * stride : i * stride + 3, j * stride : j * stride + 3] * k)
                     for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)


def test_unsupported_tile_sizes_and_strides_are_refused() -> None:
    with pytest.raises(GraphError, match="tile size 3"):
        matrices(3)
    with pytest.raises(GraphError, match="stride 3"):
        matrices(2, 3)


@pytest.mark.parametrize("m", TILE_SIZES)
def test_rewritten_graph_computes_the_same_model(m: int) -> None:
    g = load_model(RESNET)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float64)
    direct = optimize(g, "NHWC")
    wino = optimize(g, "NHWC", f"winograd{m}")
    ops = wino.op_counts()
    # every 3x3 conv: 2 per stage, then the stride-2 and the stride-1 one of each later stage's
    # first block
    assert ops["WinogradInput"] == ops["WinogradOutput"] == 16
    strided = [n for n in wino.nodes if n.op == "WinogradInput" and n.attrs.get("stride") == 2]
    assert len(strided) == 3 and all("stride" not in n.attrs for n in wino.nodes
                                     if n.op == "WinogradInput" and n not in strided)
    assert ops["Conv"] == direct.op_counts()["Conv"] - 16  # the stem and the 1x1 convs stay
    ref, out = run_graph(direct, {"data": x})[0], run_graph(wino, {"data": x})[0]
    # float64 activations; the transformed weights are stored in float32 like the model's
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def _conv_model(c: int, k: int, h: int, w: int, stride: int, pad: int):  # noqa: ANN202
    """One 3x3 convolution with bias (NCHW input), then ReLU."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(h * w + stride + pad)
    wt = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (k, c, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.uniform(-0.5, 0.5, k).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2,
                              kernel_shape=[3, 3], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
    out = [1, k, (h + 2 * pad - 3) // stride + 1, (w + 2 * pad - 3) // stride + 1]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out)
    graph = helper.make_graph(nodes, "conv", [x], [y], [wt, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# (input h, w, stride, pad): odd and even sizes, tiles past the edge, no padding and the most
CONVS = [(9, 7, 2, 1), (8, 11, 2, 0), (10, 10, 2, 2), (7, 9, 1, 0), (6, 5, 1, 2)]


def test_a_stem_on_the_image_channels_stays_direct() -> None:
    from autotune.graph.winograd import MIN_IN_CHANNELS

    few = optimize(load_model(_conv_model(MIN_IN_CHANNELS - 1, 8, 9, 9, 2, 1)), "NHWC", "winograd2")
    enough = optimize(load_model(_conv_model(MIN_IN_CHANNELS, 8, 9, 9, 2, 1)), "NHWC", "winograd2")
    assert "WinogradInput" not in few.op_counts() and enough.op_counts()["WinogradInput"] == 1


@pytest.mark.parametrize("m", TILE_SIZES)
@pytest.mark.parametrize(("h", "w", "stride", "pad"), CONVS)
def test_each_geometry_computes_the_convolution(m: int, h: int, w: int, stride: int, pad: int) -> None:
    g = load_model(_conv_model(8, 8, h, w, stride, pad))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 8, h, w))
    direct, wino = optimize(g, "NHWC"), optimize(g, "NHWC", f"winograd{m}")
    assert wino.op_counts().get("WinogradInput") == 1
    ref, out = run_graph(direct, {"x": x})[0], run_graph(wino, {"x": x})[0]
    assert out.shape == ref.shape == (1, 8, (h + 2 * pad - 3) // stride + 1, (w + 2 * pad - 3) // stride + 1)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize(("h", "w", "stride", "pad"), CONVS[:3])
def test_every_stride_2_kernel_matches_numpy_in_sampled_configs(h: int, w: int, stride: int, pad: int,
                                                                 check_kernel, host_target) -> None:  # noqa: ANN001
    from schedules import make_space

    rng = np.random.default_rng(h + w)
    for m in TILE_SIZES:
        tasks = prepare(_conv_model(16, 16, h, w, stride, pad), "NHWC", forms=f"winograd{m}").tasks
        assert any("winograd_in" in t.label for t in tasks)  # the input transpose fused into it
        for task in tasks:
            space = make_space(task.workload, host_target)
            for cfg in [space.default_config(), space.sample(rng)]:
                check_kernel(task.workload, space.steps(cfg))  # fresh random inputs, float64 reference


@pytest.mark.parametrize("m", TILE_SIZES)
def test_an_output_transform_with_tiles_past_the_edge_unrolls_into_vectors(m: int, check_kernel,  # noqa: ANN001
                                                                           host_target) -> None:  # noqa: ANN001
    """7x7 outputs in m x m tiles: the unrolled copies of the last tile row and column are guarded
    (outputs past the edge); the guard is the same for every channel, so each copy is tested once
    around its channel vectors instead of making a scalar loop of them."""
    from schedules import make_space

    lanes = host_target.vector_lanes
    task = next(t for t in prepare(_conv_model(8, 2 * lanes, 9, 9, 1, 0), "NHWC", forms=f"winograd{m}").tasks
                if t.label.startswith("winograd_out"))
    space = make_space(task.workload, host_target)
    cfg = {**space.default_config(), "unroll_coefficients": 1}
    prog = check_kernel(task.workload, space.steps(cfg))  # fresh random inputs, float64 reference
    assert "if (" in prog.source and "at_vstore(" in prog.source
    assert "#pragma omp simd" not in prog.source


def test_only_the_named_eligible_convolutions_are_rewritten() -> None:
    g = load_model(RESNET)
    every = prepare(g, "NHWC", forms="winograd2")
    a, b = list(every.winograd_convs)[:2]
    some = prepare(g, "NHWC", forms={a: "winograd2", b: "winograd4"})
    assert some.winograd_convs == {a: 2, b: 4}
    names = {n.name for n in some.graph.nodes}
    assert {c + s for c in (a, b) for s in SUFFIXES} <= names
    assert some.forms == {a: "winograd2", b: "winograd4"}
    assert "1 conv as F(2x2,3x3), 1 conv as F(4x4,3x3)" in some.describe()
    assert not prepare(g, "NCHW", forms="winograd2").winograd_convs  # NHWC only
    with pytest.raises(GraphError, match="unknown algorithm form 'winograd3'"):
        prepare(g, "NHWC", forms="winograd3")


def test_the_frontend_rejects_the_compilers_internal_operators() -> None:
    from onnx import TensorProto, helper

    from autotune.graph import UnsupportedModelError, from_onnx

    node = helper.make_node("WinogradInput", ["x"], ["y"], name="w0", m=2, out_h=4, out_w=4)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    with pytest.raises(UnsupportedModelError, match="WinogradInput"):
        from_onnx(helper.make_model(graph))


def test_float_identities_fold_literal_coefficients() -> None:
    x = Var("x", "float32")  # a float scalar stands in for a load
    assert isinstance(simplify(te_binary("mul", x, FloatImm(0.0))), FloatImm)
    assert simplify(te_binary("mul", FloatImm(1.0), x)) is x
    assert simplify(te_binary("add", FloatImm(0.0), x)) is x
    assert simplify(te_binary("sub", x, FloatImm(0.0))) is x


def _record(db, task, target, cfg, seconds) -> None:  # noqa: ANN001
    from autotune.search.tune import register
    from records import MeasurementRecord
    from schedules import make_space

    space = make_space(task.workload, target)
    register(db, task.workload, target)
    steps = [st.to_dict() for st in space.steps(cfg)]
    db.add_measurement(MeasurementRecord(task.key, target.key, cfg, steps, (seconds,), None, verified=True))


@pytest.mark.parametrize(("m", "unroll"), [(2, 1), (4, 0)])
def test_each_convolution_takes_its_faster_recorded_form_and_matches_onnxruntime(
    m: int, unroll: int, tmp_path, tmp_path_factory  # noqa: ANN001
) -> None:
    ort = pytest.importorskip("onnxruntime")
    from autotune.graph import zoo
    from autotune.graph.compiler import choose_forms
    from autotune.target import cpu_target
    from records import TuningDatabase
    from schedules import make_space

    target, g = cpu_target(), load_model(RESNET)
    form = f"winograd{m}"
    direct, every = prepare(g, "NHWC"), prepare(g, "NHWC", forms=form)
    rng = np.random.default_rng(5 + unroll)
    # made-up times: Winograd faster for the first stage's convolutions (8x8 outputs) and the
    # stride-2 ones only
    first_stage = {c for c in every.winograd_convs if every.graph.types[c + SUFFIXES[2]].shape[1] == 8}
    strided = {n.name[: -len(SUFFIXES[0])] for n in every.graph.nodes
               if n.op == "WinogradInput" and n.attrs.get("stride") == 2}
    assert first_stage and len(strided) == 3
    first_stage |= strided
    wanted = {c + s for c in first_stage for s in SUFFIXES}
    fast = {every.tasks[c.task].key for c in every.calls if any(n.name in wanted for n in c.group.nodes)}
    with TuningDatabase(tmp_path / "w.db") as db:
        for t in {t.key: t for p in (direct, every) for t in p.tasks}.values():
            space = make_space(t.workload, target)
            cfg = space.sample(rng)
            if "unroll_coefficients" in cfg:
                cfg["unroll_coefficients"] = unroll
                assert space.is_valid(cfg)
            _record(db, t, target, cfg, 1e-6 if t.key in fast else 1e-3)
        chosen = choose_forms(g, target, db, "NHWC", [form])
        assert set(chosen.winograd_convs) == first_stage
        module = compile_model(g, target, db, winograd=m, strassen=False, verbose=False,
                               cache_dir=str(tmp_path_factory.mktemp("modules")))
    assert module.prepared.forms == chosen.forms == module.summary.forms
    assert f"; {len(first_stage)} convs as F({m}x{m},3x3)" in module.summary.line()
    assert module.summary.tuned_tasks == module.summary.tasks
    feeds = module.random_inputs(np.random.default_rng(3))
    proto = zoo.make_model(RESNET).SerializeToString()
    sess = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    for o, r in zip(module.run(feeds), sess.run(None, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))


def test_the_winograd_option_takes_tile_sizes_and_defaults_per_target() -> None:
    import argparse

    from autotune.cli.model import winograd_sizes
    from autotune.graph.winograd import default_sizes

    assert winograd_sizes("4,2") == (2, 4) and winograd_sizes("0") == () and winograd_sizes("2") == (2,)
    for bad in ("3", "2,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="tile sizes are 2 and 4"):
            winograd_sizes(bad)
    assert default_sizes("cpu") == default_sizes("cuda") == (2, 4) and default_sizes("cpu", ()) == ()


def test_tune_model_tunes_every_form_and_reports_the_estimate_of_the_chosen_ones(tmp_path, capsys) -> None:  # noqa: ANN001
    import json

    from onnx import TensorProto, helper, numpy_helper

    from autotune.cli import tune
    from autotune.graph.compiler import choose_forms, estimated_latency
    from autotune.target import cpu_target
    from records import TuningDatabase

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.uniform(-0.3, 0.3, (8, 8, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv")
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu")
    graph = helper.make_graph(
        [conv, relu], "one_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w],
    )
    path, db = tmp_path / "c.onnx", tmp_path / "t.db"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    # direct: transpose in + conv + transpose out; each Winograd form: in, GEMM, out (transposes shared)
    assert tune.main(["--model", str(path), "--db", str(db), "--trials", "32", "--batch-size", "4",
                      "--confirm", "0", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    labels = [t["workload"] for t in out["tasks"]]
    assert sum("winograd_in" in x for x in labels) == 2 and any("conv2d" in x for x in labels)
    assert all(t["trials"] >= 1 for t in out["tasks"])  # warm-up: every task of every form measured
    with TuningDatabase(db, create=False) as d:
        chosen = choose_forms(str(path), cpu_target(), d, "NHWC", ("winograd2", "winograd4"))
        want = estimated_latency(chosen.tasks, cpu_target(), d)
    every = sum(t["weighted_s"] for t in out["tasks"])
    assert out["estimated_latency_s"] == pytest.approx(want) and want < every


def test_the_scheduler_sees_each_convolution_once_in_each_of_its_forms() -> None:
    from autotune.graph.tuning import model_tasks, scheduler_weights

    g = load_model(RESNET)
    prepared = [prepare(g, "NHWC")] + [prepare(g, "NHWC", forms=f"winograd{m}") for m in (2, 4)]
    tasks = model_tasks(prepared)
    weights, choices = scheduler_weights(prepared, tasks)
    assert len(choices) == 16  # the 3x3 convolutions
    for forms in choices:  # direct: one kernel; F(2x2) and F(4x4): transform, product, transform
        assert [sum(calls for _, calls in f) for f in forms] == [1, 3, 3]
    direct = prepared[0]
    # the other kernels (stem, pools, 1x1 convs, classifier) count once each
    assert sum(weights) == len(direct.calls) - 16
    # each task's calls across the forms add up to the calls of its kernel in the preparations
    for i, mt in enumerate(tasks):
        in_forms = sum(c for forms in choices for f in forms for j, c in f if j == i)
        assert weights[i] + in_forms >= mt.weight
