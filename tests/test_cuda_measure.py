"""CUDA measurement path: nvcc builds run anywhere nvcc is; GPU runs only where a device is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autotune.measure import cuda_builder as cuda_builder_mod
from autotune.measure.cuda_builder import (
    CudaBuilder,
    CudaBuildOptions,
    CudaProgram,
    Launch,
    nvcc_version,
    parse_ptxas_info,
    ptxas_info,
)
from autotune.measure.cuda_device import has_cuda_device, query_device
from autotune.measure.cuda_runner import CudaRunner, CudaRunOptions
from autotune.measure.errors import ErrorKind
from autotune.measure.runner import RunResult

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
GPU = has_cuda_device()
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA device")
no_gpu_here = pytest.mark.skipif(GPU, reason="a CUDA device is present")

ROOT = Path(__file__).resolve().parents[1]
N = 4096  # elements of the vector kernels
BLOCK = 256
M, K, NN = 80, 72, 48  # matmul C[M, NN] = A[M, K] @ B[K, NN]; not tile multiples
TILE = 16
FAST = CudaRunOptions(repeat=2, min_repeat_ms=2.0, timeout_s=30.0)


def vec_src(name: str = "add", body: str = "c[i] = t[threadIdx.x] + b[i];", guard: str = f"i < {N}") -> str:
    return f"""
