"""Schedule-space generators per target."""

from .cpu import CpuSketch, cpu_space
from .space import ChoiceKnob, Config, SearchSpace, SplitKnob, factorizations


def make_space(workload, target) -> SearchSpace:  # noqa: ANN001 - Workload, Target
    """The search space of ``workload`` on ``target``."""
    if target.kind == "cpu":
        return cpu_space(workload, target)
    if target.kind == "cuda":
        from .cuda import cuda_space
        from .tensorcore import tensor_core_space

        # a product in float16/bfloat16/TF32 runs on tensor cores
        return tensor_core_space(workload, target) or cuda_space(workload, target)
    raise NotImplementedError(f"no schedule space for target {target.kind!r} yet")


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
