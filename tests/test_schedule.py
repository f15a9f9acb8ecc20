"""Schedule primitives: each checked numerically against the float64 reference (odd sizes, so split
tails and clipped regions are exercised), illegal steps rejected with ScheduleError, and steps that
round-trip through dicts and JSON."""

from __future__ import annotations

import dataclasses
import json

import pytest

from autotune import te
from autotune.ir import lower
from autotune.ir.nodes import Allocate, For, IfThen, Seq, Stmt
from autotune.ir.passes import check_parallel
from autotune.program import build_program
from autotune.schedule import (
    AnnotateStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    ScheduleError,
    SplitStep,
    TileStep,
    apply_steps,
    parallel,
    step_from_dict,
    unroll,
    vectorize,
)
from autotune.schedule.steps import STEP_TYPES

ELEMWISE_INLINE = [ComputeInlineStep("add"), ComputeInlineStep("relu")]  # add_relu_mul -> one stage


def matmul():  # noqa: ANN201
    return te.make_workload("matmul", [37, 29, 19])  # no extent is a multiple of 8


def elemwise(m: int = 37, n: int = 29):  # noqa: ANN201
    """relu(a + b) * c over an m x n grid, as a single stage ``add_relu_mul`` with axes i0, i1."""
    return te.make_workload("add_relu_mul", [m, n])


def dense_bias_relu():  # noqa: ANN201
    return te.make_workload("dense_bias_relu", [13, 21, 11])


def leaf_names(wl, steps, stage: str) -> list[str]:  # noqa: ANN001
    return [lp.name for lp in apply_steps(wl.outputs, steps).stage(stage).leaf_loops]


def loops(s: Stmt) -> dict[str, tuple[int, str]]:
    """Loop variable name -> (extent, kind) over a statement tree."""
    out: dict[str, tuple[int, str]] = {}
    todo = [s]
    while todo:
        s = todo.pop()
        if isinstance(s, Seq):
            todo.extend(s.stmts)
        elif isinstance(s, For):
            out[s.var.name] = (s.extent, s.kind)
            todo.append(s.body)
        elif isinstance(s, (IfThen, Allocate)):
            todo.append(s.body)
    return out


def lowered_loops(wl, steps) -> dict[str, tuple[int, str]]:  # noqa: ANN001
    return loops(lower(apply_steps(wl.outputs, steps), wl.args).body)


