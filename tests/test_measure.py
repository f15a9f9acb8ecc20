"""Tests for autotune.measure: real gcc builds, isolated runs, failure modes."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autotune.aligned import aligned, aligned_empty
from autotune.measure import (
    TIMER_SYMBOL,
    Builder,
    BuildOptions,
    CpuRunner,
    ErrorKind,
    RunOptions,
    RunResult,
    compiler_version,
)
from autotune.measure import builder as builder_mod

N = 1024
MM = 24  # matmul is MM x MM x MM
FAST = RunOptions(repeat=2, min_repeat_ms=2.0, timeout_s=20.0)


def add_src(name: str = "add_kernel", body: str = "c[i] = a[i] + b[i];", n: int = N) -> str:
    return f"""
void {name}(void** args) {{
    const float* a = (const float*)args[0];
    const float* b = (const float*)args[1];
    float* c = (float*)args[2];
    for (int i = 0; i < {n}; ++i) {{ {body} }}
}}
"""


MATMUL_SRC = f"""
#include <math.h>
void matmul(void** args) {{
    const float* A = (const float*)args[0];
    const float* B = (const float*)args[1];
    float* C = (float*)args[2];
    #pragma omp parallel for
    for (int i = 0; i < {MM}; ++i)
        for (int j = 0; j < {MM}; ++j) {{
            float acc = 0.0f;
            for (int k = 0; k < {MM}; ++k) acc += A[i * {MM} + k] * B[k * {MM} + j];
            C[i * {MM} + j] = acc;
        }}
}}
"""

SEGFAULT_SRC = """
#include <stdint.h>
void add_kernel(void** args) {
    /* volatile so gcc cannot prove it is NULL and turn it into a trap */
    volatile uintptr_t addr = 0;
    *(volatile float*)addr = 1.0f;
    (void)args;
}
"""

HANG_SRC = """
void add_kernel(void** args) {
    volatile int spin = 1;
    while (spin) { }
    (void)args;
}
"""


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builder]:
    with Builder(BuildOptions(cache_dir=tmp_path_factory.mktemp("cache")), workers=2) as b:
        yield b


@pytest.fixture(scope="module")
def runner(rng: np.random.Generator) -> Iterator[CpuRunner]:
    a = rng.uniform(-1, 1, N).astype(np.float32)
    b = rng.uniform(-1, 1, N).astype(np.float32)
    with CpuRunner() as r:
        r.set_task(
            "add",
            [a, b],
            [a.astype(np.float64) + b.astype(np.float64)],
            [((N,), "float32")],
        )
        yield r


def assert_ok(res: RunResult) -> None:
    assert res.error_kind is None, res.error_msg
    assert len(res.costs) == FAST.repeat
    assert all(c > 0 for c in res.costs)
    assert 0 < res.mean_s < 1


def build_ok(builder: Builder, name: str, src: str) -> str:
    res = builder.build(name, src)
    assert res.error_kind is None, res.error_msg
    assert res.lib_path is not None and os.path.isfile(res.lib_path)
    return res.lib_path


# -- builder ------------------------------------------------------------------


def test_error_kind_values() -> None:
    assert ErrorKind.BUILD_TIMEOUT == "build_timeout"
    assert ErrorKind("wrong_answer") is ErrorKind.WRONG_ANSWER
    assert len(ErrorKind) == 7
    assert isinstance(ErrorKind.RUN_TIMEOUT, str) and str(ErrorKind.RUN_TIMEOUT) == "run_timeout"


def test_compiler_version() -> None:
    assert "gcc" in compiler_version("gcc").lower()
    assert compiler_version("/nonexistent/cc") == "unknown"


def test_build_cache_hit_skips_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = Builder(BuildOptions(cache_dir=tmp_path), workers=1)
    first = b.build("add_kernel", add_src())
    assert first.error_kind is None and not first.cached

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiler invoked on a cache hit")

    monkeypatch.setattr(builder_mod, "_run_compiler", no_compiler)
    second = b.build("add_kernel", add_src())
    assert second.cached and second.lib_path == first.lib_path
    assert second.build_s < first.build_s
    # A new Builder on the same cache dir hits too.
    third = Builder(BuildOptions(cache_dir=tmp_path)).build("add_kernel", add_src())
    assert third.cached and third.lib_path == first.lib_path
    # Different flags: different key, so the compiler must run (and here fails).
    with pytest.raises(AssertionError):
        Builder(BuildOptions(cache_dir=tmp_path, flags=("-O1", "-fPIC", "-shared"))).build(
            "add_kernel", add_src()
        )
    # Only the final .so remains; no temp leftovers.
    assert [p.suffix for p in tmp_path.iterdir()] == [".so"]


def test_build_syntax_error(builder: Builder) -> None:
    res = builder.build("add_kernel", "void add_kernel(void** args) { int x = ; }")
    assert res.error_kind is ErrorKind.BUILD_ERROR
    assert res.lib_path is None and not res.cached
    assert "error" in res.error_msg and len(res.error_msg.splitlines()) <= 21


def test_build_rejects_bad_kernel_name(builder: Builder) -> None:
    res = builder.build("not a name", add_src())
    assert res.error_kind is ErrorKind.BUILD_ERROR and "kernel name" in res.error_msg


def test_build_timeout_kills_compiler(tmp_path: Path) -> None:
    # Big enough that -O3 needs well over the 0.05 s allowed.
    funcs = "\n".join(
        f"void f{i}(float* x) {{ for (int j = 0; j < 1000; ++j) x[j] = x[j] * {i}.5f + x[j + 1]; }}"
        for i in range(3000)
    )
    src = funcs + add_src()
    b = Builder(BuildOptions(cache_dir=tmp_path, timeout_s=0.05), workers=1)
    start = time.perf_counter()
    res = b.build("add_kernel", src)
    assert res.error_kind is ErrorKind.BUILD_TIMEOUT
    assert res.lib_path is None
    assert time.perf_counter() - start < 5
    assert list(tmp_path.iterdir()) == []  # no half-built library, no temp dir


def test_build_many_parallel_keeps_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    active = 0
    peak = 0
    lock = threading.Lock()
    real = builder_mod._run_compiler

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(builder_mod, "_run_compiler", counting)
    items = [(f"k{i}", add_src(f"k{i}", f"c[i] = a[i] + {i}.0f * b[i];")) for i in range(4)]
    items.insert(2, ("bad", "void bad(void** args) { oops }"))
    with Builder(BuildOptions(cache_dir=tmp_path), workers=2) as b:
        results = b.build_many(items)
    assert peak == 2
    assert [r.error_kind for r in results] == [
        None,
        None,
        ErrorKind.BUILD_ERROR,
        None,
        None,
    ]
    assert len({r.lib_path for r in results}) == 5

    # Run each library: kernel i scales b by i, so a wrong order would fail the check.
    a = rng.uniform(-1, 1, N).astype(np.float32)
    bb = rng.uniform(-1, 1, N).astype(np.float32)
    good = [(name, r) for (name, _), r in zip(items, results) if r.lib_path]
    with CpuRunner() as runner:
        for i, (name, r) in enumerate(good):
            ref = a.astype(np.float64) + i * bb.astype(np.float64)
            runner.set_task(f"t{i}", [a, bb], [ref], [((N,), "float32")])
            assert r.lib_path is not None
            assert_ok(runner.run(r.lib_path, name, f"t{i}", FAST))


def test_harness_grows_number(builder: Builder) -> None:
    lib = ctypes.CDLL(build_ok(builder, "add_kernel", add_src()), mode=os.RTLD_LOCAL)
    a, b, c = (np.ones(N, np.float32) for _ in range(3))
    args = (ctypes.c_void_p * 3)(a.ctypes.data, b.ctypes.data, c.ctypes.data)
    costs = (ctypes.c_double * 2)()
    fn = getattr(lib, TIMER_SYMBOL)
    fn.restype = ctypes.c_int
    number = fn(args, 1, 2, ctypes.c_double(2.0), costs)
    assert number > 1  # a 1k-element add takes far less than 2 ms
    assert all(x > 0 for x in costs)
    assert costs[1] * number >= 2e-3 * 0.999  # last repeat met min_repeat_ms
    assert np.all(c == 2.0)


# -- runner -------------------------------------------------------------------


def test_run_add_ok(builder: Builder, runner: CpuRunner) -> None:
    res = runner.run(build_ok(builder, "add_kernel", add_src()), "add_kernel", "add", FAST)
    assert_ok(res)
    assert res.run_s > 0


def test_run_matmul_ok(builder: Builder, rng: np.random.Generator) -> None:
    a = rng.standard_normal((MM, MM)).astype(np.float32)
    b = rng.standard_normal((MM, MM)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    lib = build_ok(builder, "matmul", MATMUL_SRC)
    with CpuRunner() as r:
        r.set_task("mm", [a, b], [ref], [((MM, MM), "float32")])
        assert_ok(r.run(lib, "matmul", "mm", FAST))
        # Tolerance is honoured: demanding exactness against float64 fails.
        strict = RunOptions(repeat=2, min_repeat_ms=2.0, rtol=0.0, atol=1e-12)
        res = r.run(lib, "matmul", "mm", strict)
        assert res.error_kind is ErrorKind.WRONG_ANSWER and res.costs == ()


ALIGNMENT_SRC = """
#include <stdint.h>
void where(void** args) {
    float* out = (float*)args[3];
    for (int i = 0; i < 4; ++i) out[i] = (float)((uintptr_t)args[i] % 64);
}
"""


def test_kernel_operands_start_on_a_cache_line(builder: Builder) -> None:
    # numpy's own buffers are 16-byte aligned; the worker hands kernels 64-byte aligned ones, so a
    # 64-byte vector load never straddles two lines (the kernel reports its pointers modulo 64)
    lib = build_ok(builder, "where", ALIGNMENT_SRC)
    rng = np.random.default_rng()
    odd = [np.frombuffer(np.empty(4 * 37 + 16, np.uint8), np.float32, 37, 16 if i else 4) for i in range(3)]
    for a in odd:
        a[...] = rng.uniform(-1, 1, 37)  # (views of numpy's memory at 4- and 16-byte offsets)
    with CpuRunner() as r:
        r.set_task("where", odd, [np.zeros(4)], [((4,), "float32")])
        assert_ok(r.run(lib, "where", "where", FAST))


def test_huge_page_buffers_start_on_a_huge_page_and_are_zeroed() -> None:
    from autotune.aligned import HUGE_PAGE, address, huge_page_buffer

    for nbytes in (100, HUGE_PAGE, 3 * HUGE_PAGE + 12345):
        b = huge_page_buffer(nbytes)
        assert b.dtype == np.uint8 and b.shape == (nbytes,) and address(b) % HUGE_PAGE == 0
        assert not b.any()
        b[:] = 7  # writable to its last byte
        assert int(b[-1]) == 7


def test_aligned_copies_start_on_a_cache_line() -> None:
    base = np.arange(100, dtype=np.float32)
    for off in range(1, 5):
        a = aligned(base[off : off + 64])
        assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous
        np.testing.assert_array_equal(a, base[off : off + 64])
    e = aligned_empty((3, 5), "float32")
    assert e.shape == (3, 5) and e.dtype == np.float32 and e.ctypes.data % 64 == 0
    assert aligned(e) is e  # already aligned and contiguous: no copy


def test_wrong_values(builder: Builder, runner: CpuRunner) -> None:
    lib = build_ok(builder, "add_kernel", add_src(body="c[i] = a[i] - b[i];"))
    res = runner.run(lib, "add_kernel", "add", FAST)
    assert res.error_kind is ErrorKind.WRONG_ANSWER
    assert "max abs error" in res.error_msg
    assert res.costs == () and res.mean_s == float("inf")


def test_unwritten_output_is_poisoned(builder: Builder, runner: CpuRunner) -> None:
    lib = build_ok(builder, "add_kernel", add_src(body="if (i < 1000) c[i] = a[i] + b[i];"))
    res = runner.run(lib, "add_kernel", "add", FAST)
    assert res.error_kind is ErrorKind.WRONG_ANSWER
    assert "24 NaN" in res.error_msg


def test_int_output_poison(builder: Builder) -> None:
    src = """
