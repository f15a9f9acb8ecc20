"""From (workload, schedule steps, target) to lowered IR and source code: the path every backend,
the cost model and the graph compiler share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .codegen import CpuRenderer
from .ir import PrimFunc, lower, optimize
from .schedule import Step, apply_steps
from .target import Target
from .te import Workload


@dataclass(frozen=True)
class Program:
    """A scheduled, lowered and rendered kernel."""

    kernel_name: str
    func: PrimFunc
    source: str


def kernel_name(workload: Workload) -> str:
    return f"{workload.name}_{workload.key[:10]}"


def lower_program(workload: Workload, steps: Sequence[Step], target: Target) -> PrimFunc:
    """Apply the steps and lower; raises ScheduleError for an illegal schedule."""
    sch = apply_steps(workload.outputs, steps)
    func = lower(sch, workload.args, kernel_name(workload))
    return optimize(func, target.vector_lanes)


def build_program(workload: Workload, steps: Sequence[Step], target: Target) -> Program:
    """Lowered IR and rendered source of one schedule."""
    if target.kind != "cpu":
        raise NotImplementedError(f"no renderer for target {target.kind!r} yet")
    func = lower_program(workload, steps, target)
    return Program(func.name, func, CpuRenderer(target.vector_lanes).render(func))
