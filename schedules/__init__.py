"""Schedule-space generators per target."""

from .cpu import CpuSketch, cpu_space
from .space import ChoiceKnob, Config, SearchSpace, SplitKnob, factorizations


def make_space(workload, target) -> SearchSpace:  # noqa: ANN001 - Workload, Target
    """The search space of ``workload`` on ``target`` (its backend's space generator)."""
    return target.backend.make_space(workload, target)


__all__ = [
    "ChoiceKnob",
    "Config",
    "CpuSketch",
    "SearchSpace",
    "SplitKnob",
    "cpu_space",
    "factorizations",
    "make_space",
]
