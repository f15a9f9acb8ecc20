"""The CPU backend: C11 + OpenMP + GCC vector types, built with gcc, run in an isolated worker."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from . import TargetBackend, register

COLD_REPEAT = 7  # single timed calls per cold measurement (their mean is the cost)


class CpuBackend(TargetBackend):
    kind = "cpu"
    version_fields = ("compiler",)
    profiles_modules = True
    runs_own_host = True
    builds_for_own_host = True
    concat_in_place = True

    def resolve(self) -> Any:
        from ..target import cpu_target

        return cpu_target()

    def vector_lanes(self, fingerprint: dict) -> int:
        isa = set(fingerprint.get("isa", ()))
        if "avx512f" in isa:
            return 16
        if "avx" in isa or "avx2" in isa:
            return 8
        return 4

    def describe(self, fingerprint: dict) -> str:
        fp = fingerprint
        return f"cpu {fp.get('model', '?')} ({fp.get('cores')} cores, {'+'.join(fp.get('isa', []))})"

    def make_space(self, workload: Any, target: Any) -> Any:
        from schedules.cpu import cpu_space

        return cpu_space(workload, target)

    def render(self, workload: Any, steps: Sequence[Any], target: Any) -> Any:
        from ..program import build_program

        return build_program(workload, steps, target)

    def render_into(self, workload: Any, steps: Sequence[Any], target: Any, view: Any) -> Any:
        from ..program import build_program

        return build_program(workload, steps, target, out_view=(view.shape, view.offset))

    def measured_kernel(self, workload: Any, steps: Sequence[Any], target: Any) -> tuple[str, str, Any]:
        prog = self.render(workload, steps, target)
        return prog.kernel_name, prog.source, prog.prepack

    def make_builder(self, target: Any, workers: int | None = None) -> Any:
        from ..measure import Builder

        return Builder(workers=workers)

    def make_runner(self, target: Any) -> Any:
        from ..measure import CpuRunner

        return CpuRunner()

    def run(self, runner: Any, lib_path: str, name: str, payload: Any, task_id: str, options: Any) -> Any:
        if payload:  # pre-tiled constant operands: the worker re-lays them out, untimed
            options = dataclasses.replace(options, prepack=payload)
        return runner.run(lib_path, name, task_id, options)

    def run_options(self, workload: Any, options: Any) -> Any:
        if not workload.const_inputs:
            return options
        # a model's weights are cold when their kernel runs: time it that way
        return dataclasses.replace(options, cold_inputs=workload.const_inputs,
                                   repeat=max(options.repeat, COLD_REPEAT))

    def module_backend(self, target: Any, **kwargs: Any) -> Any:
        from ..graph.runtime import CpuModuleBackend

        return CpuModuleBackend(target, **kwargs)


register(CpuBackend())
