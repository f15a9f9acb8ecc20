"""Shared fixtures for the compiler-core tests: build a schedule, compile it, run it, compare.

``check_kernel(workload, steps)`` lowers and renders the schedule for the host CPU, compiles it
with the Builder (a per-session cache directory), runs it once in a CpuRunner (one per test
module) on fresh random inputs and asserts that every output matches the float64 reference.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pytest

from autotune.measure import Builder, BuildOptions, CpuRunner, RunOptions
from autotune.program import Program, build_program
from autotune.schedule import Step
from autotune.target import Target, cpu_target
from autotune.te import Workload

CHECK_OPTIONS = RunOptions(number=1, repeat=1, min_repeat_ms=0.0, timeout_s=30.0, rtol=1e-4, atol=1e-4)

CheckKernel = Callable[[Workload, Sequence[Step]], Program]


@pytest.fixture(scope="session")
def host_target() -> Target:
    return cpu_target()


@pytest.fixture(scope="session")
def kernel_builder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builder]:
    with Builder(BuildOptions(cache_dir=tmp_path_factory.mktemp("kernel-builds")), workers=1) as b:
        yield b


@pytest.fixture(scope="module")
def kernel_runner() -> Iterator[CpuRunner]:
    with CpuRunner() as r:
        yield r


@pytest.fixture(scope="module")
def check_kernel(kernel_builder: Builder, kernel_runner: CpuRunner, host_target: Target) -> CheckKernel:
    counter = itertools.count()

    def check(workload: Workload, steps: Sequence[Step], options: RunOptions = CHECK_OPTIONS) -> Program:
        prog = build_program(workload, list(steps), host_target)
        built = kernel_builder.build(prog.kernel_name, prog.source)
        assert built.ok, f"build failed ({built.error_kind}): {built.error_msg}\n{prog.source}"
        inputs = workload.random_inputs(np.random.default_rng())
        refs = workload.run_reference(inputs)
        task = f"{workload.key}-{next(counter)}"
        kernel_runner.set_task(task, inputs, refs, [(o.shape, o.dtype) for o in workload.outputs])
        if prog.prepack and not options.prepack:  # constants the kernel reads pre-tiled, as measured
            options = dataclasses.replace(options, prepack=tuple(prog.prepack))
        try:
            res = kernel_runner.run(built.lib_path, prog.kernel_name, task, options)
        finally:
            kernel_runner.remove_task(task)
        assert res.error_kind is None, f"{res.error_kind}: {res.error_msg}\nsteps: {list(steps)}\n{prog.func}"
        assert len(res.costs) == options.repeat and all(c >= 0 for c in res.costs)
        return prog

    return check


# Markers (registered in pyproject.toml), given here by one rule each so test files need not repeat
# them: `gpu` where a test needs a CUDA device (its skipif says "CUDA device"), `torch` for the
# modules that need PyTorch, `slow` for the modules and tests that run real tuners, kill -9s or
# thousands of conformance cases in processes of their own. `pytest -m "not slow"` is the quick run.
SLOW_MODULES = {"test_db_faults.py", "test_onnx_conformance.py", "test_distributed.py",
                "test_bench_search.py"}
SLOW_TESTS = ("kill_9",)
TORCH_MODULES = {"test_torch_frontend.py", "test_torch_baseline.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.name
        if module in SLOW_MODULES or any(s in item.name for s in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
        if module in TORCH_MODULES:
            item.add_marker(pytest.mark.torch)
        if any("CUDA device" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.gpu)