void iadd(void** args) {
    const int* a = (const int*)args[0];
    int* c = (int*)args[1];
    for (int i = 0; i < 15; ++i) c[i] = a[i] + 1;  /* last element left unwritten */
}
"""
    lib = build_ok(builder, "iadd", src)
    a = np.arange(16, dtype=np.int32)
    with CpuRunner() as r:
        r.set_task("i", [a], [a + 1], [((16,), "int32")])
        res = r.run(lib, "iadd", "i", FAST)
        assert res.error_kind is ErrorKind.WRONG_ANSWER and "1/16" in res.error_msg


def test_same_symbol_in_two_libs(builder: Builder, runner: CpuRunner, rng: np.random.Generator) -> None:
    plus = build_ok(builder, "k", add_src("k", "c[i] = a[i] + b[i];"))
    minus = build_ok(builder, "k", add_src("k", "c[i] = a[i] - b[i];"))
    a = rng.uniform(-1, 1, N).astype(np.float32)
    b = rng.uniform(-1, 1, N).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    runner.set_task("plus", [a, b], [a64 + b64], [((N,), "float32")])
    runner.set_task("minus", [a, b], [a64 - b64], [((N,), "float32")])
    assert_ok(runner.run(plus, "k", "plus", FAST))
    assert_ok(runner.run(minus, "k", "minus", FAST))
    assert runner.run(plus, "k", "minus", FAST).error_kind is ErrorKind.WRONG_ANSWER


def test_runtime_errors(builder: Builder, runner: CpuRunner) -> None:
    lib = build_ok(builder, "add_kernel", add_src())
    res = runner.run(lib, "no_such_kernel", "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_ERROR and "no_such_kernel" in res.error_msg
    res = runner.run(lib, "add_kernel", "no_such_task", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_ERROR and "no_such_task" in res.error_msg
    res = runner.run("/nonexistent/lib.so", "add_kernel", "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_ERROR
    assert_ok(runner.run(lib, "add_kernel", "add", FAST))


def test_segfault_then_recover(builder: Builder, runner: CpuRunner) -> None:
    bad = build_ok(builder, "add_kernel", SEGFAULT_SRC)
    good = build_ok(builder, "add_kernel", add_src())
    res = runner.run(bad, "add_kernel", "add", FAST)
    assert res.error_kind is ErrorKind.RUNTIME_CRASH
    assert "SIGSEGV" in res.error_msg
    # The task's inputs are re-sent to the restarted worker without being asked.
    assert_ok(runner.run(good, "add_kernel", "add", FAST))


def test_hang_times_out_then_recover(builder: Builder, runner: CpuRunner) -> None:
    hang = build_ok(builder, "add_kernel", HANG_SRC)
    good = build_ok(builder, "add_kernel", add_src())
    start = time.perf_counter()
    res = runner.run(hang, "add_kernel", "add", RunOptions(timeout_s=1.0))
    assert res.error_kind is ErrorKind.RUN_TIMEOUT
    assert 1.0 <= time.perf_counter() - start < 5
    assert_ok(runner.run(good, "add_kernel", "add", FAST))


def test_close_stops_worker(builder: Builder) -> None:
    lib = build_ok(builder, "add_kernel", add_src())
    x = np.ones(N, np.float32)
    r = CpuRunner()
    r.set_task("t", [x, x], [x * 2.0], [((N,), "float32")])
    assert_ok(r.run(lib, "add_kernel", "t", FAST))
    proc = r._proc
    assert proc is not None and proc.is_alive()
    pid = proc.pid
    r.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError):
        r.run(lib, "add_kernel", "t", FAST)


def test_run_options_validation() -> None:
    with pytest.raises(ValueError):
        RunOptions(repeat=0)
    assert RunResult((1.0, 3.0), None, "", 0.1).mean_s == 2.0


def test_parallel_render_matches_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import te
    from autotune.search import measure_batch
    from autotune.target import offline_cuda_target
    from schedules import make_space

    wl = te.make_workload("matmul", "32,32,16")
    target = offline_cuda_target("sm_90")
    space = make_space(wl, target)
    rng = np.random.default_rng(3)
    steps = [space.steps(space.sample(rng)) for _ in range(5)]
    steps.append(steps[0][:1] + [steps[0][1]] * 2)  # an illegal schedule: the same cache twice
    serial = measure_batch.render_all(target, wl, steps)
    from autotune import parallel

    monkeypatch.setattr(parallel, "MIN_CORES", 1)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 3)
    forked = measure_batch.render_all(target, wl, steps)
    assert isinstance(serial[-1], measure_batch.ScheduleError)
    assert isinstance(forked[-1], measure_batch.ScheduleError) and str(forked[-1]) == str(serial[-1])
    assert [(n, s, p) for n, s, p in forked[:-1]] == [(n, s, p) for n, s, p in serial[:-1]]
