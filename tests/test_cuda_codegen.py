"""CUDA code generation without a GPU: nvcc compiles the generated kernels, the source has the GPU
constructs, and the GPU lowering computes the right numbers when emulated on the CPU.
A GPU, when present, runs a tiny end-to-end tune."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune import te
from autotune.measure import Builder, CpuRunner, RunOptions
from autotune.measure.cuda_device import has_cuda_device
from autotune.program import build_cuda_emulation, build_cuda_program
from autotune.search.measure_batch import tolerances
from autotune.target import offline_cuda_target
from schedules import make_space

TARGET = offline_cuda_target("sm_90")
MATMUL_CFG = {
    "tile_i": [2, 8, 2, 2],
    "tile_j": [2, 4, 2, 4],
    "tile_k": [8, 8],
    "fetch_vector": 4,
    "pad": 4,
    "unroll_k": 1,
    "shared_layout": 0,
    "local_cache": 0,
    "stages": 1,
}
# the classic SGEMM shape: A stored k-major in shared memory, per-k register fragments
FRAGMENT_CFG = {
    "tile_i": [8, 16, 2, 4],
    "tile_j": [8, 16, 2, 4],
    "tile_k": [128, 8],
    "fetch_vector": 4,
    "pad": 4,
    "unroll_k": 1,
    "shared_layout": 1,
    "local_cache": 1,
    "stages": 1,
}
SOFTMAX_CFG = {"threads": 128, "vector": 4}
# a 3x3 conv with its padded input staged in shared memory (halo tile, padding in the fetch)
CONV_STAGED_CFG = {
    "tile_b": [1, 1, 1, 1],
    "tile_ff": [4, 4, 4, 1],
    "tile_y": [14, 4, 1, 1],
    "tile_x": [2, 7, 1, 4],
    "tile_rc": [16, 4],
    "tile_ry": [1, 3],
    "tile_rx": [1, 3],
    "fetch_vector": 1,
    "pad": 0,
    "unroll_k": 0,
    "shared_layout": 0,
    "local_cache": 1,
    "stage_padded": 1,
    "stages": 1,
}


def cuda_source(op: str, shape: str, config: dict) -> str:
    wl = te.make_workload(op, shape)
    space = make_space(wl, TARGET)
    assert space.is_valid(config), space.violated(config)
    return build_cuda_program(wl, space.steps(config), TARGET).source


def test_matmul_source_has_gpu_constructs() -> None:
    src = cuda_source("matmul", "64,64,64", MATMUL_CFG)
    for needle in (
        'extern "C" __global__',
        "__launch_bounds__(32)",
        "__shared__ float A_shared",
        "__syncthreads();",
        "blockIdx.x",
        "threadIdx.x",
        "*(float4*)(A_shared +",
    ):
        assert needle in src, needle
    # the accumulator is a register array, not shared memory
    assert "float matmul_local[" in src and "__shared__ float matmul_local" not in src


def test_register_fragments_load_float4_from_a_transposed_tile() -> None:
    src = cuda_source("matmul", "1024,1024,1024", FRAGMENT_CFG)
    # A is stored [k][i] (row stride 128 + 4 pad) and fetched in A's own order (coalesced reads)
    assert "__shared__ float A_shared[1056]" in src
    assert "float A_shared_local[8]" in src and "float B_shared_local[8]" in src
    assert "*(float4*)(A_shared_local + 0) = (*(const float4*)(A_shared +" in src
    assert "*(float4*)(B_shared_local + 4) = (*(const float4*)(B_shared +" in src
    # the inner product reads only registers
    inner = src[src.index("float B_shared_local[8]") :]
    assert "at_bcast4(A_shared_local[" in inner and "at_bcast4(A_shared[" not in inner


def test_softmax_source_uses_warp_shuffles() -> None:
    src = cuda_source("softmax", "64,256", SOFTMAX_CFG)
    assert "__shfl_xor_sync" in src and "at_red[" in src
    assert src.count('extern "C" __global__') == 1, "row max, exp-sum and normalize fuse into one kernel"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize(
    ("op", "shape", "config"),
    [
        ("matmul", "64,64,64", MATMUL_CFG),
        ("matmul", "1024,1024,1024", FRAGMENT_CFG),
        ("softmax", "64,256", SOFTMAX_CFG),
        ("layernorm", "32,256", {"threads": 64, "vector": 4}),
        # rows shorter than a warp: shuffles over 16 live lanes / one shared slot per thread (24)
        ("softmax", "4,16", {"threads": 64, "vector": 1}),
        ("layernorm", "4,24", {"threads": 64, "vector": 1}),
        ("add_relu_mul", "64,256", {"threads": 256, "vector": 4}),
        ("conv2d", "1,64,56,56,64,3,3,1,1", CONV_STAGED_CFG),
        # shared tiles in a ring filled by cp.async (16-byte and 4-byte copies, zero-filled padding)
        ("matmul", "1024,1024,1024", dict(FRAGMENT_CFG, stages=3)),
        ("matmul", "64,64,64", dict(MATMUL_CFG, stages=2)),
        ("conv2d", "1,64,56,56,64,3,3,1,1", dict(CONV_STAGED_CFG, stages=2)),
    ],
)
def test_generated_cuda_compiles_with_nvcc(tmp_path: Path, op: str, shape: str, config: dict) -> None:
    _assert_nvcc_builds(tmp_path, cuda_source(op, shape, config))


def _assert_nvcc_builds(tmp_path: Path, source: str) -> None:
    """``source`` compiles to a non-empty cubin for sm_90."""
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    r = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(cu)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "k.cubin").stat().st_size > 0


@pytest.fixture(scope="module")
def runner():
    with CpuRunner() as r:
        yield r


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    from autotune.measure import BuildOptions

    with Builder(BuildOptions(cache_dir=tmp_path_factory.mktemp("emu-cache"))) as b:
        yield b


@pytest.mark.parametrize(
    ("op", "shape", "samples"),
    [
        ("matmul", "48,40,24", 3),
        ("dense_bias_gelu", "16,24,20", 2),
        ("conv2d", "1,6,9,9,8,3,3,1,1", 2),
        ("conv2d", "1,4,9,9,6,3,3,2,1", 1),
        ("softmax", "5,40", 2),
        ("layernorm", "6,36", 2),
        ("add_relu_mul", "12,20", 2),
        ("max_pool2d", "1,3,7,7,3,2,1", 1),
    ],
)
def test_gpu_lowering_is_correct_in_emulation(op: str, shape: str, samples: int, builder, runner) -> None:
    wl = te.make_workload(op, shape)
    space = make_space(wl, TARGET)
    rng = np.random.default_rng()
    inputs = wl.random_inputs(rng)
    ref = wl.run_reference(inputs)
    rtol, atol = tolerances(ref)
    runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
    for _ in range(samples):
        cfg = space.sample(rng)
        prog = build_cuda_emulation(wl, space.steps(cfg), TARGET)
        b = builder.build(prog.kernel_name, prog.source)
        assert b.error_kind is None, b.error_msg
        r = runner.run(
            b.lib_path,
            prog.kernel_name,
            wl.key,
            RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=120),
        )
        assert r.error_kind is None, (cfg, r.error_msg)


@pytest.mark.parametrize(
    ("op", "shape", "forced"),
    [
        ("matmul", "48,40,24", {"shared_layout": 1, "local_cache": 1}),
        ("dense_bias_gelu", "16,24,20", {"shared_layout": 1, "local_cache": 1}),
        ("conv2d", "1,6,9,9,8,3,3,1,1", {"shared_layout": 1, "local_cache": 1}),
        # the padded input staged in shared memory, its halo and padding computed by the fetch
        ("conv2d", "1,6,9,9,8,3,3,1,1", {"stage_padded": 1, "local_cache": 1}),
        ("conv2d", "1,4,11,11,6,3,3,2,1", {"stage_padded": 1, "local_cache": 0}),
    ],
)
def test_forced_knobs_are_correct_in_emulation(op: str, shape: str, forced: dict, builder, runner) -> None:
    wl = te.make_workload(op, shape)
    space = make_space(wl, TARGET)
    rng = np.random.default_rng()
    cfg = _sample_with(space, forced, rng)
    if forced.get("stage_padded"):
        src = build_cuda_program(wl, space.steps(cfg), TARGET).source
        assert "__shared__ float pad_shared[" in src
    error = _check_in_emulation(wl, space, cfg, builder, runner, rng)
    assert error is None, (cfg, error)


def test_pipelined_tiles_are_copied_asynchronously() -> None:
    src = cuda_source("matmul", "1024,1024,1024", dict(FRAGMENT_CFG, stages=3))
    # a ring of 3 tiles of A ([k][i], 8 x (128 + 4 pad)) and of B
    assert "__shared__ float A_shared[3168]" in src
    body = src[src.index('extern "C" __global__') :]
    # B's tile is copied in 16-byte pieces, A's (stored transposed) one element at a time
    assert "AT_CP_ASYNC16(B_shared + " in body and "AT_CP_ASYNC4(A_shared + " in body
    assert body.count("AT_CP_COMMIT();") == 2 and "AT_CP_WAIT(1);" in body
    # the stage-1 kernel has none of it
    plain = cuda_source("matmul", "1024,1024,1024", FRAGMENT_CFG)
    assert "AT_CP_" not in plain[plain.index('extern "C" __global__') :]


def test_a_ring_beyond_48_kib_is_dynamic_shared_memory(tmp_path: Path) -> None:
    wl = te.make_workload("matmul", "1024,1024,1024")
    space = make_space(wl, TARGET)
    big = dict(FRAGMENT_CFG, tile_k=[64, 16], stages=3)  # 3 x (16 x 132 + 16 x 132) floats: 50,688 bytes
    assert space.is_valid(big), space.violated(big)
    assert not space.is_valid(dict(big, stages=1, tile_k=[8, 128]))  # one set of tiles stays within 48 KiB
    prog = build_cuda_program(wl, space.steps(big), TARGET)
    assert prog.kernels[0].shared_bytes == 50688
    assert "extern __shared__ __align__(16) unsigned char at_smem[];" in prog.source
    assert "float* __restrict__ B_shared = (float*)(at_smem + 25344);" in prog.source
    assert "__shared__ float A_shared" not in prog.source
    small = build_cuda_program(wl, space.steps(dict(FRAGMENT_CFG, stages=3)), TARGET)
    assert small.kernels[0].shared_bytes == 0 and "__shared__ float A_shared[3168]" in small.source
    if shutil.which("nvcc") is not None:
        _assert_nvcc_builds(tmp_path, prog.source)


def _check_in_emulation(wl, space, cfg, builder, runner, rng) -> str | None:  # noqa: ANN001
    """The emulated kernel of ``cfg`` against the float64 reference: None, or the error."""
    inputs = wl.random_inputs(rng)
    ref = wl.run_reference(inputs)
    rtol, atol = tolerances(ref)
    runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
    prog = build_cuda_emulation(wl, space.steps(cfg), TARGET)
    b = builder.build(prog.kernel_name, prog.source)
    assert b.error_kind is None, b.error_msg
    r = runner.run(b.lib_path, prog.kernel_name, wl.key,
                   RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=120))
    return r.error_msg if r.error_kind else None


def _sample_with(space, forced: dict, rng) -> dict:  # noqa: ANN001
    for _ in range(500):
        cfg = dict(space.sample(rng), **forced)
        if space.is_valid(cfg):
            return cfg
    raise AssertionError(f"no valid config with {forced}")


@pytest.mark.parametrize(
    ("op", "shape", "forced"),
    [
        ("matmul", "48,40,24", {"stages": 2, "fetch_vector": 4}),
        ("matmul", "64,64,64", {"stages": 3}),
        ("dense_bias_gelu", "16,24,20", {"stages": 3, "local_cache": 1}),
        # three reduction axes fused into the one pipelined loop; the padding zero-filled by the copy
        ("conv2d", "1,6,9,9,8,3,3,1,1", {"stages": 2, "stage_padded": 1}),
        ("conv2d", "1,4,11,11,6,3,3,2,1", {"stages": 3, "stage_padded": 0}),
        ("batch_matmul", "2,24,16,20", {"stages": 2}),
    ],
)
def test_pipelined_tiles_are_correct_in_emulation(op: str, shape: str, forced: dict, builder, runner) -> None:
    wl = te.make_workload(op, shape)
    space = make_space(wl, TARGET)
    rng = np.random.default_rng()
    for _ in range(2):
        cfg = _sample_with(space, forced, rng)
        assert "AT_CP_ASYNC" in build_cuda_program(wl, space.steps(cfg), TARGET).source.split("__global__")[1]
        assert _check_in_emulation(wl, space, cfg, builder, runner, rng) is None, cfg


def test_a_pipeline_that_reads_before_its_copies_land_is_caught(builder, runner, monkeypatch) -> None:
    """The emulation performs a copy only when a wait retires its group: waiting for one group too
    few leaves the tile about to be read unfilled, and the check fails."""
    lower = importlib.import_module("autotune.ir.lower")  # the module (autotune.ir exports a function)
    wl = te.make_workload("matmul", "64,64,64")
    space = make_space(wl, TARGET)
    rng = np.random.default_rng(0)
    cfg = _sample_with(space, {"stages": 2, "tile_k": [8, 8]}, rng)
    assert _check_in_emulation(wl, space, cfg, builder, runner, rng) is None
    monkeypatch.setattr(lower, "pipeline_wait", lambda depth: depth - 1)
    assert _check_in_emulation(wl, space, cfg, builder, runner, rng) is not None


@pytest.mark.skipif(not has_cuda_device(), reason="no CUDA device")
def test_pipelined_tiles_run_right_on_the_gpu() -> None:
    """Rings in static and in dynamic shared memory (opted in above 48 KiB), measured on the device
    and checked against float64."""
    from autotune.cli.common import measure_tools, resolve_target
    from autotune.search.measure_batch import WorkloadMeasurer

    target = resolve_target("cuda")
    wl = te.make_workload("matmul", "1024,1024,1024")
    space = make_space(wl, target)
    configs = [dict(FRAGMENT_CFG, stages=3), dict(FRAGMENT_CFG, tile_k=[64, 16], stages=3),
               dict(MATMUL_CFG, stages=2)]
    builder, runner = measure_tools(target)
    with builder, runner:
        measurer = WorkloadMeasurer(wl, target, builder, runner)
        trials = list(measurer.measure(configs, [space.steps(c) for c in configs]))
    assert [t.error_kind for t in trials] == [None] * 3, [t.error_msg for t in trials]


@pytest.mark.skipif(not has_cuda_device(), reason="no CUDA device")
def test_tune_on_the_gpu(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [
            sys.executable,
            str(root / "scripts" / "tune.py"),
            "--target",
            "cuda",
            "--op",
            "matmul",
            "--shape",
            "128,96,64",
            "--trials",
            "6",
            "--db",
            str(tmp_path / "g.db"),
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["target_kind"] == "cuda" and out["valid"] >= 1 and out["best_gflops"] > 0


def test_every_valid_config_of_an_anchor_reading_only_inlined_operands_lowers() -> None:
    """Attention's scores read Q and K through inlined slices and transposes: with no shared copy
    (``stage_padded`` off) there is no tile ring to fill, so deeper ``stages`` are invalid there
    instead of failing to lower; every config the space calls valid lowers."""
    from autotune.graph.compiler import prepare

    wl = next(t.workload for t in prepare("zoo:bert_layer", "NHWC").tasks
              if t.workload.name.startswith("slice_slice_transpose_transpose_batch_matmul"))
    space = make_space(wl, TARGET)
    rng = np.random.default_rng(0)
    tried = refused = 0
    for _ in range(12):
        cfg = space.sample(rng)
        for stages in (1, 2, 3):
            c = dict(cfg, stages=stages)
            if not space.is_valid(c):
                refused += 1
                assert not c.get("stage_padded") and stages > 1, space.violated(c)
                continue
            build_cuda_program(wl, space.steps(c), TARGET)
            tried += 1
    assert tried >= 12 and refused >= 1
