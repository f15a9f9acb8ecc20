"""The untuned default schedule (schedules.defaults): for every task of the zoo models (every layout
and convolution form) and of the named ops, on the CPU and on a GPU, the rules give a config the
space accepts, the same one every time, with the structure the rules promise; the kernels built from
it compute the right numbers; both compile paths use it for a task with no records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune import te
from autotune.compile import build_kernel
from autotune.graph.compiler import choose_schedule, compile_model, prepare
from autotune.graph.interpreter import run_graph
from autotune.program import build_cuda_emulation, build_cuda_program, build_program
from autotune.schedule import AnnotateStep
from autotune.search.measure_batch import tolerances
from autotune.target import Target, offline_cuda_target
from schedules import CpuSketch, make_space
from schedules.defaults import largest_divisor, parallel_split, register_tile, tile_axes

GPU = offline_cuda_target("sm_90")
# (model, layout, algorithm form or None): every form a tuned or untuned compile may take
FORMS = [("zoo:resnet18", "NHWC", None), ("zoo:resnet18", "NCHW", None),
         ("zoo:resnet18", "NHWC", "winograd2"), ("zoo:resnet18", "NHWC", "winograd4"),
         ("zoo:bert_layer", "NHWC", None),
         ("zoo:bert_layer", "NHWC", "strassen"), ("zoo:mlp", "NHWC", None)]
# every named op, at small shapes that are awkward where they can be (odd, prime, not whole vectors)
NAMED = [
    ("add", "1000"), ("add_relu_mul", "7,40"), ("avg_pool2d", "1,8,9,9,3,2,1"),
    ("batch_matmul", "3,20,24,16"), ("bias_add_relu", "5,48"), ("conv2d", "1,6,9,9,16,3,3,1,1"),
    ("conv2d", "1,4,11,11,6,3,3,2,1,1,2"), ("conv2d_nhwc", "1,10,10,8,32,3,3,1,1"),
    ("conv2d_nhwc", "2,7,7,3,20,1,1,1,0"), ("dense", "33,40,24"), ("dense_bias", "16,64,48"),
    ("dense_bias_gelu", "8,48,32"), ("dense_bias_relu", "12,16,100"),
    ("depthwise_conv2d", "1,16,10,10,3,3,1,1"), ("gelu", "333"), ("global_avg_pool2d", "1,32,7,7"),
    ("layernorm", "6,96"), ("matmul", "48,64,40"),
    ("matmul", "37,19,23"), ("max_pool2d", "1,8,12,12,3,2,1"), ("mul", "64"), ("relu", "17"),
    ("softmax", "5,128"), ("softmax", "9,10"),
]


@pytest.fixture(scope="module")
def zoo_tasks() -> list:
    seen, out = set(), []
    for model, layout, form in FORMS:
        for task in prepare(model, layout, forms=form).tasks:
            if task.key not in seen:
                seen.add(task.key)
                out.append(task)
    return out


def _check_rules(space, cfg: dict, wl: te.Workload, target: Target) -> None:  # noqa: ANN001
    """What the CPU rules promise of a tiled reduction's config, checked from the space's own
    analysis: register tile one or two whole vectors wide on the contiguous axis, enough parallel
    tiles for the cores, the register tile unrolled, a constant operand packed."""
    sk = CpuSketch(wl, target)
    if sk.mode not in ("cache_write", "epilogue"):
        return
    lanes, last = target.vector_lanes, sk.tile_extents[-1]  # (padded where it has no useful tile)
    t3 = cfg[f"tile_{sk.axes[-1]}"][3]
    odd = (lanes // 2,) if last % (lanes // 2) == 0 else (largest_divisor(last, lanes),)
    assert t3 in ((lanes, 2 * lanes) if last % lanes == 0 else odd)
    par = math.prod(cfg[f"tile_{a}"][0] for a in sk.axes)
    assert par >= min(target.cores, math.prod(sk.extents) // lanes)
    assert cfg["unroll"] == 1
    assert cfg["pack"] == (f"{sk.prepackable[0]}@pre" if sk.prepackable else "none")


@pytest.mark.parametrize("target", [None, GPU], ids=["cpu", "cuda"])
def test_every_zoo_task_has_a_valid_deterministic_default_that_lowers(zoo_tasks, host_target, target) -> None:  # noqa: ANN001
    target = target or host_target
    kinds = set()
    for task in zoo_tasks:
        wl = task.workload
        space = make_space(wl, target)
        cfg = space.default_config()
        assert space.is_valid(cfg), (task.label, space.violated(cfg))
        assert make_space(wl, target).default_config() == cfg  # a fresh space: the same config
        steps = space.steps(cfg)
        if target.kind == "cpu":
            build_program(wl, steps, target)
            _check_rules(space, cfg, wl, target)
        else:
            build_cuda_program(wl, steps, target)
        kinds.add(space.name.split("/")[1])
    assert kinds >= {"simple", "epilogue", "cache_write"}


@pytest.mark.parametrize(("op", "shape"), NAMED, ids=[f"{o}-{s}" for o, s in NAMED])
def test_named_op_default_kernel_matches_numpy(op: str, shape: str, check_kernel, host_target) -> None:  # noqa: ANN001
    wl = te.make_workload(op, shape)
    space = make_space(wl, host_target)
    cfg = space.default_config()
    assert space.is_valid(cfg) and make_space(wl, host_target).default_config() == cfg
    _check_rules(space, cfg, wl, host_target)
    check_kernel(wl, space.steps(cfg))  # fresh random inputs against the float64 reference
    assert make_space(wl, GPU).is_valid(make_space(wl, GPU).default_config())


@pytest.mark.parametrize(("op", "shape"), [("matmul", "48,64,40"), ("dense_bias_gelu", "8,48,32"),
                                           ("conv2d_nhwc", "1,10,10,8,32,3,3,1,1"), ("softmax", "5,128"),
                                           ("layernorm", "6,96"), ("depthwise_conv2d", "1,16,10,10,3,3,1,1")])
def test_gpu_default_is_correct_in_emulation(op: str, shape: str, kernel_builder, kernel_runner) -> None:  # noqa: ANN001
    wl = te.make_workload(op, shape)
    space = make_space(wl, GPU)
    prog = build_cuda_emulation(wl, space.steps(space.default_config()), GPU)
    built = kernel_builder.build(prog.kernel_name, prog.source)
    assert built.ok, built.error_msg
    inputs = wl.random_inputs(np.random.default_rng())
    ref = wl.run_reference(inputs)
    rtol, atol = tolerances(ref)
    kernel_runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
    from autotune.measure import RunOptions

    res = kernel_runner.run(built.lib_path, prog.kernel_name, wl.key,
                            RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=60))
    assert res.error_kind is None, res.error_msg


def test_both_compile_paths_use_the_default_and_the_untuned_model_is_right(tmp_path, host_target,  # noqa: ANN001
                                                                          capsys) -> None:  # noqa: ANN001
    wl = te.make_workload("dense_bias_relu", "12,16,100")
    kernel = build_kernel(wl, host_target, None)
    assert not kernel.tuned and kernel.config == make_space(wl, host_target).default_config()
    assert "WARNING: no tuned schedule" in capsys.readouterr().err
    prepared = prepare("zoo:mlp", "NHWC")
    for task in prepared.tasks:
        choice = choose_schedule(task, host_target, None)
        assert not choice.tuned and choice.note == "no tuning record"
        assert choice.config == make_space(task.workload, host_target).default_config()
        if "registers" in choice.config and choice.config["registers"]:
            assert any(isinstance(s, AnnotateStep) and s.annotation == "registers" for s in choice.steps)
    module = compile_model(prepared, host_target, None, cache_dir=str(tmp_path), verbose=False)
    assert module.summary.tuned_calls == 0 and len(module.summary.fallback) == module.summary.tasks
    feeds = module.random_inputs(np.random.default_rng())
    (ours,) = module.run(feeds)
    (ref,) = run_graph(prepared.graph, feeds)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_rule_helpers() -> None:
    assert largest_divisor(56, 16) == 14 and largest_divisor(7, 16) == 7 and largest_divisor(13, 4) == 1
    # whole axes first, the last one only as far as needed
    assert parallel_split([1, 7, 4], [0, 1, 2], 8) == [1, 7, 2]
    assert parallel_split([32, 1, 7], [0, 1, 2], 8) == [8, 1, 1]
    # two vectors x 8 rows beats one vector x 14 rows (16 > 14 accumulators); 7 rows: 2 x 7
    assert register_tile([1, 56, 64], 16, 16) == [1, 8, 32]
    assert register_tile([1, 7, 512], 16, 16) == [1, 7, 32]
    assert register_tile([16, 10], 16, 16) == [16, 10]  # not whole vectors: up to one vector's width
    assert register_tile([128, 16], 16, 16) == [16, 16]  # only one vector fits the axis
    assert register_tile([1, 64, 14, 14], 16, 16, 1, [1, 2, 0]) == [1, 16, 1, 14]  # rows on axis 1 first


@pytest.mark.parametrize(("op", "shape", "first"), [("conv2d", "1,8,9,9,16,3,3,1,1", "ff"),
                                                    ("conv2d_nhwc", "1,9,9,8,16,3,3,1,1", "x"),
                                                    ("matmul", "32,48,40", "i")])
def test_tiles_pair_the_innermost_axis_with_one_that_indexes_another_operand(op: str, shape: str, first: str,
                                                                             host_target) -> None:  # noqa: ANN001
    sk = CpuSketch(te.make_workload(op, shape), host_target)
    assert sk.axes[tile_axes(sk)[0]] == first
