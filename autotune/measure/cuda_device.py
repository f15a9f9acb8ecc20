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
        names = ["MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_BLOCK", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y",
                 "MAX_BLOCK_DIM_Z", "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z",
                 "MAX_SHARED_MEMORY_PER_BLOCK", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                 "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MAX_REGISTERS_PER_BLOCK",
                 "MAX_REGISTERS_PER_MULTIPROCESSOR", "MAX_THREADS_PER_MULTIPROCESSOR", "WARP_SIZE",
                 "L2_CACHE_SIZE", "CLOCK_RATE", "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH"]
        info = {name.lower(): attr(name) for name in names}
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
    info["nvcc_version"] = nvcc_version()
    return json.dumps(info)


def query_device(device_id: int = 0, timeout_s: float = 60.0) -> dict[str, Any]:
    """Properties of CUDA device `device_id`, read in a child process (cached).

    Keys include name, arch ("sm_90"), compute_capability, multiprocessor_count,
    max_threads_per_block, max_shared_memory_per_block(_optin),
    max_registers_per_block, l2_cache_size, total_memory, driver_version and
    nvcc_version. Raises a one-line RuntimeError("no CUDA device: ...") when
    pycuda, the driver or the GPU is missing.
    """
    info = json.loads(_query(int(device_id), float(timeout_s)))
    info["compute_capability"] = tuple(info["compute_capability"])
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