# --- split ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("loop,extent", [("i", 37), ("j", 29), ("k", 19)])
def test_split_by_factor_with_tail(check_kernel, loop: str, extent: int) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [SplitStep("matmul", loop, 8)]
    expected = {"i": ["i.0", "i.1", "j", "k"], "j": ["i", "j.0", "j.1", "k"], "k": ["i", "j", "k.0", "k.1"]}
    assert leaf_names(wl, steps, "matmul") == expected[loop]
    ls = lowered_loops(wl, steps)
    assert ls[f"matmul_{loop}_0"][0] == -(-extent // 8) and ls[f"matmul_{loop}_1"][0] == 8
    check_kernel(wl, steps)


@pytest.mark.parametrize("loop,nparts,outer,inner", [("i", 4, 4, 10), ("j", 3, 3, 10), ("k", 50, 19, 1)])
def test_split_by_nparts(check_kernel, loop: str, nparts: int, outer: int, inner: int) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [SplitStep("matmul", loop, nparts=nparts)]
    assert f"{loop}.0" in leaf_names(wl, steps, "matmul")
    ls = lowered_loops(wl, steps)
    assert ls.get(f"matmul_{loop}_0", (1,))[0] == outer
    assert ls.get(f"matmul_{loop}_1", (1,))[0] == inner  # an extent-1 loop is simplified away
    check_kernel(wl, steps)


def test_split_elementwise_tail_twice(check_kernel) -> None:  # noqa: ANN001
    wl = elemwise()
    steps = ELEMWISE_INLINE + [SplitStep("add_relu_mul", "i1", 8),
                               SplitStep("add_relu_mul", "i1.0", nparts=2),
                               SplitStep("add_relu_mul", "i0", 5)]
    assert leaf_names(wl, steps, "add_relu_mul") == ["i0.0", "i0.1", "i1.0.0", "i1.0.1", "i1.1"]
    check_kernel(wl, steps)


# --- reorder / fuse / tile ---------------------------------------------------------------------------
@pytest.mark.parametrize("order", [("k", "j", "i"), ("j", "k", "i"), ("i", "k", "j")])
def test_reorder_matmul(check_kernel, order: tuple[str, ...]) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [ReorderStep("matmul", order)]
    assert leaf_names(wl, steps, "matmul") == list(order)
    check_kernel(wl, steps)


def test_reorder_partial_keeps_other_loops(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [SplitStep("matmul", "i", 8), ReorderStep("matmul", ("k", "i.0"))]
    # only the positions of the named loops are permuted
    assert leaf_names(wl, steps, "matmul") == ["k", "i.1", "j", "i.0"]
    check_kernel(wl, steps)


def test_reorder_elementwise(check_kernel) -> None:  # noqa: ANN001
    wl = elemwise()
    steps = ELEMWISE_INLINE + [ReorderStep("add_relu_mul", ("i1", "i0"))]
    assert leaf_names(wl, steps, "add_relu_mul") == ["i1", "i0"]
    check_kernel(wl, steps)


def test_fuse_spatial_loops(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [FuseStep("matmul", ("i", "j"))]
    assert leaf_names(wl, steps, "matmul") == ["i@j", "k"]
    assert lowered_loops(wl, steps)["matmul_i_j"][0] == 37 * 29
    check_kernel(wl, steps)


def test_fuse_then_split_with_tail(check_kernel) -> None:  # noqa: ANN001
    wl = elemwise()
    steps = ELEMWISE_INLINE + [FuseStep("add_relu_mul", ("i0", "i1")), SplitStep("add_relu_mul", "i0@i1", 16),
                               parallel("add_relu_mul", "i0@i1.0"), vectorize("add_relu_mul", "i0@i1.1")]
    ls = lowered_loops(wl, steps)
    assert ls["add_relu_mul_i0_i1_0"] == (-(-37 * 29 // 16), "parallel")
    check_kernel(wl, steps)


def test_fuse_reduction_loops(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("conv2d", [1, 3, 7, 7, 5, 3, 3, 1, 1])
    steps = [ComputeInlineStep("pad"), FuseStep("conv2d", ("rc", "ry")), SplitStep("conv2d", "rc@ry", 4),
             ReorderStep("conv2d", ("rc@ry.0", "rx", "rc@ry.1", "x"))]
    assert leaf_names(wl, steps, "conv2d")[-4:] == ["rc@ry.0", "rx", "rc@ry.1", "x"]
    check_kernel(wl, steps)


def test_tile(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [TileStep("matmul", "i", "j", 8, 5)]
    assert leaf_names(wl, steps, "matmul") == ["i.0", "j.0", "i.1", "j.1", "k"]
    ls = lowered_loops(wl, steps)
    assert [ls[f"matmul_{n}"][0] for n in ("i_0", "j_0", "i_1", "j_1")] == [5, 6, 8, 5]
    check_kernel(wl, steps)


# --- annotations ---------------------------------------------------------------------------------------
def test_parallel_outer_loop(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [parallel("matmul", "i")]
    prog = check_kernel(wl, steps)
    assert "#pragma omp parallel for" in prog.source
    assert loops(prog.func.body)["matmul_i"] == (37, "parallel")


def test_parallel_fused_tiles(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [TileStep("matmul", "i", "j", 8, 8), FuseStep("matmul", ("i.0", "j.0")),
             parallel("matmul", "i.0@j.0")]
    prog = check_kernel(wl, steps)
    assert loops(prog.func.body)["matmul_i_0_j_0"] == (5 * 4, "parallel")
    assert prog.source.count("#pragma omp parallel for") == 1


def test_vectorize_innermost_exact(check_kernel) -> None:  # noqa: ANN001
    wl = elemwise(9, 48)
    steps = ELEMWISE_INLINE + [SplitStep("add_relu_mul", "i1", 16), vectorize("add_relu_mul", "i1.1")]
    prog = check_kernel(wl, steps)
    assert "add_relu_mul_i1_1" not in prog.source  # the loop became vector statements
    assert "at_vstore(add_relu_mul" in prog.source


def test_vectorize_innermost_tail(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [SplitStep("matmul", "j", 8), ReorderStep("matmul", ("i", "j.0", "k", "j.1")),
             vectorize("matmul", "j.1")]
    prog = check_kernel(wl, steps)  # 29 = 3*8 + 5: guarded lanes
    assert loops(prog.func.body)["matmul_j_1"] == (8, "simd")


def test_vectorize_reduction_body(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("matmul", [37, 32, 19])
    steps = [SplitStep("matmul", "j", 16), ReorderStep("matmul", ("i", "j.0", "k", "j.1")),
             vectorize("matmul", "j.1")]
    prog = check_kernel(wl, steps)
    assert "at_vstore(matmul" in prog.source and "at_vload(B" in prog.source


def test_unroll(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [SplitStep("matmul", "i", 4), ReorderStep("matmul", ("i.0", "j", "k", "i.1")),
             unroll("matmul", "i.1")]
    prog = check_kernel(wl, steps)
    assert "matmul_i_1" not in prog.source


# --- inline / compute_at / caches ----------------------------------------------------------------------
def test_compute_inline_bias_add(check_kernel) -> None:  # noqa: ANN001
    wl = dense_bias_relu()
    steps = [ComputeInlineStep("bias_add")]
    sch = apply_steps(wl.outputs, steps)
    assert sch.stage("bias_add").inlined
    assert {t.name for t in sch.stage("relu").reads()} == {"dense", "bias"}
    prog = check_kernel(wl, steps)
    assert "bias_add" not in str(prog.func)


def test_compute_at_dense_epilogue(check_kernel) -> None:  # noqa: ANN001
    wl = dense_bias_relu()
    steps = [ComputeInlineStep("bias_add"), TileStep("relu", "i0", "i1", 4, 8),
             ComputeAtStep("dense", "relu", "i1.0"), SplitStep("dense", "k", 4),
             FuseStep("relu", ("i0.0", "i1.0")), parallel("relu", "i0.0@i1.0"), vectorize("relu", "i1.1")]
    sch = apply_steps(wl.outputs, steps)
    tgt, loop = sch.stage("dense").attach
    assert tgt.name == "relu" and loop.name == "i0.0@i1.0"  # the attachment followed the fuse
    check_kernel(wl, steps)


CONV = [1, 3, 7, 7, 5, 3, 3, 1, 1]
CONV_PAD_CASES = {
    "inlined": (CONV, [ComputeInlineStep("pad")]),
    "at_y_tail": (CONV, [SplitStep("conv2d", "y", 3), ComputeAtStep("pad", "conv2d", "y.0")]),
    "at_rc": (CONV, [ComputeAtStep("pad", "conv2d", "rc")]),
    "at_x_then_split": (CONV, [ComputeAtStep("pad", "conv2d", "x"), SplitStep("conv2d", "x", 3)]),
    "stride2_at_y": ([1, 3, 9, 9, 4, 3, 3, 2, 1], [SplitStep("conv2d", "y", 2),
                                                   ComputeAtStep("pad", "conv2d", "y.0"),
                                                   parallel("conv2d", "ff")]),
    "root_vectorized": ([1, 2, 6, 6, 3, 3, 3, 1, 1], [SplitStep("pad", "x", 4), vectorize("pad", "x.1")]),
}


@pytest.mark.parametrize("case", sorted(CONV_PAD_CASES))
def test_conv2d_pad_placement(check_kernel, case: str) -> None:  # noqa: ANN001
    shape, steps = CONV_PAD_CASES[case]
    check_kernel(te.make_workload("conv2d", shape), steps)


def test_cache_write_local_compute_at(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("dense", [13, 21, 11])
    steps = [CacheWriteStep("dense"), TileStep("dense", "i", "j", 4, 8),
             ComputeAtStep("dense_local", "dense", "j.0"), SplitStep("dense_local", "k", 4),
             ReorderStep("dense_local", ("k.0", "i", "k.1", "j")),
             vectorize("dense_local", "j"), FuseStep("dense", ("i.0", "j.0")), parallel("dense", "i.0@j.0")]
    sch = apply_steps(wl.outputs, steps)
    assert [s.name for s in sch.stages] == ["dense_local", "dense"]
    assert sch.stage("dense_local").scope == "local"
    assert [t.name for t in sch.stage("dense").reads()] == ["dense_local"]
    check_kernel(wl, steps)


def test_cache_write_then_unroll_and_vectorize(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("matmul", [20, 48, 17])
    steps = [CacheWriteStep("matmul"), TileStep("matmul", "i", "j", 6, 16),
             ComputeAtStep("matmul_local", "matmul", "j.0"), SplitStep("matmul_local", "k", 8),
             ReorderStep("matmul_local", ("k.0", "k.1", "i", "j")), unroll("matmul_local", "i"),
             vectorize("matmul_local", "j"), vectorize("matmul", "j.1")]
    check_kernel(wl, steps)


def dense_cache_read_steps() -> list:
    return [CacheWriteStep("dense"), CacheReadStep("W", ("dense_local",), (1, 0)),
            TileStep("dense", "i", "j", 4, 8), ComputeAtStep("dense_local", "dense", "j.0"),
            SplitStep("dense_local", "k", 4), ReorderStep("dense_local", ("k.0", "i", "k.1", "j")),
            ComputeAtStep("W_local", "dense_local", "k.0"), vectorize("dense_local", "j"),
            vectorize("W_local", "a1"), parallel("dense", "i.0")]


def test_cache_read_transposed_inside_compute_stage(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("dense", [13, 21, 11])
    steps = dense_cache_read_steps()
    sch = apply_steps(wl.outputs, steps)
    copy = sch.stage("W_local")
    assert copy.tensor.shape == (11, 21)  # W is [n, k]; the copy is [k, n]
    assert copy.attach[0].name == "dense_local" and copy.attach[1].name == "k.0"
    assert "W" not in {t.name for t in sch.stage("dense_local").reads()}
    check_kernel(wl, steps)


def test_cache_read_root_level(check_kernel) -> None:  # noqa: ANN001
    wl = matmul()
    steps = [CacheReadStep("B", ("matmul",), (1, 0)), SplitStep("matmul", "i", 8),
             ComputeAtStep("B_local", "matmul", "i.0")]
    check_kernel(wl, steps)


# --- illegal steps -----------------------------------------------------------------------------------
DBR_INLINED = [ComputeInlineStep("bias_add")]
ILLEGAL = {
    "split_factor_0": ("matmul", [SplitStep("matmul", "i", 0)]),
    "split_nparts_0": ("matmul", [SplitStep("matmul", "i", nparts=0)]),
    "split_negative": ("matmul", [SplitStep("matmul", "i", -2)]),
    "split_factor_and_nparts": ("matmul", [SplitStep("matmul", "i", 4, 2)]),
    "split_neither": ("matmul", [SplitStep("matmul", "i")]),
    "split_unknown_loop": ("matmul", [SplitStep("matmul", "q", 4)]),
    "split_stale_loop": ("matmul", [SplitStep("matmul", "i", 4), SplitStep("matmul", "i", 2)]),
    "split_unknown_stage": ("matmul", [SplitStep("nope", "i", 4)]),
    "split_annotated": ("matmul", [parallel("matmul", "i"), SplitStep("matmul", "i", 4)]),
    "fuse_not_adjacent": ("matmul", [FuseStep("matmul", ("i", "k"))]),
    "fuse_out_of_order": ("matmul", [FuseStep("matmul", ("j", "i"))]),
    "fuse_one_loop": ("matmul", [FuseStep("matmul", ("i",))]),
    "fuse_spatial_reduce": ("matmul", [FuseStep("matmul", ("j", "k"))]),
    "fuse_annotated": ("matmul", [unroll("matmul", "i"), FuseStep("matmul", ("i", "j"))]),
    "reorder_twice_named": ("matmul", [ReorderStep("matmul", ("i", "i"))]),
    "reorder_unknown": ("matmul", [ReorderStep("matmul", ("i", "z"))]),
    "vectorize_not_innermost": ("matmul", [vectorize("matmul", "j")]),
    "parallel_reduce": ("matmul", [parallel("matmul", "k")]),
    "unknown_annotation": ("matmul", [AnnotateStep("matmul", "i", "gpu_block")]),
    "annotate_twice_same": ("matmul", [parallel("matmul", "i"), parallel("matmul", "i")]),
    "annotate_twice_other": ("matmul", [parallel("matmul", "i"), unroll("matmul", "i")]),
    "inline_reduction": ("dense_bias_relu", [ComputeInlineStep("dense")]),
    "inline_output": ("dense_bias_relu", [ComputeInlineStep("relu")]),
    "inline_twice": ("dense_bias_relu", DBR_INLINED + [ComputeInlineStep("bias_add")]),
    "inline_attached": ("dense_bias_relu", [ComputeAtStep("bias_add", "relu", "i0"),
                                            ComputeInlineStep("bias_add")]),
    "inline_with_attached_stages": ("add_relu_mul", [ComputeAtStep("add", "relu", "i0"),
                                                     ComputeInlineStep("relu")]),
    "compute_at_not_consumer": ("dense_bias_relu", [ComputeAtStep("dense", "relu", "i0")]),
    "compute_at_not_only_consumer": ("softmax", [ComputeAtStep("softmax_max", "softmax", "i")]),
    "compute_at_output": ("matmul", [ComputeAtStep("matmul", "matmul", "i")]),
    "compute_at_twice": ("dense_bias_relu", DBR_INLINED + [ComputeAtStep("dense", "relu", "i0"),
                                                           ComputeAtStep("dense", "relu", "i1")]),
    "compute_at_unknown_loop": ("dense_bias_relu", DBR_INLINED + [ComputeAtStep("dense", "relu", "k")]),
    "compute_at_inlined_target": ("add_relu_mul", [ComputeInlineStep("relu"),
                                                   ComputeAtStep("add", "relu", "i0")]),
    "cache_write_after_split": ("matmul", [SplitStep("matmul", "i", 4), CacheWriteStep("matmul")]),
    "cache_write_after_annotate": ("matmul", [parallel("matmul", "i"), CacheWriteStep("matmul")]),
    "cache_write_twice": ("matmul", [CacheWriteStep("matmul"), CacheWriteStep("matmul")]),
    "cache_write_of_cache": ("matmul", [CacheWriteStep("matmul"), CacheWriteStep("matmul_local")]),
    "cache_write_scope": ("matmul", [CacheWriteStep("matmul", "shared")]),
    "cache_read_unknown": ("matmul", [CacheReadStep("Q", ("matmul",))]),
    "cache_read_not_reader": ("dense_bias_relu", [CacheReadStep("W", ("relu",))]),
    "cache_read_no_readers": ("matmul", [CacheReadStep("A", ())]),
    "cache_read_bad_layout": ("matmul", [CacheReadStep("A", ("matmul",), (0, 0))]),
    "cache_read_short_layout": ("matmul", [CacheReadStep("A", ("matmul",), (1,))]),
    "cache_read_twice": ("matmul", [CacheReadStep("A", ("matmul",)), CacheReadStep("A", ("matmul",))]),
    "cache_read_scope": ("matmul", [CacheReadStep("A", ("matmul",), None, "bogus")]),
}
SHAPES = {"matmul": [37, 29, 19], "dense_bias_relu": [13, 21, 11], "softmax": [5, 13],
          "add_relu_mul": [6, 10]}


@pytest.mark.parametrize("case", sorted(ILLEGAL))
def test_illegal_step_raises_schedule_error(case: str) -> None:
    op, steps = ILLEGAL[case]
    wl = te.make_workload(op, SHAPES[op])
    apply_steps(wl.outputs, steps[:-1])  # everything before the last step is legal
    with pytest.raises(ScheduleError) as err:  # any other exception type fails the test
        apply_steps(wl.outputs, steps)
    assert str(err.value)


@pytest.mark.parametrize("steps", [
    [CacheWriteStep("matmul")],  # the local stage is never placed
    [CacheReadStep("B", ("matmul",))],
], ids=["cache_write_unplaced", "cache_read_unplaced"])
def test_unplaced_local_stage_raises_at_lowering(steps: list, host_target) -> None:  # noqa: ANN001
    wl = matmul()
    apply_steps(wl.outputs, steps)
    with pytest.raises(ScheduleError, match="computed at a consumer loop"):
        build_program(wl, steps, host_target)


def test_nested_parallel_raises_at_lowering(check_kernel, host_target) -> None:  # noqa: ANN001
    wl = dense_bias_relu()
    base = [ComputeInlineStep("bias_add"), ComputeAtStep("dense", "relu", "i0"), parallel("relu", "i0")]
    check_kernel(wl, base)  # one parallel level is fine
    steps = base + [parallel("dense", "j")]
    func = lower(apply_steps(wl.outputs, steps), wl.args)  # legal step by step ...
    with pytest.raises(ScheduleError, match="nested parallel"):
        check_parallel(func.body)  # ... but the loop nest has a parallel loop inside a parallel loop
    with pytest.raises(ScheduleError, match="nested parallel"):
        build_program(wl, steps, host_target)


# --- serialisation -------------------------------------------------------------------------------------
ONE_OF_EACH = [
    SplitStep("matmul", "i", 8),
    SplitStep("matmul", "j", nparts=3),
    TileStep("matmul", "i", "j", 4, 16),
    ReorderStep("matmul", ("k", "i", "j")),
    FuseStep("matmul", ("i", "j")),
    AnnotateStep("matmul", "i", "parallel"),
    vectorize("matmul", "j.1"),
    unroll("matmul", "i.1"),
    ComputeAtStep("dense", "relu", "i1.0"),
    ComputeInlineStep("bias_add"),
    CacheWriteStep("matmul"),
    CacheReadStep("W", ("dense_local",), (1, 0)),
    CacheReadStep("A", ("matmul", "other")),
]


def example_step(cls: type) -> object:
    """An instance of a step type with every field set (from the field annotations)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        t = str(f.type)
        if "tuple" in t:
            kwargs[f.name] = (1, 0) if "tuple[int" in t else ("a", "b")
        elif t.startswith("int"):
            kwargs[f.name] = 3
        else:
            kwargs[f.name] = f"{f.name}_value"
    return cls(**kwargs)


def test_every_step_type_round_trips() -> None:
    assert {type(s).kind for s in ONE_OF_EACH} <= set(STEP_TYPES)
    assert len({type(s).kind for s in ONE_OF_EACH}) >= 9
    for s in ONE_OF_EACH + [example_step(cls) for cls in STEP_TYPES.values()]:
        d = s.to_dict()
        assert d["step"] == s.kind
        assert step_from_dict(d) == s
        back = step_from_dict(json.loads(json.dumps(d)))  # JSON turns tuples into lists
        assert back == s and hash(back) == hash(s) and type(back) is type(s)


def test_step_from_dict_rejects_unknown_step() -> None:
    with pytest.raises(ScheduleError):
        step_from_dict({"step": "teleport", "stage": "matmul"})
    with pytest.raises(ScheduleError):
        step_from_dict({"stage": "matmul"})


def test_replaying_step_dicts_gives_identical_source(host_target) -> None:  # noqa: ANN001
    wl = te.make_workload("dense", [13, 21, 11])
    steps = dense_cache_read_steps()
    text = json.dumps([s.to_dict() for s in steps])
    replayed = [step_from_dict(d) for d in json.loads(text)]
    assert replayed == steps
    wl2 = te.make_workload("dense", [13, 21, 11])  # a fresh, equal workload
    first = build_program(wl, steps, host_target)
    again = build_program(wl2, replayed, host_target)
    assert again.kernel_name == first.kernel_name
    assert again.source == first.source
    assert str(again.func) == str(first.func)
