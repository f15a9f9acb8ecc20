"""Concatenations computed in place (autotune/graph/inplace.py): the producers of a Concat's inputs
write straight into their slices of its buffer, and no copy kernel runs; a Concat whose inputs are
read elsewhere too stays a copy. Compiled modules are checked against the numpy interpreter on
fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import build_graph

from autotune.graph import compile_model
from autotune.graph.compiler import prepare
from autotune.graph.interpreter import run_graph
from autotune.graph.ir import Graph, Node
from autotune.ir.lower import lower
from autotune.schedule import ScheduleError
from autotune.schedule.state import Schedule
from autotune.te import make_workload

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def fire(side: int = 7) -> Graph:
    """A SqueezeNet fire module and an Inception-like block after it: a 1x1 and a 3x3 branch
    concatenated on channels, then three branches (one of them a max pool) concatenated again and
    read by a convolution; then a Concat whose input is also read by another node, inside a
    Concat of Concats: copies."""
    c = 16
    return build_graph(
        [
            Node("Conv", ["x", "ws"], ["s"], {"kernel_shape": [1, 1]}, "squeeze"),
            Node("Relu", ["s"], ["sr"], name="sr"),
            Node("Conv", ["sr", "w1"], ["e1"], {"kernel_shape": [1, 1]}, "e1"),
            Node("Conv", ["sr", "w3"], ["e3"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "e3"),
            Node("Concat", ["e1", "e3"], ["fire"], {"axis": 1}, "cat_fire"),
            Node("Conv", ["fire", "wa"], ["a"], {"kernel_shape": [1, 1]}, "a"),
            Node("Conv", ["fire", "wb"], ["b"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "b"),
            Node("MaxPool", ["fire"], ["p"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "pool"),
            Node("Concat", ["a", "b", "p"], ["mixed"], {"axis": 1}, "cat_mixed"),
            Node("Conv", ["mixed", "wo"], ["y"], {"kernel_shape": [1, 1]}, "out_conv"),
            Node("Conv", ["x", "wc"], ["shared"], {"kernel_shape": [1, 1]}, "shared"),
            Node("Concat", ["shared", "y"], ["cat_copy"], {"axis": 1}, "cat_copy"),
            Node("Sigmoid", ["shared"], ["gate"], name="gate"),
            Node("Concat", ["cat_copy", "gate"], ["out"], {"axis": 1}, "cat_out"),
        ],
        {"x": (1, 8, side, side)},
        ["out"],
        {"ws": f32(c, 8, 1, 1), "w1": f32(c, c, 1, 1), "w3": f32(c, c, 3, 3), "wa": f32(c, 2 * c, 1, 1),
         "wb": f32(2 * c, 2 * c, 3, 3), "wo": f32(c, 5 * c, 1, 1), "wc": f32(c, 8, 1, 1)},
    )


def test_concats_are_written_in_place_where_their_inputs_are_theirs_alone() -> None:
    g = fire()
    copy = prepare(g, "NHWC")
    placed = prepare(g, "NHWC", in_place=True)
    concats = [c for c in placed.calls if "Concat" in c.group.ops]
    # cat_copy reads `shared`, which the Sigmoid reads too: it stays a copy, fused with cat_out
    assert [(c.group.output, c.group.ops.count("Concat")) for c in concats] == [("out", 2)]
    assert sum(c.group.ops.count("Concat") for c in copy.calls) == 4
    views = {c.args[-1]: c.view for c in placed.calls if c.view is not None}
    assert sorted(views) == ["a", "b", "e1", "e3", "p"]
    assert views["e3"].into == "fire" and views["e3"].offset == (0, 0, 0, 16)
    assert views["p"].into == "mixed" and views["p"].offset == (0, 0, 0, 48)
    assert views["p"].shape == (1, 7, 7, 80)
    assert len(placed.calls) == len(copy.calls) - 2


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_a_model_with_concats_in_place_computes_what_the_interpreter_does(tmp_path, layout: str) -> None:  # noqa: ANN001
    g = fire()
    for _ in range(2):  # fresh inputs each time
        x = f32(1, 8, 7, 7)
        (ref,) = run_graph(g, {"x": x})
        module = compile_model(g, cache_dir=str(tmp_path), verbose=False, layout=layout)
        assert sum(c.view is not None for c in module.prepared.calls) == 5
        (got,) = module.run({"x": x})
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_a_concat_that_is_a_graph_output_is_written_in_place_into_the_callers_array(tmp_path) -> None:  # noqa: ANN001
    g = build_graph(
        [Node("Conv", ["x", "w1"], ["a"], {"kernel_shape": [1, 1]}, "c1"),
         Node("Conv", ["x", "w2"], ["b"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "c2"),
         Node("Concat", ["a", "b"], ["out"], {"axis": 1}, "cat")],
        {"x": (1, 3, 6, 6)}, ["out"], {"w1": f32(5, 3, 1, 1), "w2": f32(11, 3, 3, 3)},
    )
    x = f32(1, 3, 6, 6)
    (ref,) = run_graph(g, {"x": x})
    module = compile_model(g, cache_dir=str(tmp_path), verbose=False, layout="NCHW")  # no transpose after
    assert [c.group.ops for c in module.prepared.calls if "Concat" in c.group.ops] == []
    assert all(module.plan.storage[v].kind == "output" for v in ("a", "b"))
    (got,) = module.run({"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_a_view_that_does_not_hold_the_output_is_refused() -> None:
    wl = make_workload("add", "7")
    sch = Schedule(wl.outputs)
    with pytest.raises(ScheduleError, match="does not fit"):
        lower(sch, wl.args, views={len(wl.args) - 1: ((10,), (4,))})
