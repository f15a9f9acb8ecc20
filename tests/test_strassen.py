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


@pytest.mark.parametrize(("rows", "levels"), [(6, 1), (7, 1), (8, 2), (9, 2), (11, 2)])
def test_the_coefficients_compute_the_product(rows: int, levels: int) -> None:
    rng = np.random.default_rng(rows)
    a, w = rng.standard_normal((rows, 8)), rng.standard_normal((8, 12))
    attrs = {} if levels == 1 else {"levels": levels}  # one level: the attribute may be left out
    node = Node("StrassenOutput", ["p"], ["y"], {"rows": rows, **attrs}, "out")
    (s,) = StIn.numpy(Node("StrassenInput", ["a"], ["s"], attrs, "in"), [a])
    parts = 1 << levels
    assert s.shape == (7,) * levels + (-(-rows // parts), 8 // parts)
    (y,) = StOut.numpy(node, [s @ transform_weight(w, levels)])
    assert y.shape == (rows, parts, 12 // parts)
    np.testing.assert_allclose(y.reshape(rows, 12), a @ w, rtol=1e-12, atol=1e-12)


# (A's shape, K, N): rows even and odd, A 2-d and 3-d with the rows in either leading dim
SHAPES = [((64, 512), 512, 512), ((1, 65, 256), 256, 1024), ((65, 1, 256), 256, 1024)]


# two levels: rows a multiple of 4 and not (the last block padded by zero rows)
SHAPES2 = [((128, 512), 512, 1024), ((1, 131, 512), 512, 1024)]
FORMS = ["strassen"] * len(SHAPES) + ["strassen2"] * len(SHAPES2)


@pytest.mark.parametrize(("a_shape", "k", "n", "form"), [(*s, f) for s, f in zip(SHAPES + SHAPES2, FORMS)],
                         ids=["2d", "3d-odd", "3d-odd-first", "2d-x2", "3d-odd-x2"])
def test_the_rewritten_graph_computes_the_same_model(a_shape, k: int, n: int, form: str) -> None:  # noqa: ANN001
    g = load_model(_dense_model(a_shape, k, n))
    st = optimize(g, "NHWC", form)
    ops = st.op_counts()
    assert ops["StrassenInput"] == ops["StrassenOutput"] == ops["MatMul"] == 1
    assert len(st.types[next(n for n in st.nodes if n.op == "MatMul").inputs[0]].shape) == \
        (3 if form == "strassen" else 4)
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

    def twice(model) -> dict:  # noqa: ANN001
        return prepare(model, forms="strassen2").forms

    assert twice(_dense_model((128, 512), 512, 1024)) == {"dense": "strassen2"}
    assert 128 * 512 * 1024 >= MIN_MACS << 2
    assert not twice(_dense_model((128, 514), 514, 1024))  # K not a multiple of 4
    assert not twice(_dense_model((31, 4096), 4096, 1024))  # too few rows per block
    assert not twice(_dense_model((64, 512), 512, 512))  # too few multiply-adds for two levels


def test_the_epilogue_is_fused_into_the_output_transform_through_the_rows_view() -> None:
    p = prepare(_dense_model((1, 65, 256), 256, 1024), forms="strassen")
    labels = sorted(t.label for t in p.tasks)
    # the input transform is the product's prologue (formed tile by tile where the product needs it)
    assert labels == ["strassen_in_matmul[7x33x128,7x128x512,7x33x512]", "strassen_out_add_gelu[65x2x512]"]
    assert {n + s for n in p.forms for s in SUFFIXES} <= {n.name for n in p.graph.nodes}
    assert "1 matmul as Strassen" in p.describe()


@pytest.mark.parametrize(("a_shape", "k", "n", "form"), [(*SHAPES[0], "strassen"), (*SHAPES[1], "strassen"),
                                                       (*SHAPES2[1], "strassen2")],
                         ids=["2d", "3d-odd", "3d-odd-x2"])
def test_every_kernel_of_the_form_matches_numpy_in_sampled_configs(a_shape, k: int, n: int, form: str,  # noqa: ANN001
                                                                   check_kernel, host_target) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    for task in prepare(_dense_model(a_shape, k, n), forms=form).tasks:
        space = make_space(task.workload, host_target)
        # (two levels: their 49-copy transforms are slow to compile, so one sampled config)
        samples = 3 if form == "strassen" else 1
        configs = [space.default_config()] + [space.sample(rng) for _ in range(samples)]
        if task.label.startswith("strassen_in_matmul"):  # the sums inlined, a loop nest, tile by tile
            knob = next(k for k in space.knobs if k.name.startswith("inline_"))
            assert knob.choices == (1, 0, 2)
            configs += [c for c in ({**configs[0], knob.name: v} for v in knob.choices) if space.is_valid(c)]
            assert sum(c[knob.name] == 2 for c in configs) >= 1
        configs = [c for i, c in enumerate(configs) if c not in configs[:i]]  # each config once
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


def test_compile_takes_two_levels_only_when_asked_and_the_records_say_they_are_faster(
        tmp_path, tmp_path_factory) -> None:  # noqa: ANN001
    from autotune.target import cpu_target
    from records import TuningDatabase

    target, model = cpu_target(), _dense_model(*SHAPES2[1])
    ways = {"direct": prepare(model), "strassen": prepare(model, forms="strassen"),
            "strassen2": prepare(model, forms="strassen2")}
    # direct 4e-4 s; one level's three kernels 3e-4; two levels' 1.5e-4
    seconds = {"direct": 4e-4, "strassen": 1e-4, "strassen2": 5e-5}
    with TuningDatabase(tmp_path / "s.db") as db:
        for way, p in ways.items():
            for t in p.tasks:
                _record(db, t, target, seconds[way])
        chosen = {levels: compile_model(model, target, db, strassen=levels, verbose=False,
                                        cache_dir=str(tmp_path_factory.mktemp("modules")))
                  for levels in (1, 2)}
    assert chosen[1].summary.forms == {"dense": "strassen"}
    assert chosen[2].summary.forms == {"dense": "strassen2"}
    assert "1 matmul as Strassen x2" in chosen[2].summary.line()
    a = np.random.default_rng(3).standard_normal(SHAPES2[1][0]).astype(np.float32)
    (y1,) = chosen[1].run({"a": a})
    (y2,) = chosen[2].run({"a": a})
    ref = run_graph(load_model(model), {"a": a.astype(np.float64)})[0]
    for y in (y1, y2):
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_the_strassen_option_and_its_default_per_target() -> None:
    import argparse

    from autotune.cli.model import strassen_levels
    from autotune.graph.forms import default_forms
    from autotune.graph.ir import GraphError

    assert default_forms("cpu") == ("winograd2", "winograd4", "strassen")
    assert default_forms("cuda") == ("winograd2", "winograd4")
    assert default_forms("cpu", 0, False) == () and default_forms("cuda", (), True) == ("strassen",)
    assert default_forms("cpu", 0, 2) == ("strassen", "strassen2")
    with pytest.raises(GraphError, match="Strassen levels 3"):
        default_forms("cpu", 0, 3)
    assert [strassen_levels(t) for t in ("on", "1", "OFF", "0", "2")] == [1, 1, 0, 0, 2]
    with pytest.raises(argparse.ArgumentTypeError, match="on, off or 2"):
        strassen_levels("maybe")


def test_the_scheduler_sees_each_product_once_directly_and_once_as_its_form() -> None:
    from autotune.graph.tuning import model_tasks, scheduler_weights

    g = load_model("zoo:bert_layer")
    prepared = [prepare(g), prepare(g, forms="strassen")]
    weights, choices = scheduler_weights(prepared, model_tasks(prepared))
    # the Q, K, V product, the output and the two FFN products: direct one kernel; Strassen the
    # product with its input transform as its prologue and the output transform, but for the output
    # product, whose input transform takes the attention context's transpose instead
    assert len(choices) == len(prepared[1].forms) == 4
    kernels = sorted([sum(calls for _, calls in w) for w in ways] for ways in choices)
    assert kernels == [[1, 2], [1, 2], [1, 2], [1, 3]]