extern "C" __global__ void {name}(const float* a, const float* b, float* c) {{
    __shared__ float t[{BLOCK}];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    t[threadIdx.x] = i < {N} ? a[i] : 0.0f;
    __syncthreads();
    if ({guard}) {{ {body} }}
}}
"""


MATMUL_SRC = f"""
#define M {M}
#define K {K}
#define N {NN}
#define T {TILE}
extern "C" __global__ void matmul(const float* A, const float* B, float* C) {{
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int row = blockIdx.y * T + threadIdx.y;
    int col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {{
        int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }}
    if (row < M && col < N) C[row * N + col] = acc;
}}
"""

# Two launches through a workspace buffer: ws = 2a, then c = ws + b.
TWO_STEP_SRC = f"""
extern "C" __global__ void twice(const float* a, float* ws) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < {N}) ws[i] = 2.0f * a[i];
}}
extern "C" __global__ void plus(const float* ws, const float* b, float* c) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < {N}) c[i] = ws[i] + b[i];
}}
"""

# 64 KiB of dynamic shared memory: needs the opt-in attribute.
DYN_SMEM_BYTES = 64 * 1024
DYN_SMEM_SRC = f"""
extern "C" __global__ void dyn_add(const float* a, const float* b, float* c) {{
    extern __shared__ float buf[];
    const int words = {DYN_SMEM_BYTES // 4};
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = threadIdx.x; j < words; j += blockDim.x) buf[j] = 0.0f;
    __syncthreads();
    buf[words - 1 - threadIdx.x] = a[i];
    __syncthreads();
    c[i] = buf[words - 1 - threadIdx.x] + b[i];
}}
"""

OOB_SRC = """
extern "C" __global__ void add(const float* a, const float* b, float* c) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    c[i + ((size_t)1 << 40)] = a[i] + b[i];  /* 4 TiB past the buffer */
}
"""

HANG_SRC = """
extern "C" __global__ void add(const float* a, const float* b, float* c) {
    const volatile float* p = a;  /* inputs are in [-1, 1): this never ends */
    while (p[0] < 2.0f) { }
    c[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}
"""


def vec_program(src: str, kernel: str = "add", block: int = BLOCK, shared: int = 0) -> CudaProgram:
    grid = ((N + block - 1) // block, 1, 1)
    return CudaProgram(src, (Launch(kernel, grid, (block, 1, 1), (0, 1, 2), shared),))


MATMUL = CudaProgram(
    MATMUL_SRC,
    (Launch("matmul", ((NN + TILE - 1) // TILE, (M + TILE - 1) // TILE, 1), (TILE, TILE, 1), (0, 1, 2)),),
)
TWO_STEP = CudaProgram(
    TWO_STEP_SRC,
    (
        Launch("twice", (N // BLOCK, 1, 1), (BLOCK, 1, 1), (0, 3)),
        Launch("plus", (N // BLOCK, 1, 1), (BLOCK, 1, 1), (3, 1, 2)),
    ),
    workspace=(N * 4,),
)


def ok_build(builder: CudaBuilder, src: str) -> str:
    res = builder.build("k", src)
    assert res.ok, res.error_msg
    assert res.lib_path is not None
    return res.lib_path


# -- program ABI --------------------------------------------------------------


def test_program_check() -> None:
    good = vec_program(vec_src())
    assert good.check(3) is None
    assert "out of range" in (good.check(2) or "")
    bad_block = CudaProgram("", (Launch("add", (1, 1, 1), (0, 1, 1), (0,)),))
    assert "block" in (bad_block.check(1) or "")
    assert "no launches" in (CudaProgram("", ()).check(1) or "")
    assert TWO_STEP.check(3) is None  # workspace buffer 3 exists


def test_build_options_need_arch() -> None:
    with pytest.raises(TypeError):
        CudaBuildOptions()  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        CudaBuildOptions(arch="90")
    assert CudaBuildOptions(arch="sm_90a").flags == ("-O3",)  # no fast-math by default


def test_parse_ptxas_info() -> None:
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Used 8 registers, used 0 barriers
"""
    info = parse_ptxas_info(text)
    assert info["k1"] == {
        "registers": 40,
        "shared_bytes": 2048,
        "stack_bytes": 8,
        "spill_stores": 4,
        "spill_loads": 12,
        "barriers": 1,
    }
    assert info["k2"]["registers"] == 8 and info["k2"]["shared_bytes"] == 0


# -- builder (needs nvcc, not a GPU) -------------------------------------------


@needs_nvcc
def test_nvcc_version() -> None:
    assert "release" in nvcc_version()
    assert nvcc_version("/nonexistent/nvcc") == "unknown"


@needs_nvcc
def test_build_cubin_and_cache_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = CudaBuilder(CudaBuildOptions(arch="sm_90", cache_dir=tmp_path), workers=1)
    first = b.build("add", vec_src())
    assert first.ok and not first.cached, first.error_msg
    assert first.lib_path is not None and first.lib_path.endswith(".cubin")
    assert Path(first.lib_path).read_bytes()[:4] == b"\x7fELF"
    usage = b.resource_usage(first.lib_path)
    assert usage["add"]["registers"] > 0 and usage["add"]["shared_bytes"] == BLOCK * 4

    def no_nvcc(*args: object, **kwargs: object) -> None:
        raise AssertionError("nvcc invoked on a cache hit")

    monkeypatch.setattr(cuda_builder_mod, "_run_compiler", no_nvcc)
    second = b.build("add", vec_program(vec_src()))  # a CudaProgram builds its source
    assert second.cached and second.lib_path == first.lib_path
    third = CudaBuilder(CudaBuildOptions(arch="sm_90", cache_dir=tmp_path)).build("add", vec_src())
    assert third.cached and third.lib_path == first.lib_path
    # Another arch or other flags: another key, so nvcc must run (and here "fails").
    for opts in (
        CudaBuildOptions(arch="sm_80", cache_dir=tmp_path),
        CudaBuildOptions(arch="sm_90", cache_dir=tmp_path, flags=("-O3", "--use_fast_math")),
    ):
        with pytest.raises(AssertionError):
            CudaBuilder(opts).build("add", vec_src())
    assert sorted(p.name.split(".", 1)[1] for p in tmp_path.iterdir()) == ["cubin", "ptxas.json"]


@needs_nvcc
def test_cache_key_depends_on_arch(tmp_path: Path) -> None:
    keys = {
        arch: CudaBuilder(CudaBuildOptions(arch=arch, cache_dir=tmp_path)).cache_key(vec_src())
        for arch in ("sm_80", "sm_90")
    }
    assert keys["sm_80"] != keys["sm_90"]
    assert keys["sm_90"] == CudaBuilder(CudaBuildOptions(arch="sm_90")).cache_key(vec_src())


@needs_nvcc
def test_build_syntax_error(tmp_path: Path) -> None:
    b = CudaBuilder(CudaBuildOptions(arch="sm_90", cache_dir=tmp_path), workers=1)
    res = b.build("bad", 'extern "C" __global__ void bad(float* c) { int x = ; }')
    assert res.error_kind is ErrorKind.BUILD_ERROR and not res.ok and res.lib_path is None
    assert "error" in res.error_msg and len(res.error_msg.splitlines()) <= 21
    assert list(tmp_path.iterdir()) == []


@needs_nvcc
def test_build_timeout(tmp_path: Path) -> None:
    b = CudaBuilder(CudaBuildOptions(arch="sm_90", cache_dir=tmp_path, timeout_s=0.05), workers=1)
    start = time.perf_counter()
    res = b.build("add", vec_src())
    assert res.error_kind is ErrorKind.BUILD_TIMEOUT
    assert time.perf_counter() - start < 10
    assert list(tmp_path.iterdir()) == []


@needs_nvcc
def test_build_many_keeps_order(tmp_path: Path) -> None:
    items = [(f"k{i}", vec_src(body=f"c[i] = t[threadIdx.x] + {i}.0f * b[i];")) for i in range(3)]
    items.insert(1, ("bad", "this is not CUDA"))
    with CudaBuilder(CudaBuildOptions(arch="sm_90", cache_dir=tmp_path), workers=2) as b:
        results = b.build_many(items)
    assert [r.error_kind for r in results] == [None, ErrorKind.BUILD_ERROR, None, None]
    assert len({r.lib_path for r in results}) == 4


@needs_nvcc
def test_ptxas_info_spills_and_smem() -> None:
    src = vec_src() + MATMUL_SRC
    info = ptxas_info(src, "sm_90")
    assert set(info) == {"add", "matmul"}
    assert info["matmul"]["shared_bytes"] == 2 * TILE * TILE * 4
    assert info["matmul"]["spill_stores"] == 0
    with pytest.raises(RuntimeError, match="nvcc failed"):
        ptxas_info("not CUDA", "sm_90")


# -- without a GPU ------------------------------------------------------------


def test_modules_import_without_pycuda() -> None:
    code = (
        "import sys, autotune.measure, autotune.measure.cuda_builder, autotune.measure.cuda_runner, "
        "autotune.measure.cuda_worker, autotune.measure.cuda_device\n"
        "assert 'pycuda' not in sys.modules, 'pycuda imported'\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@no_gpu_here
def test_no_device_reports_one_line() -> None:
    assert has_cuda_device() is False
    with pytest.raises(RuntimeError) as err:
        query_device()
    msg = str(err.value)
    assert msg.startswith("no CUDA device: ") and "\n" not in msg


def test_run_rejects_bad_program_without_worker() -> None:
    x = np.ones(N, np.float32)
    with CudaRunner() as r:
        r.set_task("t", [x, x], [x * 2.0], [((N,), "float32")])
        bad = CudaProgram("", (Launch("add", (1, 1, 1), (BLOCK, 1, 1), (0, 1, 7)),))
        res = r.run("/nonexistent.cubin", bad, "t", FAST)
        assert res.error_kind is ErrorKind.RUNTIME_ERROR and "out of range" in res.error_msg
        res = r.run("/nonexistent.cubin", vec_program(""), "nope", FAST)
        assert res.error_kind is ErrorKind.RUNTIME_ERROR and "nope" in res.error_msg
        assert r._proc is None  # nothing needed the GPU worker yet


@no_gpu_here
def test_runner_without_device_raises() -> None:
    x = np.ones(N, np.float32)
    with CudaRunner() as r:
        r.set_task("t", [x, x], [x * 2.0], [((N,), "float32")])
        with pytest.raises(RuntimeError, match="^no CUDA device: "):
            r.run("/nonexistent.cubin", vec_program(""), "t", FAST)


def test_cuda_run_options() -> None:
    opts = CudaRunOptions()
    assert opts.flush_l2 is False and opts.warmup == 3
    with pytest.raises(ValueError):
        CudaRunOptions(warmup=-1)
    with pytest.raises(ValueError):
        CudaRunOptions(repeat=0)


# -- on a GPU -----------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_arch() -> str:
    return str(query_device()["arch"])


@pytest.fixture(scope="module")
def gpu_builder(tmp_path_factory: pytest.TempPathFactory, gpu_arch: str) -> Iterator[CudaBuilder]:
    opts = CudaBuildOptions(arch=gpu_arch, cache_dir=tmp_path_factory.mktemp("cubins"))
    with CudaBuilder(opts) as b:
        yield b


@pytest.fixture(scope="module")
def runner() -> Iterator[CudaRunner]:
    rng = np.random.default_rng()  # fresh inputs on every test session
    a = rng.uniform(-1, 1, N).astype(np.float32)
    b = rng.uniform(-1, 1, N).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with CudaRunner() as r:
        r.set_task("add", [a, b], [a64 + b64], [((N,), "float32")])
        r.set_task("two_step", [a, b], [2.0 * a64 + b64], [((N,), "float32")])
        yield r


def assert_ok(res: RunResult, repeat: int = FAST.repeat) -> None:
    assert res.error_kind is None, res.error_msg
    assert len(res.costs) == repeat
    assert all(0 < c < 1 for c in res.costs)


@needs_gpu
def test_query_device_arch(gpu_arch: str) -> None:
    info = query_device()
    assert info["arch"] == gpu_arch and gpu_arch.startswith("sm_")
    assert gpu_arch == "sm_{}{}".format(*info["compute_capability"])
    assert info["multiprocessors"] > 0 and info["l2_bytes"] > 0
    assert info["max_shared_per_block_optin"] >= info["max_shared_per_block"] > 0
    assert info["driver_version"] > 0 and "release" in info["nvcc"]
    assert has_cuda_device()


@needs_gpu
def test_add_runs(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    assert_ok(runner.run(ok_build(gpu_builder, vec_src()), vec_program(vec_src()), "add", FAST))


@needs_gpu
def test_matmul_runs(gpu_builder: CudaBuilder) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, NN)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    cubin = ok_build(gpu_builder, MATMUL_SRC)
    with CudaRunner() as r:
        r.set_task("mm", [a, b], [ref], [((M, NN), "float32")])
        assert_ok(r.run(cubin, MATMUL, "mm", FAST))
        strict = CudaRunOptions(repeat=1, rtol=0.0, atol=1e-12)
        assert r.run(cubin, MATMUL, "mm", strict).error_kind is ErrorKind.WRONG_ANSWER


@needs_gpu
def test_workspace_and_two_launches(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    assert_ok(runner.run(ok_build(gpu_builder, TWO_STEP_SRC), TWO_STEP, "two_step", FAST))


@needs_gpu
def test_dynamic_shared_over_48k(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    cubin = ok_build(gpu_builder, DYN_SMEM_SRC)
    prog = vec_program(DYN_SMEM_SRC, "dyn_add", shared=DYN_SMEM_BYTES)
    assert_ok(runner.run(cubin, prog, "add", FAST))
    too_much = vec_program(DYN_SMEM_SRC, "dyn_add", shared=1 << 20)
    res = runner.run(cubin, too_much, "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_ERROR and "shared memory" in res.error_msg


@needs_gpu
def test_flush_l2_timing(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    opts = CudaRunOptions(repeat=3, min_repeat_ms=1.0, flush_l2=True, warmup=1)
    assert_ok(runner.run(ok_build(gpu_builder, vec_src()), vec_program(vec_src()), "add", opts), 3)


@needs_gpu
def test_wrong_values(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    src = vec_src(body="c[i] = a[i] - b[i];")
    res = runner.run(ok_build(gpu_builder, src), vec_program(src), "add", FAST)
    assert res.error_kind is ErrorKind.WRONG_ANSWER and "max abs error" in res.error_msg
    assert res.costs == ()


@needs_gpu
def test_unwritten_output_is_poisoned(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    src = vec_src(guard=f"i < {N - 24}")
    res = runner.run(ok_build(gpu_builder, src), vec_program(src), "add", FAST)
    assert res.error_kind is ErrorKind.WRONG_ANSWER and "24 NaN" in res.error_msg


@needs_gpu
def test_missing_kernel_is_runtime_error(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    cubin = ok_build(gpu_builder, vec_src())
    res = runner.run(cubin, vec_program(vec_src(), kernel="no_such_kernel"), "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_ERROR and "no_such_kernel" in res.error_msg
    assert_ok(runner.run(cubin, vec_program(vec_src()), "add", FAST))


@needs_gpu
def test_illegal_address_then_recover(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    good = ok_build(gpu_builder, vec_src())
    res = runner.run(ok_build(gpu_builder, OOB_SRC), vec_program(OOB_SRC), "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_CRASH, res.error_msg
    # The restarted worker gets the task's inputs again without being asked.
    assert_ok(runner.run(good, vec_program(vec_src()), "add", FAST))


@needs_gpu
def test_hang_times_out_then_recover(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    good = ok_build(gpu_builder, vec_src())
    hang = ok_build(gpu_builder, HANG_SRC)
    start = time.perf_counter()
    res = runner.run(hang, vec_program(HANG_SRC), "add", CudaRunOptions(timeout_s=2.0))
    assert res.error_kind is ErrorKind.RUN_TIMEOUT, res.error_msg
    assert 2.0 <= time.perf_counter() - start < 20
    assert_ok(runner.run(good, vec_program(vec_src()), "add", FAST))


@needs_gpu
def test_too_many_threads_then_recover(gpu_builder: CudaBuilder, runner: CudaRunner) -> None:
    cubin = ok_build(gpu_builder, vec_src())
    res = runner.run(cubin, vec_program(vec_src(), block=2048), "add", FAST)
    assert res.error_kind in (ErrorKind.RUNTIME_ERROR, ErrorKind.RUNTIME_CRASH), res.error_msg
    assert_ok(runner.run(cubin, vec_program(vec_src()), "add", FAST))


@needs_gpu
def test_remove_task_and_close(gpu_builder: CudaBuilder) -> None:
    cubin = ok_build(gpu_builder, vec_src())
    x = np.random.default_rng().uniform(-1, 1, N).astype(np.float32)
    r = CudaRunner()
    r.set_task("t", [x, x], [x.astype(np.float64) * 2.0], [((N,), "float32")])
    assert_ok(r.run(cubin, vec_program(vec_src()), "t", FAST))
    r.remove_task("t")
    assert r.run(cubin, vec_program(vec_src()), "t", FAST).error_kind is ErrorKind.RUNTIME_ERROR
    proc = r._proc
    assert proc is not None and proc.is_alive()
    pid = proc.pid
    r.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError):
        r.run(cubin, vec_program(vec_src()), "t", FAST)
