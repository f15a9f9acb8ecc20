"""Schedule primitives as replayable steps."""

from .state import Schedule, ScheduleError, Stage
from .steps import (
    AnnotateStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
    StoragePadStep,
    Step,
    TileStep,
    apply_steps,
    bind,
    parallel,
    step_from_dict,
    unroll,
    vectorize,
)

__all__ = [
    "AnnotateStep", "CacheReadStep", "CacheWriteStep", "ComputeAtStep", "ComputeInlineStep", "FuseStep", "ReorderStep",
    "Schedule", "ScheduleError", "SplitStep", "StoragePadStep", "Stage", "Step", "TileStep", "apply_steps", "bind", "parallel",
    "step_from_dict", "unroll", "vectorize",
]
