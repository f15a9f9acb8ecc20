"""The CUDA backend: kernels rendered as CUDA C (tensor-core products on their own space), built by
nvcc for the device's arch, run in a worker process that owns the GPU context (pycuda is imported
there, on the run path only)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Sequence

from . import TargetBackend, register

GPU_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus() -> list[str]:
    """The GPUs this host shows: CUDA_VISIBLE_DEVICES where set, else the indices nvidia-smi lists."""
    listed = os.environ.get(GPU_ENV)
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(i) for i, _ in enumerate(ln for ln in out.splitlines() if ln.startswith("GPU "))]


class CudaBackend(TargetBackend):
    kind = "cuda"
    version_fields = ("driver_version", "nvcc")
    benched_against_torch = True

    def resolve(self) -> Any:
        from ..measure.cuda_builder import nvcc_version
        from ..measure.cuda_device import query_device
        from ..target import cuda_target

        device = query_device()  # RuntimeError where there is no usable device
        device["nvcc"] = nvcc_version()
        return cuda_target(device)

    def vector_lanes(self, fingerprint: dict) -> int:
        return 4  # float4: 16-byte loads and stores

    def make_space(self, workload: Any, target: Any) -> Any:
        from schedules.cuda import cuda_space
        from schedules.tensorcore import tensor_core_space

        # a product in float16/bfloat16/TF32 runs on tensor cores
        return tensor_core_space(workload, target) or cuda_space(workload, target)

    def render(self, workload: Any, steps: Sequence[Any], target: Any) -> Any:
        from ..program import build_cuda_program

        return build_cuda_program(workload, steps, target)

    def measured_kernel(self, workload: Any, steps: Sequence[Any], target: Any) -> tuple[str, str, Any]:
        prog = self.render(workload, steps, target)
        return prog.kernels[0].name, prog.source, prog.launch_plan()

    def make_builder(self, target: Any, workers: int | None = None) -> Any:
        from ..measure.cuda_builder import CudaBuilder, CudaBuildOptions

        return CudaBuilder(CudaBuildOptions(arch=target.fingerprint["arch"]), workers=workers)

    def make_runner(self, target: Any) -> Any:
        from ..measure.cuda_runner import CudaRunner

        return CudaRunner()

    def run(self, runner: Any, lib_path: str, name: str, payload: Any, task_id: str, options: Any) -> Any:
        return runner.run(lib_path, payload, task_id, options)

    def runner_envs(self) -> list[dict[str, str]] | None:
        """One runner per visible GPU, each seeing only its own."""
        return [{GPU_ENV: g} for g in visible_gpus()]

    def module_backend(self, target: Any, **kwargs: Any) -> Any:
        from ..graph.runtime import CudaModuleBackend

        return CudaModuleBackend(target, **kwargs)

    def entry_note(self, entry: str) -> str:
        return f"entry points {entry}_init / _run / _time: one CUDA graph per run"


register(CudaBackend())
