"""Arrays that start on a 64-byte boundary: one cache line, one AVX-512 vector.

numpy's buffers are only 16-byte aligned, so where a kernel's operand starts within a cache line
changes from one allocation to the next; with 64-byte vectors a misaligned operand splits every
load across two lines. Kernel operands — the tuning worker's inputs and outputs, a compiled model's
weights, inputs and outputs — are allocated here, so a kernel runs in the model as it was timed.
"""

from __future__ import annotations

import numpy as np

ALIGN = 64


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ``align`` bytes."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    shift = (-raw.ctypes.data) % align
    return raw[shift : shift + nbytes].view(dt).reshape(shape)


def is_aligned(a: np.ndarray, align: int = ALIGN) -> bool:
    """Is ``a`` C-contiguous and does its data start at a multiple of ``align`` bytes?"""
    return a.flags.c_contiguous and a.ctypes.data % align == 0


def aligned(arr: np.ndarray, align: int = ALIGN) -> np.ndarray:
    """``arr`` if it is C-contiguous and aligned, else an aligned C-contiguous copy."""
    a = np.asarray(arr)
    if is_aligned(a, align):
        return a
    out = aligned_empty(a.shape, a.dtype, align)
    np.copyto(out, a)
    return out
