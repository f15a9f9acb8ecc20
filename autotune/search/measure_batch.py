"""Measure configs of one workload: schedule -> source -> build (parallel) -> run (isolated worker)
-> verified result. One path for every target; a Backend holds what differs."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..measure import Builder, CpuRunner, ErrorKind, RunOptions
from ..parallel import fork_map
from ..program import build_cuda_program, build_program
from ..schedule import ScheduleError, Step
from ..target import Target
from ..te import Workload


@dataclass(frozen=True)
class Trial:
    """One measured config: its steps and either costs or an error."""

    config: dict
    steps: list[Step]
    costs: tuple[float, ...]
    error_kind: str | None
    error_msg: str
    build_s: float

    @property
    def mean_s(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs and self.error_kind is None else float("inf")


COLD_REPEAT = 7  # single timed calls per cold measurement (their mean is the cost)


class Backend:
    """Render, build and run one schedule on one kind of target."""

    def __init__(self, target: Target, builder: Any, runner: Any) -> None:
        self.target, self.builder, self.runner = target, builder, runner

    def render(self, wl: Workload, steps: list[Step]) -> tuple[str, str, Any]:
        """(kernel name, source, payload for run)."""
        raise NotImplementedError

    def run(self, lib_path: str, name: str, payload: Any, task_id: str, options: RunOptions) -> Any:
        raise NotImplementedError


class CpuBackend(Backend):
    def render(self, wl: Workload, steps: list[Step]) -> tuple[str, str, Any]:
        prog = build_program(wl, steps, self.target)
        return prog.kernel_name, prog.source, prog.prepack

    def run(self, lib_path: str, name: str, payload: Any, task_id: str, options: RunOptions) -> Any:
        if payload:  # pre-tiled constant operands: the worker re-lays them out, untimed
            options = dataclasses.replace(options, prepack=payload)
        return self.runner.run(lib_path, name, task_id, options)


class CudaBackend(Backend):
    def render(self, wl: Workload, steps: list[Step]) -> tuple[str, str, Any]:
        prog = build_cuda_program(wl, steps, self.target)
        return prog.kernels[0].name, prog.source, prog.launch_plan()

    def run(self, lib_path: str, name: str, payload: Any, task_id: str, options: RunOptions) -> Any:
        return self.runner.run(lib_path, payload, task_id, options)


def make_backend(target: Target, builder: Any, runner: Any) -> Backend:
    return {"cpu": CpuBackend, "cuda": CudaBackend}[target.kind](target, builder, runner)


def tolerances(
    reference: list[np.ndarray], precision: str = "fp32", reduction: int = 1
) -> tuple[float, float]:
    """rtol, atol for a kernel against its float64 reference, by the precision its products round
    their inputs to and the length of its longest reduction. The one place tolerances are set:

    - fp32, and float16/bfloat16 inputs (exact as stored; their products are exact in float32):
      only float32 accumulation rounds, 1e-4 of the output scale, widened by 2^-24 sqrt(length)
      (a random walk of roundings; the output scale itself grows like sqrt(length));
    - tf32: every input rounded to 10 mantissa bits (relative 2^-11): the products err by about
      2^-10 of their size, so the sum errs within a few 2^-10 of the output scale: 4e-3.
    """
    scale = max(float(np.max(np.abs(r))) for r in reference) if reference else 1.0
    rel = 4e-3 if precision == "tf32" else 1e-4 + 2.0**-24 * float(np.sqrt(max(reduction, 1)))
    return rel, rel * max(scale, 1e-3)


def reduction_length(workload: Workload) -> int:
    """The longest reduction (points summed into one output) of the workload's stages."""
    from autotune.te.expr import Reduce

    best = 1
    for t in workload.tensors:
        if not t.is_placeholder and isinstance(t.body, Reduce):
            best = max(best, int(np.prod([a.extent for a in t.body.axes])))
    return best


class WorkloadMeasurer:
    """Holds fresh random inputs and their reference for one workload, and measures configs."""

    def __init__(
        self,
        workload: Workload,
        target: Target,
        builder: Builder,
        runner: CpuRunner,
        run_options: RunOptions | None = None,
        seed: int | None = None,
    ) -> None:
        self.workload, self.target = workload, target
        self.backend = make_backend(target, builder, runner)
        self.builder, self.runner = builder, runner
        # fresh inputs for every tuning session unless a seed pins them
        rng = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
        inputs = workload.random_inputs(rng)
        reference = workload.run_reference(inputs)
        rtol, atol = tolerances(reference, workload.precision, reduction_length(workload))
        base = run_options or RunOptions()
        self.options = _with_tolerances(base, rtol, atol)
        if workload.const_inputs and target.kind == "cpu":
            # a model's weights are cold when their kernel runs: time it that way
            self.options = dataclasses.replace(
                self.options, cold_inputs=workload.const_inputs, repeat=max(self.options.repeat, COLD_REPEAT)
            )
        self.task_id = f"{workload.key}-{id(self)}"
        self.seconds = {"render": 0.0, "build": 0.0, "run": 0.0}  # where measuring time goes
        runner.set_task(self.task_id, inputs, reference, [(o.shape, o.dtype) for o in workload.outputs])

    def measure(self, configs: list[dict], steps: list[list[Step]]) -> Iterator[Trial]:
        """Measure a batch; yields each trial as soon as its result is known (sources rendered
        and built in parallel first, then kernels run one at a time so they do not disturb each
        other)."""
        rendered = []
        t0 = time.perf_counter()
        for cfg, st, out in zip(configs, steps, render_all(self.backend, self.workload, steps)):
            if isinstance(out, ScheduleError):
                yield Trial(cfg, st, (), ErrorKind.INVALID_SCHEDULE.value, str(out), 0.0)
            else:
                rendered.append((cfg, st, out))
        t1 = time.perf_counter()
        builds = self.builder.build_many([(name, src) for _, _, (name, src, _) in rendered])
        t2 = time.perf_counter()
        self.seconds["render"] += t1 - t0
        self.seconds["build"] += t2 - t1
        for (cfg, st, (name, _, payload)), b in zip(rendered, builds):
            if b.error_kind is not None:
                yield Trial(cfg, st, (), b.error_kind.value, b.error_msg, b.build_s)
                continue
            t3 = time.perf_counter()
            r = self.backend.run(b.lib_path, name, payload, self.task_id, self.options)
            self.seconds["run"] += time.perf_counter() - t3
            kind = r.error_kind.value if r.error_kind is not None else None
            yield Trial(cfg, st, tuple(r.costs), kind, r.error_msg, b.build_s)


def _render_one(job: tuple[Backend, Workload], steps: list[Step]) -> Any:
    backend, wl = job
    try:
        return backend.render(wl, steps)
    except ScheduleError as err:
        return err


def render_all(backend: Backend, wl: Workload, steps: list[list[Step]]) -> list[Any]:
    """Lower and render every schedule: (name, source, payload) or the ScheduleError. Forked
    worker processes share the work on machines with cores to spare (lowering is pure Python)."""
    return fork_map(_render_one, (backend, wl), steps)


def _with_tolerances(options: RunOptions, rtol: float, atol: float) -> RunOptions:
    from dataclasses import replace

    return replace(options, rtol=rtol, atol=atol)
