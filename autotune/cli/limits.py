"""Size limits checked before anything is allocated or written: the generated C indexes every
tensor with 32-bit ``int``, and tuning / compiling holds several copies of each array in memory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from .common import UsageError

INT32_MAX = 2**31 - 1
# copies of the float32 inputs and outputs alive while a workload is tuned: the inputs, their
# float64 widening and the float64 reference in this process, and the inputs, reference and output
# buffers again in the measuring worker (about 4x the inputs plus 5x the outputs; 5x both is a bound)
TUNE_COPIES = 5
# a model: its weights and activations in our module plus the reference run (onnxruntime)
MODEL_COPIES = 2
# the share of the available memory one run may plan to take
MEMORY_SHARE = 0.5


def available_memory() -> int:
    """Bytes this process can still allocate: MemAvailable, capped by a cgroup (v2) limit."""
    avail = _meminfo_available()
    cgroup = _cgroup_headroom()
    return min(avail, cgroup) if cgroup is not None else avail


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _cgroup_headroom() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((root / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        return None


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def check_elements(what: str, shapes: Iterable[tuple[str, tuple[int, ...]]]) -> None:
    """Refuse a tensor of more than INT32_MAX elements (the generated C's indices are ``int``)."""
    for name, shape in shapes:
        size = 1
        for d in shape:
            size *= int(d)
        if size > INT32_MAX:
            raise UsageError(
                f"{what}: tensor {name!r} {list(shape)} has {size} elements; the generated kernels "
                f"index with 32-bit int, at most {INT32_MAX}"
            )


def check_memory(what: str, nbytes: int, copies: int) -> None:
    """Refuse a run whose arrays (``copies`` x ``nbytes``) exceed MEMORY_SHARE of available memory."""
    need, avail = nbytes * copies, available_memory()
    if need > avail * MEMORY_SHARE:
        raise UsageError(
            f"{what} needs about {gib(need)} of memory ({gib(nbytes)} of arrays, {copies} copies); "
            f"the limit is {MEMORY_SHARE:.0%} of the {gib(avail)} available"
        )


def check_workload(wl, label: str) -> None:  # noqa: ANN001 - an autotune.te.Workload
    """32-bit indexing and memory of one workload to tune, before anything is allocated."""
    check_elements(label, [(t.name, tuple(t.shape)) for t in wl.tensors])
    nbytes = sum(t.size * 4 for t in wl.args)  # the kernel's arrays, as float32
    check_memory(f"tuning {label}", nbytes, TUNE_COPIES)


def check_graph(graph) -> None:  # noqa: ANN001 - an autotune.graph.ir.Graph
    """32-bit indexing and memory of a whole model (every value held at once: an upper bound)."""
    empty = [n for n, t in graph.types.items() if t.size == 0 and n not in graph.consts]
    if empty:
        name, shape = empty[0], list(graph.types[empty[0]].shape)
        what = f"input {name!r} {shape} has a 0-sized dim" if name in graph.inputs else \
            f"value {name!r} {shape} is empty"
        raise UsageError(f"model {graph.name!r}: {what}; empty tensors are not supported")
    check_elements(f"model {graph.name!r}", [(n, t.shape) for n, t in graph.types.items()])
    check_memory(f"model {graph.name!r}", sum(t.nbytes for t in graph.types.values()), MODEL_COPIES)
