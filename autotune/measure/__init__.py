"""Build kernels into shared libraries and measure them in an isolated process."""

from .builder import Builder, BuildOptions, BuildResult, compiler_version
from .errors import ErrorKind
from .harness import TIMER_SYMBOL, full_source, harness_source
from .runner import CpuRunner, RunOptions, RunResult

__all__ = [
    "TIMER_SYMBOL",
    "BuildOptions",
    "BuildResult",
    "Builder",
    "CpuRunner",
    "ErrorKind",
    "RunOptions",
    "RunResult",
    "compiler_version",
    "full_source",
    "harness_source",
]
