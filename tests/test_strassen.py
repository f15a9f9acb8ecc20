"""Strassen's algorithm as a form of products by a constant matrix: the coefficients, the graph
rewrite, its kernels against float64 references, the choice from the records DB and the options."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.graph import compile_model, load_model, prepare
from autotune.graph.interpreter import run_graph
from autotune.graph.ir import Node
from autotune.graph.passes import optimize
from autotune.graph.strassen import MIN_MACS, SUFFIXES, transform_weight
from autotune.graph.strassen import _StrassenInput as StIn
from autotune.graph.strassen import _StrassenOutput as StOut
from schedules import make_space


def _dense_model(a_shape: tuple[int, ...], k: int, n: int, seed: int = 0, const_w: bool = True):  # noqa: ANN202
    """MatMul by a [k, n] weight, + bias, then Gelu (an epilogue the output transform takes)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"], name="dense"),
             helper.make_node("Add", ["p", "b"], ["q"], name="bias"),
             helper.make_node("Gelu", ["q"], ["y"], name="gelu", domain="com.microsoft")]
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    inits = [w, b]
    if not const_w:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [k, n]))
        inits = [b]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(a_shape[:-1]) + [n])
    graph = helper.make_graph(nodes, "dense", inputs, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("rows", [6, 7])
def test_the_coefficients_compute_the_product(rows: int) -> None:
    rng = np.random.default_rng(rows)
    a, w = rng.standard_normal((rows, 8)), rng.standard_normal((8, 10))
    node = Node("StrassenOutput", ["p"], ["y"], {"rows": rows}, "out")
    (s,) = StIn.numpy(Node("StrassenInput", ["a"], ["s"], {}, "in"), [a])
    assert s.shape == (7, (rows + 1) // 2, 4)
    (y,) = StOut.numpy(node, [s @ transform_weight(w)])
    np.testing.assert_allclose(y.reshape(rows, 10), a @ w, rtol=1e-12, atol=1e-12)


# (A's shape, K, N): rows even and odd, A 2-d and 3-d with the rows in either leading dim
SHAPES = [((64, 512), 512, 512), ((1, 65, 256), 256, 1024), ((65, 1, 256), 256, 1024)]


@pytest.mark.parametrize(("a_shape", "k", "n"), SHAPES, ids=["2d", "3d-odd", "3d-odd-first"])
def test_the_rewritten_graph_computes_the_same_model(a_shape, k: int, n: int) -> None:  # noqa: ANN001
    g = load_model(_dense_model(a_shape, k, n))
    st = optimize(g, "NHWC", "strassen")
    ops = st.op_counts()
    assert ops["StrassenInput"] == ops["StrassenOutput"] == ops["MatMul"] == 1
    a = np.random.default_rng(1).uniform(-1, 1, a_shape)
    ref, out = run_graph(optimize(g, "NHWC"), {"a": a})[0], run_graph(st, {"a": a})[0]
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_only_large_products_by_a_constant_matrix_with_even_sides_are_rewritten() -> None:
    def forms(model) -> dict:  # noqa: ANN001
        return prepare(model, forms="strassen").forms

    assert forms(_dense_model((64, 512), 512, 512)) == {"dense": "strassen"}
    assert 96 * 511 * 511 >= MIN_MACS
    assert not forms(_dense_model((96, 511), 511, 512))  # odd K
    assert not forms(_dense_model((96, 512), 512, 511))  # odd N
    assert not forms(_dense_model((8, 4096), 4096, 1024))  # too few rows
    assert not forms(_dense_model((32, 256), 256, 256))  # too few multiply-adds
    assert not forms(_dense_model((64, 512), 512, 512, const_w=False))  # a weight computed at run time


def test_the_epilogue_is_fused_into_the_output_transform_through_the_rows_view() -> None:
    p = prepare(_dense_model((1, 65, 256), 256, 1024), forms="strassen")
    labels = sorted(t.label for t in p.tasks)
    assert labels == ["matmul[7x33x128,7x128x512,7x33x512]", "strassen_in[7x33x128]",
                      "strassen_out_add_gelu[65x2x512]"]
    assert {n + s for n in p.forms for s in SUFFIXES} <= {n.name for n in p.graph.nodes}
    assert "1 matmul as Strassen" in p.describe()


@pytest.mark.parametrize(("a_shape", "k", "n"), SHAPES[:2], ids=["2d", "3d-odd"])
def test_every_kernel_of_the_form_matches_numpy_in_sampled_configs(a_shape, k: int, n: int,  # noqa: ANN001
                                                                   check_kernel, host_target) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    for task in prepare(_dense_model(a_shape, k, n), forms="strassen").tasks:
        space = make_space(task.workload, host_target)
        configs = [space.default_config()] + [space.sample(rng) for _ in range(3)]
        for cfg in configs:
            check_kernel(task.workload, space.steps(cfg))  # fresh random inputs, float64 reference


def _record(db, task, target, seconds: float) -> None:  # noqa: ANN001
    from autotune.search.tune import register
    from records import MeasurementRecord

    space = make_space(task.workload, target)
    register(db, task.workload, target)
    cfg = space.default_config()
    steps = [st.to_dict() for st in space.steps(cfg)]
    db.add_measurement(MeasurementRecord(task.key, target.key, cfg, steps, (seconds,), None, verified=True))


@pytest.mark.parametrize("faster", [True, False])
def test_compile_takes_the_form_where_the_records_say_it_is_faster(faster: bool, tmp_path,  # noqa: ANN001
                                                                   tmp_path_factory) -> None:  # noqa: ANN001
    from autotune.target import cpu_target
    from records import TuningDatabase

    target, model = cpu_target(), _dense_model((1, 65, 256), 256, 1024)
    direct, every = prepare(model), prepare(model, forms="strassen")
    direct_keys = {t.key for t in direct.tasks}
    with TuningDatabase(tmp_path / "s.db") as db:
        for t in {t.key: t for p in (direct, every) for t in p.tasks}.values():
            # the form's three kernels add up to 3e-4 s against the direct kernel's 4e-4 or 2e-4
            _record(db, t, target, (4e-4 if faster else 2e-4) if t.key in direct_keys else 1e-4)
        module = compile_model(model, target, db, verbose=False,
                               cache_dir=str(tmp_path_factory.mktemp("modules")))
        plain = compile_model(model, target, db, strassen=False, verbose=False,
                              cache_dir=str(tmp_path_factory.mktemp("modules")))
    assert module.summary.forms == ({"dense": "strassen"} if faster else {})
    assert ("1 matmul as Strassen" in module.summary.line()) == faster
    assert plain.summary.forms == {}
    a = np.random.default_rng(2).standard_normal((1, 65, 256)).astype(np.float32)
    (y,) = module.run({"a": a})
    (ref,) = plain.run({"a": a})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_the_strassen_option_and_its_default_per_target() -> None:
    import argparse

    from autotune.cli.model import on_off
    from autotune.graph.forms import default_forms

    assert default_forms("cpu") == ("winograd2", "winograd4", "strassen")
    assert default_forms("cuda") == ("winograd2", "winograd4")
    assert default_forms("cpu", 0, False) == () and default_forms("cuda", (), True) == ("strassen",)
    assert on_off("on") and on_off("1") and not on_off("OFF") and not on_off("0")
    with pytest.raises(argparse.ArgumentTypeError, match="on or off"):
        on_off("maybe")


def test_the_scheduler_sees_each_product_once_directly_and_once_as_its_form() -> None:
    from autotune.graph.tuning import model_tasks, scheduler_weights

    g = load_model("zoo:bert_layer")
    prepared = [prepare(g), prepare(g, forms="strassen")]
    weights, choices = scheduler_weights(prepared, model_tasks(prepared))
    assert len(choices) == len(prepared[1].forms) >= 4  # Q, K, V, output, FFN products
    for ways in choices:  # direct: one kernel; Strassen: transform, product, transform
        assert [sum(calls for _, calls in w) for w in ways] == [1, 3]
