"""Arrays that start on a 64-byte boundary: one cache line, one AVX-512 vector.

numpy's buffers are only 16-byte aligned, so where a kernel's operand starts within a cache line
changes from one allocation to the next; with 64-byte vectors a misaligned operand splits every
load across two lines. Kernel operands — the tuning worker's inputs and outputs, a compiled model's
weights, inputs and outputs — are allocated here, so a kernel runs in the model as it was timed.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

ALIGN = 64
HUGE_PAGE = 2 << 20  # x86-64's transparent huge page


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ``align`` bytes."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    shift = (-address(raw)) % align
    return raw[shift : shift + nbytes].view(dt).reshape(shape)


def address(a: np.ndarray) -> int:
    """Where ``a``'s data starts (a few times quicker than ``a.ctypes.data``)."""
    return a.__array_interface__["data"][0]


def is_aligned(a: np.ndarray, align: int = ALIGN) -> bool:
    """Is ``a`` C-contiguous and does its data start at a multiple of ``align`` bytes?"""
    return a.flags.c_contiguous and address(a) % align == 0


def aligned(arr: np.ndarray, align: int = ALIGN) -> np.ndarray:
    """``arr`` if it is C-contiguous and aligned, else an aligned C-contiguous copy."""
    a = np.asarray(arr)
    if is_aligned(a, align):
        return a
    out = aligned_empty(a.shape, a.dtype, align)
    np.copyto(out, a)
    return out


def huge_page_buffer(nbytes: int) -> np.ndarray:
    """A zeroed ``uint8`` buffer of ``nbytes`` that starts on a 2 MiB boundary, which the kernel is
    asked to back with transparent huge pages (``madvise``; where it is not Linux, or huge pages are
    off, it is ordinary memory). A model's weights stream from memory on every run: with 4 KiB
    pages each page is a TLB miss and a stop for the hardware prefetchers. A cold sequential read
    of 16 MiB took 1.8x as long as from huge pages; inside models the kernels gained 0-4%
    (``bench/cpu_models/huge_pages``)."""
    mm = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mm, dtype=np.uint8)
    start = (-address(whole)) % HUGE_PAGE
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, start, nbytes - nbytes % HUGE_PAGE or HUGE_PAGE)
        except OSError:  # huge pages unavailable here: ordinary pages
            pass
    return whole[start : start + nbytes]
