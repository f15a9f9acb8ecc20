"""Targets and their hardware fingerprints (the key records are stored under)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends import TargetBackend

_ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "amx_tile",
    "neon",
    "asimd",
)


@dataclass(frozen=True)
class Target:
    """Where kernels run: ``kind`` ("cpu" or "cuda") and a fingerprint of the machine."""

    kind: str
    fingerprint: dict = field(default_factory=dict, compare=False, hash=False)
    key: str = ""

    @property
    def backend(self) -> TargetBackend:
        """The backend of this target's kind (space, renderer, builder, runner, module builder)."""
        from .backends import backend_for

        return backend_for(self.kind)

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of the widest SIMD unit the fingerprint reports."""
        return self.backend.vector_lanes(self.fingerprint)

    @property
    def accumulator_registers(self) -> int:
        """Vector accumulators a CPU register tile may hold: 16 on AVX2 (its 16 ymm registers;
        operands are reloaded or broadcast from memory), 24 on AVX-512 (32 zmm registers, eight
        left for operand vectors and broadcasts)."""
        return 24 if "avx512f" in set(self.fingerprint.get("isa", ())) else 16

    @property
    def cores(self) -> int:
        return int(self.fingerprint.get("cores", 1))

    def describe(self) -> str:
        return self.backend.describe(self.fingerprint)


def _cpu_model_and_flags() -> tuple[str, list[str]]:
    model, flags = platform.processor() or "unknown", []
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and model in ("unknown", "", "x86_64"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")) and not flags:
                    flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    return model, [f for f in _ISA_FLAGS if f in flags]


def version_fields(kind: str) -> tuple[str, ...]:
    """Fingerprint fields that name software versions, not hardware (the backend's): records of a
    target that differs from this machine's only in these are the nearest compatible ones (same CPU
    and ISA, or the same GPU and arch, with another compiler or driver), used where there are no
    exact records."""
    from .backends import UnknownTargetKind, backend_for

    try:
        return backend_for(kind).version_fields
    except UnknownTargetKind:
        return ()


def hardware_of(kind: str, fingerprint: dict) -> dict:
    """The fingerprint without its software versions (version_fields)."""
    return {k: v for k, v in fingerprint.items() if k not in version_fields(kind)}


def nearest_records_target(db, target: Target) -> tuple[Target, str]:  # noqa: ANN001 - a TuningDatabase
    """The target whose records compile and bench use: ``target`` itself where ``db`` holds verified
    records of it, else the compatible target (same hardware, other software versions) with the most
    verified records, as a Target with this machine's fingerprint and that target's key; and a note
    saying which versions differ ("" for the exact target, or when no compatible target has records)."""
    if db.count(target_key=target.key, errors=False):
        return target, ""
    mine = hardware_of(target.kind, target.fingerprint)
    best: tuple[int, dict] | None = None
    for t in db.targets():
        same = t["kind"] == target.kind and hardware_of(t["kind"], t["fingerprint"]) == mine
        if not same or t["key"] == target.key:
            continue
        n = db.count(target_key=t["key"], errors=False)
        if n and (best is None or n > best[0]):
            best = (n, t)
    if best is None:
        return target, ""
    other = best[1]
    theirs, ours = other["fingerprint"], target.fingerprint
    diffs = [f"{k} {theirs.get(k, '?')!r} (here {ours.get(k, '?')!r})"
             for k in version_fields(target.kind) if theirs.get(k) != ours.get(k)]
    note = (f"no records for this exact target; using those of the nearest compatible target "
            f"{other['key']} (same hardware, {'; '.join(diffs) or 'other versions'}); "
            f"--exact-target refuses them")
    return Target(target.kind, target.fingerprint, other["key"]), note


def target_key(kind: str, fingerprint: dict) -> str:
    blob = json.dumps({"kind": kind, **fingerprint}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def make_target(kind: str, fingerprint: dict) -> Target:
    return Target(kind, fingerprint, target_key(kind, fingerprint))


def cpu_target(compiler: str = "gcc") -> Target:
    """The CPU this process runs on, with the compiler that builds for it."""
    from .measure import compiler_version

    model, isa = _cpu_model_and_flags()
    fp = {
        "model": model,
        "arch": platform.machine(),
        "isa": isa,
        "cores": os.cpu_count() or 1,
        "compiler": compiler_version(compiler),
    }
    return make_target("cpu", fp)


def cuda_target(device: dict) -> Target:
    """A CUDA target from a device description (see autotune.measure.cuda_device.query_device):
    name, arch (e.g. "sm_90", read from the device, never assumed), SM count, limits, versions."""
    keys = (
        "name",
        "arch",
        "multiprocessors",
        "max_threads_per_block",
        "max_shared_per_block",
        "max_shared_per_block_optin",
        "registers_per_block",
        "l2_bytes",
        "driver_version",
        "nvcc",
    )
    fp = {k: device[k] for k in keys if k in device}
    if "arch" not in fp:
        raise ValueError("a CUDA target needs the device's arch (e.g. sm_90)")
    return make_target("cuda", fp)


def offline_cuda_target(arch: str = "sm_90") -> Target:
    """A CUDA target for compiling without a device (tests, code inspection); H100/H200-like limits."""
    return cuda_target(
        {
            "name": f"offline {arch}",
            "arch": arch,
            "multiprocessors": 132,
            "max_threads_per_block": 1024,
            "max_shared_per_block": 49152,
            "max_shared_per_block_optin": 232448,
            "registers_per_block": 65536,
        }
    )
