"""Build kernels into shared libraries and measure them in an isolated process."""

from .builder import Builder, BuildOptions, BuildResult, compiler_version
from .cuda_builder import CudaBuilder, CudaBuildOptions, CudaProgram, Launch, nvcc_version, ptxas_info
from .cuda_device import has_cuda_device, query_device
from .cuda_runner import CudaRunner, CudaRunOptions
from .errors import ErrorKind
from .harness import TIMER_SYMBOL, full_source, harness_source
from .runner import CpuRunner, RunOptions, RunResult

__all__ = [
    "TIMER_SYMBOL",
    "BuildOptions",
    "BuildResult",
    "Builder",
    "CpuRunner",
    "CudaBuildOptions",
    "CudaBuilder",
    "CudaProgram",
    "CudaRunOptions",
    "CudaRunner",
    "ErrorKind",
    "Launch",
    "RunOptions",
    "RunResult",
    "compiler_version",
    "full_source",
    "harness_source",
    "has_cuda_device",
    "nvcc_version",
    "ptxas_info",
    "query_device",
]
