"""Tensor cores and 16-bit floats without a GPU: the C conversions round like the device, the
tensorized kernels carry mma.sync / ldmatrix / cp.async, compile with nvcc for sm_80 and sm_90,
and compute the float64 reference's numbers when their warp instructions are emulated per lane."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from autotune.codegen.lowp import C_PRELUDE
from autotune.codegen.tensorcore import swizzle_text
from autotune.measure import RunOptions
from autotune.program import build_cuda_emulation, build_cuda_program
from autotune.schedule import ScheduleError, TensorizeStep, step_from_dict
from autotune.search.measure_batch import reduction_length, tolerances
from autotune.target import offline_cuda_target
from autotune.te.gemm import gemm_workload
from schedules import make_space

TARGET = offline_cuda_target("sm_90")


def test_c_conversions_round_like_the_device(tmp_path: Path) -> None:
    src = C_PRELUDE + """
void f2bf(const float* x, unsigned short* y, int n) { for (int i = 0; i < n; ++i) y[i] = at_f2bf(x[i]); }
void f2h(const float* x, _Float16* y, int n) { for (int i = 0; i < n; ++i) y[i] = (at_half)x[i]; }
void tf32(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = at_tf32(x[i]); }
"""
    (tmp_path / "c.c").write_text(src)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "c.so"), str(tmp_path / "c.c")],
                   check=True)
    lib = ctypes.CDLL(str(tmp_path / "c.so"))
    rng = np.random.default_rng()
    edges = [0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 1 + 2**-8, 1 + 3 * 2**-8]
    x = rng.standard_normal(4000) * 10.0 ** rng.integers(-6, 6, 4000)
    x = np.concatenate([x, edges]).astype(np.float32)
    # exact ties: 1 + 2^-8 and 1 + 3*2^-8 round to even in bfloat16
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    bf = np.empty(x.shape, np.uint16)
    lib.f2bf(ptr(x), ptr(bf), len(x))
    assert np.array_equal(bf, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    h = np.empty(x.shape, np.float16)
    lib.f2h(ptr(x), ptr(h), len(x))
    with np.errstate(over="ignore"):  # beyond 65520 both give infinity
        assert np.array_equal(h.view(np.uint16), x.astype(np.float16).view(np.uint16))
    t = np.empty_like(x)
    lib.tf32(ptr(x), ptr(t), len(x))
    u = x.view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x)
    want = np.where(finite, ((u + 0x1000) & 0xFFFFE000), u).astype(np.uint32)  # to nearest, ties away
    assert np.array_equal(t.view(np.uint32), want)
    assert np.all(np.abs(t[finite] - x[finite]) <= np.abs(x[finite]) * 2.0**-11)


@pytest.mark.parametrize("row_bytes", [32, 64, 128, 256])
def test_swizzle_puts_each_ldmatrix_phase_in_eight_bank_groups(row_bytes: int) -> None:
    cpr = row_bytes // 16
    text = swizzle_text("c", "r", cpr)
    for first in range(0, 32, 8):  # the 8 row addresses of one matrix (one shared-memory phase)
        for c in range(cpr):
            rows = range(first, first + 8)
            groups = {(r * row_bytes // 16 + eval(text, {"c": c, "r": r})) % 8 for r in rows}
            assert len(groups) == 8, (row_bytes, first, c)
        # a row's chunks stay a permutation of the row
        assert sorted(eval(text, {"c": c, "r": first}) for c in range(cpr)) == list(range(cpr))


def test_precision_is_part_of_the_key_and_descriptions_round_trip() -> None:
    keys = {gemm_workload("matmul", [64, 64, 64], p).key for p in ("fp32", "tf32", "fp16", "bf16")}
    assert len(keys) == 4
    step = TensorizeStep("gemm", 64, 64, 32, 32, 32, 3, 1, 2)
    assert step_from_dict(step.to_dict()) == step


def test_tolerances_follow_precision_and_reduction_length() -> None:
    ref = [np.array([2.0, -4.0])]
    assert tolerances(ref, "tf32", 64)[1] == pytest.approx(4e-3 * 4.0)
    r16, a16 = tolerances(ref, "fp32", 2**16)
    assert r16 > tolerances(ref, "fp32", 1)[0] and a16 == pytest.approx(r16 * 4.0)
    assert reduction_length(gemm_workload("dense", [4, 8, 96], "fp16")) == 96


def test_an_infinite_reference_value_keeps_the_tolerance_finite() -> None:
    # a masked score (-inf) sets no scale: a wrong finite value still fails, the -inf must match
    from autotune.measure.worker import compare

    ref = np.array([1.5, -3.0, -np.inf])
    rtol, atol = tolerances([ref])
    assert np.isfinite(atol) and atol == pytest.approx(rtol * 3.0)
    assert compare(ref.astype(np.float32), ref, rtol, atol) is None
    assert compare(np.array([1.5, 30.0, -np.inf], np.float32), ref, rtol, atol) is not None
    assert compare(np.array([1.5, -3.0, 0.0], np.float32), ref, rtol, atol) is not None


def _source(kind: str, dims: list[int], precision: str, cfg: dict) -> str:
    wl = gemm_workload(kind, dims, precision)
    space = make_space(wl, TARGET)
    assert space.name.startswith("cuda/tensorcore"), space.name
    assert space.is_valid(cfg), space.violated(cfg)
    return build_cuda_program(wl, space.steps(cfg), TARGET)


BIG = {"block_m": 128, "block_n": 128, "block_k": 64, "warp_m": 64, "warp_n": 64, "stages": 4,
       "swizzle": 1, "split_k": 1}


def test_golden_source_fp16_pipeline() -> None:
    prog = _source("matmul", [1024, 1024, 1024], "fp16", BIG)
    src = prog.source
    for needle in ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16",  # A: rows of k
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",  # B stored [k][n]
                   "cp.async.cg.shared.global", "AT_CP_WAIT(2);", "extern __shared__",
                   "__launch_bounds__(128)"):
        assert needle in src, needle
    (launch,) = prog.launch_plan().launches
    # 4 stages of 128x64 A and B halves: beyond 48 KiB, dynamic (the runner opts in)
    assert launch.shared_bytes == 4 * 2 * 128 * 64 * 2 and launch.block == (128, 1, 1)
    assert launch.grid == (8, 8, 1)


def test_golden_source_tf32_and_split_k() -> None:
    cfg = dict(BIG, block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=2, split_k=4)
    prog = _source("dense", [64, 64, 4096], "tf32", cfg)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in prog.source
    assert "cvt.rna.tf32.f32" in prog.source and "ldmatrix" not in prog.source.split("#define AT_TF32")[1]
    main, red = prog.launch_plan().launches
    assert main.grid == (1, 1, 4) and red.kernel.endswith("_splitk")
    assert prog.launch_plan().workspace == (4 * 64 * 64 * 4,)


def test_an_impossible_tile_is_a_schedule_error() -> None:
    wl = gemm_workload("matmul", [64, 64, 64], "bf16")
    with pytest.raises(ScheduleError, match="shared memory"):
        build_cuda_program(wl, [TensorizeStep("gemm", 256, 256, 64, 64, 64, 4, 1, 1)], TARGET)
    with pytest.raises(ScheduleError, match="not a matrix product"):
        build_cuda_program(gemm_workload("matmul", [64, 64, 64], "fp32"),
                           [TensorizeStep("gemm", 64, 64, 32, 32, 32)], TARGET)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize(
    ("kind", "precision", "arch"),
    [("matmul", "fp16", "sm_80"), ("batch_matmul", "bf16", "sm_90"), ("dense", "tf32", "sm_90a"),
     ("conv2d", "bf16", "sm_80")],
)
def test_tensor_core_kernels_compile_with_nvcc(tmp_path: Path, kind: str, precision: str, arch: str) -> None:
    dims = {"batch_matmul": [2, 256, 256, 256], "conv2d": [1, 64, 56, 56, 64, 3, 3, 1, 1]}
    dims = dims.get(kind, [256] * 3)
    cfg = dict(BIG, block_k=32, split_k=2 if precision == "tf32" else 1)
    if kind == "conv2d":  # 64 output channels: N of the implicit GEMM
        cfg.update(block_n=64, warp_n=32)
    _nvcc(tmp_path, _source(kind, dims, precision, cfg).source, arch)


def _nvcc(tmp_path: Path, source: str, arch: str) -> None:
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", str(tmp_path / "k.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def _check(wl, cfg: dict, kernel_builder, kernel_runner, source_edit=None) -> str | None:  # noqa: ANN001
    """None when the emulated kernel matches the float64 reference, else the error."""
    space = make_space(wl, TARGET)
    assert space.is_valid(cfg), space.violated(cfg)
    rng = np.random.default_rng()
    inputs = wl.random_inputs(rng)
    ref = wl.run_reference(inputs)
    rtol, atol = tolerances(ref, wl.precision, reduction_length(wl))
    kernel_runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
    prog = build_cuda_emulation(wl, space.steps(cfg), TARGET)
    src = source_edit(prog.source) if source_edit else prog.source
    b = kernel_builder.build(prog.kernel_name, src)
    assert b.error_kind is None, b.error_msg
    r = kernel_runner.run(b.lib_path, prog.kernel_name, wl.key,
                   RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=120))
    return r.error_msg if r.error_kind is not None else None


@pytest.mark.parametrize(
    ("kind", "dims", "precision"),
    [
        ("matmul", [72, 80, 96], "fp16"),
        ("dense", [40, 48, 64], "bf16"),
        ("batch_matmul", [2, 48, 32, 40], "fp16"),
        ("matmul", [48, 40, 56], "tf32"),
        ("dense", [32, 48, 40], "tf32"),
        ("batch_matmul", [3, 16, 40, 48], "bf16"),
        # implicit GEMM: windows of the padded input gathered into the A tile
        ("conv2d", [1, 8, 9, 9, 16, 3, 3, 2, 1], "fp16"),
        ("conv2d", [2, 4, 7, 7, 24, 3, 3, 1, 1], "tf32"),
    ],
)
def test_sampled_tensor_core_kernels_match_float64_in_emulation(
    kind: str, dims: list[int], precision: str, kernel_builder, kernel_runner
) -> None:
    wl = gemm_workload(kind, dims, precision)
    space = make_space(wl, TARGET)
    rng = np.random.default_rng()
    cfg = space.sample(rng)
    while cfg["block_m"] * cfg["block_n"] > 64 * 64:  # keep the emulated team small and fast
        cfg = space.sample(rng)
    assert _check(wl, cfg, kernel_builder, kernel_runner) is None, cfg


def test_emulation_catches_a_pipeline_that_reads_before_waiting(kernel_builder, kernel_runner) -> None:
    wl = gemm_workload("matmul", [32, 32, 128], "fp16")
    cfg = {"block_m": 32, "block_n": 32, "block_k": 16, "warp_m": 16, "warp_n": 16, "stages": 3,
           "swizzle": 1, "split_k": 1}
    assert _check(wl, cfg, kernel_builder, kernel_runner) is None
    # waiting for one group fewer than the pipeline needs reads a stage whose copies are in flight
    early = lambda s: s.replace("AT_CP_WAIT(1);", "AT_CP_WAIT(2);")  # noqa: E731
    err = _check(wl, cfg, kernel_builder, kernel_runner, early)
    assert err is not None, "the emulated pipeline read stale shared memory without noticing"


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_16_bit_tensors_through_the_generic_lowering(precision: str, kernel_builder, kernel_runner,
                                                     tmp_path: Path) -> None:
    """Without tensorize, 16-bit operands go through the ordinary GPU and CPU schedules: loaded,
    widened to float32, staged in shared memory as 16-bit."""
    from autotune.program import build_program
    from autotune.target import cpu_target
    from schedules.cuda import cuda_space

    wl = gemm_workload("matmul", [48, 40, 24], precision)
    rng = np.random.default_rng()
    inputs = wl.random_inputs(rng)
    ref = wl.run_reference(inputs)
    rtol, atol = tolerances(ref, wl.precision, reduction_length(wl))
    kernel_runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
    gpu, cpu = cuda_space(wl, TARGET), make_space(wl, cpu_target())
    progs = [build_cuda_emulation(wl, gpu.steps(gpu.sample(rng)), TARGET),
             build_program(wl, cpu.steps(cpu.sample(rng)), cpu_target())]
    for prog in progs:
        b = kernel_builder.build(prog.kernel_name, prog.source)
        assert b.error_kind is None, b.error_msg
        r = kernel_runner.run(b.lib_path, prog.kernel_name, wl.key,
                              RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=120))
        assert r.error_kind is None, r.error_msg
    src = build_cuda_program(wl, gpu.steps(gpu.sample(rng)), TARGET).source
    assert ("__half2float(" if precision == "fp16" else "__bfloat162float(") in src
    if shutil.which("nvcc"):
        _nvcc(tmp_path, src, "sm_80")


SMALL_MODELS = ["zoo:resnet18?image=32,width=8", "zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64"]


@pytest.mark.parametrize("spec", SMALL_MODELS)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_model_products_run_on_tensor_cores_with_their_epilogues(
    spec: str, precision: str, kernel_builder, kernel_runner
) -> None:
    """--precision fp16/bf16: every product of the model (convolutions, dense layers, attention's
    batched products) becomes one tensor-core kernel with its bias / activation / residual fused,
    and each matches its float64 reference (operands rounded as the reference rounds them)."""
    from autotune.graph.compiler import load_model, prepare
    from autotune.schedule.tensorize import product_view

    g = load_model(spec)
    g.precision = precision
    prepared = prepare(g, "NHWC")
    low = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    assert any(c.dtype == low for c in prepared.graph.consts.values()), "weights were not cast once"
    products = [t for t in prepared.tasks if {n["op"] for n in t.workload.spec["nodes"]} & {"Conv", "MatMul"}]
    assert products and all(product_view(t.workload) is not None for t in products)
    rng = np.random.default_rng()
    for task in products:
        wl = task.workload
        space = make_space(wl, TARGET)
        assert space.name.startswith(f"cuda/tensorcore-{precision}"), space.name
        cfg = space.sample(rng)
        while cfg["block_m"] * cfg["block_n"] > 64 * 64:
            cfg = space.sample(rng)
        assert _check(wl, cfg, kernel_builder, kernel_runner) is None, (task.label, cfg)
