"""Describe a CUDA device without importing pycuda in this process."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from typing import Any

from .cuda_builder import nvcc_version

# Runs in a child interpreter: the parent never loads pycuda or the driver.
_QUERY_SCRIPT = r"""
import json, sys

def query(dev_id):
    try:
        import pycuda.driver as cuda
    except Exception as e:
        return {"error": "cannot import pycuda.driver (%s: %s)" % (type(e).__name__, e)}
    try:
        cuda.init()
        count = cuda.Device.count()
        if not 0 <= dev_id < count:
            return {"error": "device %d not present (%d devices)" % (dev_id, count)}
        dev = cuda.Device(dev_id)
        A = cuda.device_attribute

        def attr(name):
            a = getattr(A, name, None)
            if a is None:
                return 0
            try:
                return int(dev.get_attribute(a))
            except Exception:
                return 0

        major, minor = dev.compute_capability()
        drv = int(cuda.get_driver_version())
        info = {
            "multiprocessors": attr("MULTIPROCESSOR_COUNT"),
            "max_threads_per_block": attr("MAX_THREADS_PER_BLOCK"),
            "max_block_dim": [attr("MAX_BLOCK_DIM_" + c) for c in "XYZ"],
            "max_grid_dim": [attr("MAX_GRID_DIM_" + c) for c in "XYZ"],
            "max_shared_per_block": attr("MAX_SHARED_MEMORY_PER_BLOCK"),
            "max_shared_per_block_optin": attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "max_shared_per_multiprocessor": attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            "registers_per_block": attr("MAX_REGISTERS_PER_BLOCK"),
            "registers_per_multiprocessor": attr("MAX_REGISTERS_PER_MULTIPROCESSOR"),
            "max_threads_per_multiprocessor": attr("MAX_THREADS_PER_MULTIPROCESSOR"),
            "warp_size": attr("WARP_SIZE"),
            "l2_bytes": attr("L2_CACHE_SIZE"),
            "clock_khz": attr("CLOCK_RATE"),
            "memory_clock_khz": attr("MEMORY_CLOCK_RATE"),
            "memory_bus_width": attr("GLOBAL_MEMORY_BUS_WIDTH"),
        }
        info.update(
            device_id=dev_id,
            name=dev.name(),
            compute_capability=[int(major), int(minor)],
            arch="sm_%d%d" % (major, minor),
            total_memory=int(dev.total_memory()),
            driver_version=drv,
            driver_cuda_version="%d.%d" % (drv // 1000, drv % 1000 // 10),
            pycuda_cuda_version=".".join(str(v) for v in cuda.get_version()),
        )
        return info
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}

print(json.dumps(query(int(sys.argv[1]))))
"""


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


@functools.lru_cache(maxsize=16)
def _query(device_id: int, timeout_s: float) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _QUERY_SCRIPT, str(device_id)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(_one_line(f"no CUDA device: query process failed: {e}")) from None
    lines = proc.stdout.strip().splitlines()
    try:
        info = json.loads(lines[-1]) if lines else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise RuntimeError(_one_line(f"no CUDA device: query process failed: {tail[0]}"))
    if "error" in info:
        raise RuntimeError(_one_line(f"no CUDA device: {info['error']}"))
    info["nvcc"] = info["nvcc_version"] = nvcc_version()
    return json.dumps(info)


def query_device(device_id: int = 0, timeout_s: float = 60.0) -> dict[str, Any]:
    """Properties of CUDA device `device_id`, read in a child process (cached).

    Keys (the ones autotune.target.cuda_target reads among them): name, arch
    ("sm_90"), compute_capability (9, 0), multiprocessors, max_threads_per_block,
    max_block_dim, max_grid_dim, max_shared_per_block, max_shared_per_block_optin,
    max_shared_per_multiprocessor, registers_per_block, registers_per_multiprocessor,
    max_threads_per_multiprocessor, warp_size, l2_bytes, total_memory, clock_khz,
    memory_clock_khz, memory_bus_width, driver_version (e.g. 13000),
    driver_cuda_version ("13.0"), pycuda_cuda_version, nvcc (= nvcc_version).
    Raises a one-line RuntimeError("no CUDA device: ...") when
    pycuda, the driver or the GPU is missing.
    """
    info = json.loads(_query(int(device_id), float(timeout_s)))
    for key in ("compute_capability", "max_block_dim", "max_grid_dim"):
        info[key] = tuple(info[key])
    return info


@functools.lru_cache(maxsize=16)
def has_cuda_device(device_id: int = 0) -> bool:
    """True if pycuda can see device `device_id`; never raises."""
    try:
        if importlib.util.find_spec("pycuda") is None:
            return False
        query_device(device_id)
    except Exception:  # noqa: BLE001 - any failure means "no"
        return False
    return True
