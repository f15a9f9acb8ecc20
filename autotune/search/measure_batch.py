"""Measure configs of one workload: schedule -> source -> build (parallel) -> run (isolated worker)
-> verified result. One path for every target; the target's backend (autotune.backends) holds what
differs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..measure import Builder, CpuRunner, ErrorKind, RunOptions
from ..parallel import fork_map
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

    The output scale is that of the finite values: a reference that holds -inf (a masked score)
    must not widen the tolerance to infinity (every finite value would pass); infinities match
    only themselves."""
    finite = [np.abs(r[np.isfinite(r)]) if r.dtype.kind in "fc" else np.abs(r) for r in reference]
    scale = max((float(f.max()) for f in finite if f.size), default=1.0)
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


@dataclass(frozen=True)
class MeasureTask:
    """What every run of one workload's kernels needs: fresh random inputs, their float64 reference,
    the outputs' shapes and dtypes, the run options (tolerances set from the reference) and the id
    runners know the task by."""

    task_id: str
    inputs: list[np.ndarray]
    reference: list[np.ndarray]
    output_specs: list[tuple[tuple[int, ...], Any]]
    options: RunOptions


def prepare_task(workload: Workload, target: Target, run_options: RunOptions | None = None,
                 seed: int | None = None, label: str = "") -> MeasureTask:
    """Fresh random inputs for every tuning session unless a seed pins them; ``label`` makes the
    task id unique among the sessions of one workload."""
    rng = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
    inputs = workload.random_inputs(rng)
    reference = workload.run_reference(inputs)
    rtol, atol = tolerances(reference, workload.precision, reduction_length(workload))
    options = target.backend.run_options(workload, _with_tolerances(run_options or RunOptions(), rtol, atol))
    specs = [(o.shape, o.dtype) for o in workload.outputs]
    return MeasureTask(f"{workload.key}-{label}", inputs, reference, specs, options)


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
        self.backend = target.backend
        self.builder, self.runner = builder, runner
        task = prepare_task(workload, target, run_options, seed, label=str(id(self)))
        self.options, self.task_id = task.options, task.task_id
        self.seconds = {"render": 0.0, "build": 0.0, "run": 0.0}  # where measuring time goes
        self.runners = 1  # runner processes whose busy time ``seconds["run"]`` sums
        runner.set_task(self.task_id, task.inputs, task.reference, task.output_specs)

    def measure(self, configs: list[dict], steps: list[list[Step]]) -> Iterator[Trial]:
        """Measure a batch; yields each trial as soon as its result is known (sources rendered
        and built in parallel first, then kernels run one at a time so they do not disturb each
        other)."""
        rendered = []
        t0 = time.perf_counter()
        for cfg, st, out in zip(configs, steps, render_all(self.target, self.workload, steps)):
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
            r = self.backend.run(self.runner, b.lib_path, name, payload, self.task_id, self.options)
            self.seconds["run"] += time.perf_counter() - t3
            kind = r.error_kind.value if r.error_kind is not None else None
            yield Trial(cfg, st, tuple(r.costs), kind, r.error_msg, b.build_s)


def render_one(job: tuple[Target, Workload], steps: list[Step]) -> Any:
    """(name, source, payload) of one schedule, or its ScheduleError."""
    target, wl = job
    try:
        return target.backend.measured_kernel(wl, steps, target)
    except ScheduleError as err:
        return err


def render_all(target: Target, wl: Workload, steps: list[list[Step]]) -> list[Any]:
    """Lower and render every schedule: (name, source, payload) or the ScheduleError. Forked
    worker processes share the work on machines with cores to spare (lowering is pure Python)."""
    return fork_map(render_one, (target, wl), steps)


def _with_tolerances(options: RunOptions, rtol: float, atol: float) -> RunOptions:
    from dataclasses import replace

    return replace(options, rtol=rtol, atol=atol)
