"""Overlapping tiles: an axis whose extent has no useful tile size (a prime number of tokens, an
innermost axis that is not whole vectors) is tiled on a padded extent, its last tile shifted back to
end at the extent. The kernels are checked against the float64 reference on fresh random inputs:
the default config and sampled configs of each such space, and the split itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune import te
from autotune.ir.nodes import IfThen, VStore
from autotune.program import build_program
from autotune.schedule import SplitStep, vectorize
from schedules import CpuSketch, make_space
from schedules.cpu import padded_extent

# (op, shape): a ViT's 197 tokens as rows and as columns, a classifier of 1004 classes, an odd
# channel count, a prime row count in a fused epilogue
AWKWARD = [("matmul", "197,64,197"), ("dense_bias_gelu", "197,96,64"), ("dense", "3,1004,64"),
           ("conv2d_nhwc", "1,9,9,8,100,1,1,1,0"), ("dense_bias_relu", "41,32,40")]


def test_padded_extent_rules() -> None:
    assert padded_extent(197, 16, innermost=False) == 200  # prime: the next multiple of 8
    assert padded_extent(196, 16, innermost=False) == 196  # 4, 7, 14 divide it
    assert padded_extent(13, 16, innermost=False) == 13  # short: whole
    assert padded_extent(197, 16, innermost=True) == 208  # whole vectors
    assert padded_extent(40, 16, innermost=True) == 40  # a short row of whole half vectors
    assert padded_extent(104, 16, innermost=True) == 112  # a long one: whole vectors
    assert padded_extent(100, 16, innermost=True) == 112
    assert padded_extent(12, 16, innermost=True) == 12  # under one vector


def _store_kinds(s, out: dict) -> dict:  # noqa: ANN001 - an IR statement
    for child in getattr(s, "stmts", None) or [getattr(s, "body", None)]:
        if child is not None:
            _store_kinds(child, out)
    out[type(s).__name__] = out.get(type(s).__name__, 0) + 1
    return out


@pytest.mark.parametrize(("op", "shape"), AWKWARD, ids=[f"{o}-{s}" for o, s in AWKWARD])
def test_awkward_extents_tile_with_overlap_and_compute_right(op: str, shape: str, check_kernel,  # noqa: ANN001
                                                              host_target) -> None:  # noqa: ANN001
    wl = te.make_workload(op, shape)
    space = make_space(wl, host_target)
    sk = CpuSketch(wl, host_target)
    assert sk.padded, "an awkward extent is tiled on a padded one"
    cfg = space.default_config()
    assert space.is_valid(cfg)
    for a, e in zip(sk.axes, sk.extents):
        if a in sk.padded:  # a tile fits in the extent: the last one overlaps the one before it
            assert math.prod(cfg[f"tile_{a}"][1:]) <= e < math.prod(cfg[f"tile_{a}"])
    prog = check_kernel(wl, space.steps(cfg))
    kinds = _store_kinds(prog.func.body, {})
    assert kinds.get(VStore.__name__, 0) > 0 and IfThen.__name__ not in kinds, kinds
    rng = np.random.default_rng(7)
    for _ in range(3):  # sampled configs (other tile sizes, packs, orders) compute right too
        check_kernel(wl, space.steps(space.sample(rng)))


def test_overlapping_split_of_an_elementwise_stage_has_no_guard(check_kernel, host_target) -> None:  # noqa: ANN001
    wl = te.make_workload("gelu", "197")
    out = wl.outputs[0].name
    steps = [SplitStep(out, "i0", 16, overlap=True), vectorize(out, "i0.1")]
    prog = check_kernel(wl, steps)
    kinds = _store_kinds(prog.func.body, {})
    assert IfThen.__name__ not in kinds and kinds.get(VStore.__name__, 0) > 0, kinds
    guarded = build_program(wl, [SplitStep(out, "i0", 16), vectorize(out, "i0.1")], host_target)
    assert IfThen.__name__ in _store_kinds(guarded.func.body, {})


def test_an_overlapping_split_of_a_reduction_stays_guarded(check_kernel, host_target) -> None:  # noqa: ANN001
    # a reduction accumulates into what it stored: recomputing elements would count them twice
    wl = te.make_workload("matmul", "13,8,11")
    out = wl.outputs[0].name
    steps = [SplitStep(out, "i", 4, overlap=True)]
    prog = check_kernel(wl, steps)
    assert IfThen.__name__ in _store_kinds(prog.func.body, {})


@pytest.mark.parametrize(("op", "shape"), [("softmax", "6,197"), ("layernorm", "5,100"), ("softmax", "4,37")])
def test_rows_that_are_not_whole_vectors_reduce_and_store_in_vectors(op: str, shape: str, check_kernel,  # noqa: ANN001
                                                                     host_target) -> None:  # noqa: ANN001
    # a row of a few vectors and a tail: its reductions take vector lanes (the tail in scalar code)
    # and its output is stored in whole vectors, the last one overlapping the one before it
    wl = te.make_workload(op, shape)
    space = make_space(wl, host_target)
    cfg = space.default_config()
    assert cfg.get("vector_reduce") == 2
    prog = check_kernel(wl, space.steps(cfg))
    kinds = _store_kinds(prog.func.body, {})
    assert kinds.get(VStore.__name__, 0) > 0 and IfThen.__name__ not in kinds, kinds
    assert "at_hadd" in prog.source or "at_hmax" in prog.source  # the lanes of a reduction combined
    for vr in {0, 1, 2} & set(next(k.choices for k in space.knobs if k.name == "vector_reduce")):
        check_kernel(wl, space.steps(dict(cfg, vector_reduce=vr)))
