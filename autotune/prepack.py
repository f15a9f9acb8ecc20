"""Constant operands stored in the layout a kernel reads them in (Ansor's "layout rewrite").

A CPU schedule may pack a reused operand into a small local buffer at some loop (``pack`` knob):
each call then copies tile after tile of, say, a weight matrix before computing with it. When the
operand is a constant of the model, the copy can be made once, at compile time: the whole tensor is
stored as its tiles, one after the other, and the kernel reads the tile its loops are in directly.

``PrepackSpec`` says how: permute the dims (``perm``, the cache stage's layout), cut each dim into
``counts[d]`` tiles of ``tile[d]`` elements (zero-filled past the end), and store the tile indices
first (in ``order``: the order the kernel's loops visit them), the in-tile indices last:
``packed[t_order0, .., t_orderN, e0, .., en] = src_perm[t0*T0 + e0, ...]``. Along an axis whose
loop was split with ``overlap`` (blocks of B elements, the last one shifted back to end at the
extent), ``blocks[d]`` = B / T tiles make a block, and tile t starts at
``min((t // blocks[d]) * B, extent - B) + (t % blocks[d]) * T``: the last block's tiles repeat a few
elements of the block before, as the kernel's loops do.
The measurement worker applies it to its inputs before timing (the copy is not timed: it happens
once per model load), the graph compiler to the model's weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .aligned import aligned


@dataclass(frozen=True)
class PrepackSpec:
    perm: tuple[int, ...]  # dim d of the packed operand is dim perm[d] of the source
    tile: tuple[int, ...]  # elements per tile, per (permuted) dim
    counts: tuple[int, ...]  # tiles per (permuted) dim
    order: tuple[int, ...] | None = None  # the tile dims in storage order (None: 0, 1, ...)
    blocks: tuple[int, ...] | None = None  # tiles per overlapping block, per dim (0: none; None: all 0)

    @property
    def tile_order(self) -> tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(len(self.tile)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.counts[d] for d in self.tile_order) + self.tile


def prepack_array(src: np.ndarray, spec: PrepackSpec) -> np.ndarray:
    """The packed copy of ``src`` (C-contiguous, same dtype)."""
    a = np.transpose(src, spec.perm)
    for d, b in enumerate(spec.blocks or ()):
        if b:  # the tiles of overlapping blocks, gathered whole
            size, block = a.shape[d], b * spec.tile[d]
            if block > size:
                raise ValueError(f"prepack blocks of {block} do not fit dim {d} of shape {a.shape}")
            t = np.arange(spec.counts[d])
            start = np.minimum(t // b * block, size - block) + t % b * spec.tile[d]
            a = np.take(a, (start[:, None] + np.arange(spec.tile[d])).ravel(), axis=d)
    full = tuple(c * t for c, t in zip(spec.counts, spec.tile))
    if full != a.shape:
        if any(f < s for f, s in zip(full, a.shape)):
            raise ValueError(f"prepack tiles {spec.tile} x {spec.counts} do not cover shape {a.shape}")
        a = np.pad(a, [(0, f - s) for f, s in zip(full, a.shape)])
    n = a.ndim
    split = a.reshape([x for c, t in zip(spec.counts, spec.tile) for x in (c, t)])
    order = [2 * d for d in spec.tile_order] + [2 * d + 1 for d in range(n)]
    return aligned(split.transpose(order))
