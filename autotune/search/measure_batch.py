"""Measure configs of one workload on the CPU: schedule -> source -> build (parallel) -> run
(isolated worker) -> verified result."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..measure import Builder, CpuRunner, ErrorKind, RunOptions
from ..program import build_program
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


def tolerances(reference: list[np.ndarray]) -> tuple[float, float]:
    """rtol, atol for float32 kernels against a float64 reference."""
    scale = max(float(np.max(np.abs(r))) for r in reference) if reference else 1.0
    return 1e-4, 1e-4 * max(scale, 1e-3)


class WorkloadMeasurer:
    """Holds fresh random inputs and their reference for one workload, and measures configs."""

    def __init__(self, workload: Workload, target: Target, builder: Builder, runner: CpuRunner,
                 run_options: RunOptions | None = None, seed: int | None = None) -> None:
        self.workload, self.target = workload, target
        self.builder, self.runner = builder, runner
        # fresh inputs for every tuning session unless a seed pins them
        rng = np.random.default_rng(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))
        inputs = workload.random_inputs(rng)
        reference = workload.run_reference(inputs)
        rtol, atol = tolerances(reference)
        base = run_options or RunOptions()
        self.options = RunOptions(base.number, base.repeat, base.min_repeat_ms, base.timeout_s, rtol, atol)
        self.task_id = f"{workload.key}-{id(self)}"
        runner.set_task(self.task_id, inputs, reference, [(o.shape, o.dtype) for o in workload.outputs])

    def measure(self, configs: list[dict], steps: list[list[Step]]) -> Iterator[Trial]:
        """Measure a batch; yields each trial as soon as its result is known (builds run in
        parallel first, then kernels run one at a time so they do not disturb each other)."""
        programs = []
        for cfg, st in zip(configs, steps):
            try:
                programs.append((cfg, st, build_program(self.workload, st, self.target)))
            except ScheduleError as err:
                yield Trial(cfg, st, (), ErrorKind.INVALID_SCHEDULE.value, str(err), 0.0)
        builds = self.builder.build_many([(p.kernel_name, p.source) for _, _, p in programs])
        for (cfg, st, prog), b in zip(programs, builds):
            if b.error_kind is not None:
                yield Trial(cfg, st, (), b.error_kind.value, b.error_msg, b.build_s)
                continue
            r = self.runner.run(b.lib_path, prog.kernel_name, self.task_id, self.options)
            kind = r.error_kind.value if r.error_kind is not None else None
            yield Trial(cfg, st, tuple(r.costs), kind, r.error_msg, b.build_s)
