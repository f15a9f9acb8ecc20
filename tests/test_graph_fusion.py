"""Fusion rules, task extraction (shared tasks, rebuild from the DB description, te == numpy), the
memory planner and the task scheduler."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnx")

from autotune.graph.compiler import prepare  # noqa: E402
from autotune.graph.fusion import fuse  # noqa: E402
from autotune.graph.ir import Graph, Node, TensorType  # noqa: E402
from autotune.graph.memory import place, plan_memory  # noqa: E402
from autotune.graph.passes import infer_types  # noqa: E402
from autotune.graph.scheduler import GradientScheduler  # noqa: E402
from autotune.te import workload_from_description  # noqa: E402
from autotune.te.evaluate import evaluate_workload  # noqa: E402

SMALL_RESNET = "zoo:resnet18?image=32,width=8"
SMALL_BERT = "zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64"


def graph(
    nodes: list[Node], inputs: dict[str, tuple], outputs: list[str], consts: dict | None = None
) -> Graph:
    consts = {k: np.asarray(v, dtype=np.float32) for k, v in (consts or {}).items()}
    types = {k: TensorType(tuple(s)) for k, s in inputs.items()}
    types.update({k: TensorType(tuple(v.shape)) for k, v in consts.items()})
    return infer_types(Graph("t", list(inputs), outputs, nodes, types, consts))


def test_epilogue_side_input_and_boundary_between_anchors() -> None:
    g = graph(
        [
            Node("MatMul", ["x", "w"], ["mm"]),
            Node("Add", ["mm", "b"], ["mb"]),
            Node("Sigmoid", ["r"], ["sr"]),  # elementwise branch of a graph input: a side input
            Node("Add", ["mb", "sr"], ["s"]),
            Node("Relu", ["s"], ["y"]),
            Node("Tanh", ["y"], ["t1"]),
            Node("MatMul", ["y", "w"], ["t2"]),  # y also feeds a second anchor: two kernels
            Node("Add", ["t1", "t2"], ["out"]),
        ],
        {"x": (4, 6), "r": (4, 6)},
        ["out"],
        {"w": np.ones((6, 6)), "b": np.ones(6)},
    )
    groups = fuse(g)
    assert [grp.ops for grp in groups] == [
        ["MatMul", "Add", "Sigmoid", "Add", "Relu"],
        ["Tanh", "MatMul", "Add"],
    ]
    assert [grp.output for grp in groups] == ["y", "out"]


def test_a_diamond_of_elementwise_consumers_fuses_into_the_epilogue() -> None:
    g = graph(
        [
            Node("MatMul", ["x", "w"], ["y"]),
            Node("Tanh", ["y"], ["t1"]),
            Node("Exp", ["y"], ["t2"]),
            Node("Add", ["t1", "t2"], ["out"]),
            Node("Relu", ["y"], ["other"]),
        ],
        {"x": (4, 8)},
        ["out", "other"],
        {"w": np.ones((8, 6))},
    )
    assert [grp.ops for grp in fuse(g)] == [["MatMul"], ["Tanh", "Exp", "Add"], ["Relu"]]
    g.outputs = ["out"]
    g.nodes = g.nodes[:4]
    assert [grp.ops for grp in fuse(g)] == [["MatMul", "Tanh", "Exp", "Add"]]


def test_an_anchor_never_absorbs_a_broadcasting_epilogue_or_a_second_anchor() -> None:
    g = graph(
        [
            Node("MatMul", ["x", "w"], ["mm"]),
            Node("Add", ["mm", "big"], ["wide"]),  # [4,6] + [3,4,6] -> a bigger shape: not an epilogue
            Node("MatMul", ["wide", "w2"], ["mm2"]),
        ],
        {"x": (4, 8), "big": (3, 4, 6)},
        ["mm2"],
        {"w": np.ones((8, 6)), "w2": np.ones((6, 2))},
    )
    assert [grp.ops for grp in fuse(g)] == [["MatMul"], ["Add"], ["MatMul"]]


def test_bert_groups_prologue_transposes_and_epilogues() -> None:
    p = prepare(SMALL_BERT)
    names = [t.workload.name for t in p.tasks]
    # Q and K sliced from the merged Q/K/V product, their head transposes, the scale and the mask
    assert "slice_slice_transpose_transpose_batch_matmul_div" in names
    scores = next(g for g in p.groups if "Softmax" not in (n.op for n in g.nodes)
                  and [n.op for n in g.nodes].count("Slice") == 2)
    assert [n.op for n in scores.nodes][-3:] == ["MatMul", "Div", "Add"]
    assert "matmul_add_gelu" in names and "layernorm" in names and "softmax" in names
    qkv = next(t for t in p.tasks if t.workload.name == "matmul_add" and t.weight == 1
               and t.workload.params["b"] == "32x96")
    assert qkv.workload.params["out"] == "1x16x96"
    assert sum(t.weight for t in p.tasks) == len(p.calls) == len(p.groups)


def test_identical_blocks_share_tasks_and_descriptions_rebuild() -> None:
    p = prepare(SMALL_RESNET)
    assert len(p.tasks) < len(p.calls)
    shared = [t for t in p.tasks if t.weight == 2]
    assert len(shared) >= 4 and all(t.workload.name.startswith("conv2d_bias") for t in shared)
    for t in p.tasks:
        rebuilt = workload_from_description(t.workload.description())
        assert rebuilt.key == t.key and rebuilt.name == t.workload.name


@pytest.mark.parametrize("spec", [SMALL_RESNET, SMALL_BERT, "zoo:mlp?batch=2,inputs=16,hidden=32,classes=8"])
def test_task_computations_match_their_numpy_reference(spec: str) -> None:
    for layout in ("NHWC", "NCHW") if "resnet" in spec else ("NHWC",):
        for t in prepare(spec, layout).tasks:
            wl = t.workload
            inputs = wl.random_inputs(np.random.default_rng(1))
            ref = wl.run_reference(inputs)
            (got,) = evaluate_workload(wl, inputs)
            np.testing.assert_allclose(got, ref[0], rtol=1e-6, atol=1e-6, err_msg=t.label)


def test_random_inputs_of_a_norm_reach_its_square_root_positive() -> None:
    """T5's RMS norm as exported: x^2 averaged (a kernel of its own: no elementwise op is
    recomputed inside a reduction), then mean + eps, its square root and 1 / that. The second
    task reads the squares: its random inputs must be positive, or the root of a negative mean
    makes every tuning candidate a wrong answer."""
    nodes = [Node("Pow", ["x", "two"], ["sq"], name="sq"),
             Node("ReduceMean", ["sq"], ["m"], {"axes": [-1], "keepdims": 1}, "mean"),
             Node("Add", ["m", "eps"], ["v"], name="eps"),
             Node("Sqrt", ["v"], ["r"], name="root"),
             Node("Div", ["one", "r"], ["inv"], name="inv"),
             Node("Mul", ["x", "inv"], ["y"], name="scale")]
    g = graph(nodes, {"x": (4, 16)}, ["y"], {"two": 2.0, "eps": 1e-6, "one": 1.0})
    tasks = {t.workload.name: t.workload for t in prepare(g).tasks}
    norm = next(wl for name, wl in tasks.items() if "sqrt" in name)
    assert norm.input_ranges == [(0.5, 1.5)]
    (got,) = evaluate_workload(norm, norm.random_inputs(np.random.default_rng(3)))
    assert np.isfinite(got).all()


def test_place_reuses_memory_of_dead_values_only() -> None:
    offsets, peak = place({"a": (0, 1, 1000), "b": (1, 2, 1000), "c": (2, 3, 1000), "d": (3, 4, 10)})
    assert offsets["a"] != offsets["b"] and offsets["b"] != offsets["c"]  # overlapping lifetimes
    assert offsets["a"] == offsets["c"]  # a is dead when c is born
    assert peak == 2 * 1024
    _, peak_all = place({k: (0, 4, 100) for k in "xyz"})
    assert peak_all == 3 * 128


def test_memory_plan_of_resnet_and_outputs_written_in_place() -> None:
    p = prepare(SMALL_RESNET)
    plan = plan_memory(p.graph, p.calls)
    assert plan.arena_bytes <= 0.5 * plan.naive_bytes
    out_root = p.calls[-1].args[-1]
    assert plan.storage[out_root].kind == "output" and not plan.output_copies
    for call in p.calls:  # a kernel's output never shares memory with its inputs
        spans = []
        for v in call.args:
            s = plan.storage.get(v)
            if s is not None and s.kind == "arena":
                spans.append((s.index, s.index + p.graph.types[v].nbytes))
        out = spans[-1] if plan.storage[call.args[-1]].kind == "arena" else None
        for lo, hi in spans[:-1] if out else []:
            assert hi <= out[0] or out[1] <= lo


def test_scheduler_warms_up_round_robin_then_follows_the_gradient() -> None:
    s = GradientScheduler([1, 1, 10], batch_size=4, epsilon=0.0)
    order = []
    for _ in range(3):
        i = s.next_task()
        order.append(i)
        s.finished_round(i)
        s.observe(i, 4, [1e-3, 1e-3, 1e-3][i])
    assert order == [0, 1, 2]
    assert s.next_task() == 2  # same latency, ten times the weight
    s.finished_round(0)
    s.observe(0, 8, 1e-5)  # task 0 is nearly free now: the others have more latency to win back
    assert s.gradient(1) < s.gradient(0)
    s.observe(1, 4, 1e-3, exhausted=True)
    assert 1 not in s.active()
    assert math.isclose(s.estimated_latency(), 1e-5 + 1e-3 + 10e-3)
    # same best latency and trials: the task that improved recently has the steeper gradient
    t = GradientScheduler([1, 1], batch_size=4, epsilon=0.0)
    for i, first in enumerate((2e-3, 1e-3)):
        t.observe(i, 4, first)
        t.observe(i, 8, 1e-3)
    assert t.gradient(0) < t.gradient(1)


def test_scheduler_tries_failing_tasks_a_few_times_only() -> None:
    s = GradientScheduler([1, 1], batch_size=2, epsilon=0.0, max_failed_rounds=2)
    for _ in range(2):
        s.finished_round(0)
        s.observe(0, 2, math.inf)
    s.finished_round(1)
    s.observe(1, 2, 1e-3)
    assert s.active() == [1] and s.next_task() == 1


def test_layout_choice_follows_the_estimated_latency(tmp_path) -> None:  # noqa: ANN001
    from autotune.graph.compiler import choose_layout, estimated_latency
    from autotune.search.tune import register
    from autotune.target import cpu_target
    from records import MeasurementRecord, TuningDatabase

    target = cpu_target()
    nhwc, nchw = prepare(SMALL_RESNET, "NHWC"), prepare(SMALL_RESNET, "NCHW")
    with TuningDatabase(tmp_path / "t.db") as db:
        assert choose_layout(SMALL_RESNET, target, db).layout == "NHWC"  # nothing tuned: the default
        for p, cost in ((nchw, 1e-4), (nhwc, 1e-3)):
            for t in p.tasks:
                register(db, t.workload, target)
                rec = MeasurementRecord(t.key, target.key, {"x": 1}, [], (cost,), None, verified=True)
                db.add_measurement(rec)
        assert estimated_latency(nchw.tasks, target, db) < estimated_latency(nhwc.tasks, target, db)
        assert choose_layout(SMALL_RESNET, target, db).layout == "NCHW"


def test_scheduler_spends_on_the_form_of_an_operator_that_wins() -> None:
    """Tasks 0 (shared), 1 (a convolution computed directly) and 2, 3 (its Winograd form)."""
    s = GradientScheduler([1, 0, 0, 0], batch_size=4, epsilon=0.0, choices=[[[(1, 1)], [(2, 1), (3, 1)]]])
    for i, best in enumerate((1e-3, 3e-3, 0.5e-3, 0.4e-3)):
        s.observe(i, 4, best)
        s.finished_round(i)
    # the Winograd form costs 0.9 ms against 3 ms: its tasks carry the convolution's weight
    assert s.weight(1) < 1e-6 and s.weight(2) == pytest.approx(1.0) and s.weight(3) == pytest.approx(1.0)
    assert s.estimated_latency() == pytest.approx(1e-3 + 0.9e-3)
    assert s.next_task() in (0, 2, 3) and s.gradient(1) > s.gradient(2)
    s.observe(1, 8, 0.9e-3)  # the direct form catches up: both forms are tuned side by side
    assert s.weight(1) == pytest.approx(0.5) and s.weight(2) == pytest.approx(0.5)
