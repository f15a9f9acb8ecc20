"""Shared pieces of the command-line tools: one-line errors with exit code 2, DB and target."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from records import RecordsError, TuningDatabase

from ..target import Target, cpu_target, cuda_target

TARGETS = ("cpu", "cuda")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def open_db(path: str, create: bool = True) -> TuningDatabase:
    try:
        return TuningDatabase(Path(path), create=create)
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None


def resolve_target(kind: str) -> Target:
    if kind == "cpu":
        return cpu_target()
    if kind == "cuda":
        from ..measure.cuda_builder import nvcc_version
        from ..measure.cuda_device import query_device

        try:
            device = query_device()
        except RuntimeError as err:
            raise UsageError(str(err).splitlines()[0]) from None
        device["nvcc"] = nvcc_version()
        return cuda_target(device)
    raise UsageError(f"unknown target {kind!r}; valid targets: {', '.join(TARGETS)}")


def measure_tools(target: Target) -> tuple:
    """(builder, runner) for a target: gcc + CPU worker, or nvcc for the device's arch + GPU worker."""
    from ..measure import Builder, CpuRunner

    if target.kind == "cuda":
        from ..measure.cuda_builder import CudaBuilder, CudaBuildOptions
        from ..measure.cuda_runner import CudaRunner

        return CudaBuilder(CudaBuildOptions(arch=target.fingerprint["arch"])), CudaRunner()
    return Builder(), CpuRunner()
