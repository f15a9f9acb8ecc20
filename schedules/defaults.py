"""The untuned default: a schedule chosen by rules from a workload's shape and the target, for a task
with no tuning records (never a random sample).

Rules propose configs of the workload's own search space, best first; the space's constraints
decide which are valid (``SearchSpace.default_config``). The last proposal of every plan is a
plain schedule that every space of its kind accepts, so a default always exists.

CPU, a tiled reduction (matmul, convolution; ``Sketch.mode`` cache_write / epilogue):
- register tile (level 3): the innermost spatial axis one or two vectors wide (the target's
  lanes; one where no operand is contiguous along it), the axes outside it as many rows as two
  thirds of the vector accumulators hold, innermost first (``register_tile``);
- reduction split (R1, the loops around the register tile): up to REDUCE_STEP steps, the
  innermost (contiguous) reduction axis first;
- parallel tiles (level 0): the outer tile loops take just enough iterations for
  PARALLEL_PER_CORE x cores (whole axes first); everything else in level 1 (the same loops,
  serial, inside each thread), level 2 left at 1;
- a model constant operand (the weights) pre-tiled at compile time; when the weights outweigh the
  output, the tiles are visited weight axis outermost (each thread keeps its weight panels);
- the register tile unrolled, its accumulators kept in registers across the reduction;
- padding inlined into the reads (a padded copy is a pass over the whole input: 4x the time of a
  depthwise convolution, and no faster for a dense one).
CPU, every other workload: producers inlined, reductions vectorized along a contiguous reduction
axis (or across contiguous output rows), coefficient axes unrolled.

GPU, a tiled reduction: on the innermost spatial axis and its pair (``tile_axes``: one that indexes
another operand) each thread a 4 x 4 register tile (float4 along the innermost axis), 16 x 16
threads a block; 16 reduction steps a shared-memory stage, the longest reduction axes first; tiles
fetched 16 bytes a thread and their fragments kept in registers; sizes shrink to what the extents
divide and the device limits allow. Other workloads: 256 threads a block (or as many as a row
has), float4 where the extents allow.
"""

from __future__ import annotations

import math
from typing import Iterator

from autotune.schedule import ComputeInlineStep, Schedule
from autotune.te.expr import TensorRead, free_vars, walk

from .space import Config, SearchSpace, divisors

REDUCE_STEP = 256  # reduction steps around one CPU register tile (operand panels stay in L1/L2)
PARALLEL_PER_CORE = 4  # parallel iterations per core (balance when the count is not a multiple)
GPU_THREADS = 16  # threads per block along each of the two tile axes (the innermost and its pair)
GPU_INNER = 4  # outputs per thread along each of the two tile axes
GPU_REDUCE_STEP = 16  # reduction steps per shared-memory stage


def largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (1 when ``cap`` < 1)."""
    return max(d for d in divisors(n) if d <= max(1, cap))


def _grow_to(n: int, need: int) -> int:
    """The smallest divisor of ``n`` that is at least ``need`` (``n`` itself when none is)."""
    return min((d for d in divisors(n) if d >= need), default=n)


def _fill(extents: list[int], budget: int, order: list[int]) -> list[int]:
    """Per axis a divisor of its extent, the axes in ``order`` taking what is left of a product
    ``budget`` (the first ones taking the most)."""
    out = [1] * len(extents)
    for i in order:
        out[i] = largest_divisor(extents[i], budget)
        budget //= out[i]
    return out


def parallel_split(rem: list[int], order: list[int], target: int) -> list[int]:
    """Per axis the number of parallel tiles: axes in ``order`` give whole extents until the
    product reaches ``target``, the last of them only the divisor that reaches it."""
    out = [1] * len(rem)
    have = 1
    for i in order:
        if have >= target:
            break
        out[i] = _grow_to(rem[i], -(-target // have))
        have *= out[i]
    return out


# --- CPU ---------------------------------------------------------------------------------------
def register_tile(extents: list[int], lanes: int, budget: int, max_vectors: int = 2,
                  rows: list[int] | None = None) -> list[int]:
    """Per axis its register tile: the innermost axis one or two vectors wide (whole vectors where
    it divides into them, else a divisor up to one vector), the others rows of at most ``budget``
    accumulators in all; of one and two vectors the one that fills more accumulators, two on a tie
    (fewer rows: fewer operand rows read at once, which alias in L1 when their stride is a
    multiple of 4 KiB). ``max_vectors`` 1 where the vectors are gathered (no operand is contiguous
    along the innermost axis): then each vector loaded serves as many rows as fit. ``rows``: the
    outer axes in the order they take rows (default innermost first)."""
    outer = rows if rows is not None else list(range(len(extents) - 2, -1, -1))
    if extents[-1] % lanes:  # half vectors where they divide it, else the largest divisor
        last = extents[-1]
        half = lanes // 2 if lanes > 1 and last % (lanes // 2) == 0 else largest_divisor(last, lanes)
        return _fill(extents[:-1], budget, outer) + [half]
    best: list[int] = []
    for vectors in range(max_vectors, 0, -1):
        if extents[-1] % (vectors * lanes) == 0:
            tile = _fill(extents[:-1], budget // vectors, outer) + [vectors * lanes]
            if not best or math.prod(tile) > math.prod(best):
                best = tile
    return best


def tile_axes(sk) -> list[int]:  # noqa: ANN001 - a Sketch in a tiled mode
    """The spatial axes but the innermost, in the order they join it in a 2-D tile: first those
    that index a different set of reused operands than the innermost axis (a matmul's rows, an NCHW
    convolution's output channels: each operand loaded once serves the whole other side of the
    tile), innermost first, then the others."""
    def operands(axis: str) -> frozenset:
        return frozenset(n for n, (_, deps) in sk.pack_candidates.items() if axis in deps)

    last = operands(sk.axes[-1])
    return sorted(range(len(sk.axes) - 1), key=lambda i: (operands(sk.axes[i]) == last, -i))


def _contiguous(stage, var, placeholders: bool = False) -> bool:  # noqa: ANN001 - a Stage, an axis Var
    """Does ``stage`` read some tensor (some input, with ``placeholders``) along its last dim with
    ``var`` (unit stride in ``var``)?"""
    reads = [n for n in walk(stage.body) if isinstance(n, TensorRead)]
    return any(r.indices and var in free_vars(r.indices[-1]) for r in reads
               if r.tensor.is_placeholder or not placeholders)


def _vectors_contiguous(sk) -> bool:  # noqa: ANN001 - a CpuSketch
    """Is some input of the tiled reduction, its producers inlined (transposes, padding), read
    contiguously along the innermost spatial axis (so its vectors are plain loads)?"""
    sch = Schedule(sk.workload.outputs)
    for name in sk.inline_always + sk.inline_knob:
        ComputeInlineStep(name).apply(sch)
    anchor = sch.stage(sk.anchor.name)
    return _contiguous(anchor, anchor.axes[-1].var, placeholders=True)


MAX_ROW_VECTORS = 32  # a row reduced as one vectorized loop (not whole vectors): its vectors, unrolled


def row_vectorizable(extent: int, lanes: int) -> bool:
    """Can a reduction along a row of ``extent`` take vector lanes: whole vectors (split by the
    lanes), or a few vectors and a scalar tail (the row one vectorized loop)?"""
    return extent % lanes == 0 or lanes < extent <= lanes * MAX_ROW_VECTORS


def _vector_reduce(sk, choices: tuple) -> int:  # noqa: ANN001 - a CpuSketch
    """Lanes along the row (2) when every vectorizable row reduction reads its rows contiguously,
    else lanes across rows (1) when offered, else none."""
    along = [st for st in sk.sch.stages
             if st.is_reduction and row_vectorizable(st.reduce_axes[-1].extent, sk.lanes)]
    if 2 in choices and all(_contiguous(st, st.reduce_axes[-1].var) for st in along):
        return 2
    return 1 if 1 in choices else 0


def _choices(space: SearchSpace, name: str) -> tuple:
    return next((k.choices for k in space.knobs if k.name == name), ())


def cpu_defaults(sk, space: SearchSpace) -> Iterator[Config]:  # noqa: ANN001 - a CpuSketch
    """Rule-based configs of a CPU space, best first (see the module docstring)."""
    tiled = sk.mode in ("cache_write", "epilogue")
    # a tile prologue (Strassen's sums) formed tile by tile, not recomputed in the product's loop
    base: Config = {f"inline_{n}": 2 if n in sk.tile_prologues else 1 for n in sk.inline_knob}
    if not tiled:
        choices = _choices(space, "vector_reduce")
        base["vector_reduce"] = _vector_reduce(sk, choices)
        base["unroll_coefficients"] = 1
        if 1 in _choices(space, "row_fused"):
            base["row_fused"] = 1  # row by row: one parallel loop, a row's data in L1 throughout
        yield base
        return
    n = len(sk.axes)
    ext, lanes = list(sk.tile_extents), sk.lanes  # (padded where the extent has no useful tile)
    pack = f"{sk.prepackable[0]}@pre" if sk.prepackable else "none"
    consts = [t for t in sk.workload.inputs if t.name in sk.prepackable]
    weights = math.prod(consts[0].shape) if consts else 0
    order = 1 if weights > math.prod(ext) else 0
    rows_budget = max(1, sk.target.accumulator_registers * 2 // 3)
    contiguous, rows = _vectors_contiguous(sk), tile_axes(sk)
    reduce_budget = REDUCE_STEP
    while True:
        t3 = register_tile(ext, lanes, rows_budget, 2 if contiguous else 1, rows)
        # an overlapping (padded) axis needs two tiles at least: one would be longer than the axis
        t3 = [largest_divisor(e, e // 2) if a in sk.padded and t == e else t
              for a, e, t in zip(sk.axes, ext, t3)]
        rem = [e // t for e, t in zip(ext, t3)]
        outer = list(range(n))[::-1] if order else list(range(n))
        t0 = parallel_split(rem, outer, PARALLEL_PER_CORE * sk.cores)
        t0 = [_grow_to(r, 2) if a in sk.padded and t == 1 else t for a, r, t in zip(sk.axes, rem, t0)]
        k1 = _fill(sk.reduce_extents, reduce_budget, list(range(len(sk.reduce_axes)))[::-1])
        cfg = dict(base)
        for a, e, a0, a3 in zip(sk.axes, ext, t0, t3):
            cfg[f"tile_{a}"] = [a0, e // (a0 * a3), 1, a3]
        for r, e, b in zip(sk.reduce_axes, sk.reduce_extents, k1):
            cfg[f"tile_{r}"] = [e // b, b]
        registers = int(any(b > 1 for b in k1))  # (an R1 loop to keep the accumulators over)
        cfg.update(parallel_depth=1, pack=pack, unroll=1, outer_order=order, registers=registers)
        yield cfg
        if sk.tile_prologues:  # where a prologue's tile would not fit: its own loop nest
            yield {**cfg, **{f"inline_{n}": 0 for n in sk.tile_prologues}}
        if rows_budget == 1 and reduce_budget == 1:
            break
        rows_budget, reduce_budget = max(1, rows_budget // 2), max(1, reduce_budget // 2)
    # accepted by every tiled space: one vector a tile, all outer loops parallel, nothing else
    safe = dict(base, parallel_depth=1, pack="none", unroll=0, outer_order=0, registers=0)
    for a, e in zip(sk.axes, ext):
        t = lanes if a == sk.axes[-1] and e % lanes == 0 else 1
        safe[f"tile_{a}"] = [e // t, 1, 1, t]
    for r, e in zip(sk.reduce_axes, sk.reduce_extents):
        safe[f"tile_{r}"] = [e, 1]
    yield safe


# --- GPU ------------------------------------------------------------------------------------------
def _gpu_tiles(ext: list[int], inner: int, threads: int, pair: list[int]) -> list[list[int]]:
    """Per spatial axis [blocks, threads, virtual threads, inner]: the axes of ``pair`` (the
    innermost and the first of ``tile_axes``) ``inner`` outputs a thread and ``threads`` threads
    (divisors of what is left), the threads topped up from the outer axes to at least a warp;
    blocks take the rest."""
    n = len(ext)
    t3 = [1] * n
    for i in pair:
        t3[i] = largest_divisor(ext[i], inner)
    rem = [e // t for e, t in zip(ext, t3)]
    t1 = [1] * n
    for i in pair:
        t1[i] = largest_divisor(rem[i], threads)
    for i in range(n - 1, -1, -1):
        while math.prod(t1) < 32 and rem[i] // t1[i] > 1:
            t1[i] = _grow_to(rem[i], t1[i] + 1)
    return [[r // t, t, 1, i] for r, t, i in zip(rem, t1, t3)]


def cuda_defaults(sk, space: SearchSpace) -> Iterator[Config]:  # noqa: ANN001 - a CudaSketch
    """Rule-based configs of a GPU space, best first (see the module docstring)."""
    if sk.mode not in ("cache_write", "epilogue"):
        cols = math.prod(sk.sch.stage(sk.row_out).tensor.shape[sk.row_prefix:]) if sk.mode == "rowwise" else 0
        choices = _choices(space, "threads")
        for vector in (4, 1):
            # a row's columns spread over the block's threads; 256 threads elsewhere
            want = max(cols // vector, 1) if cols else 256
            threads = max([c for c in choices if c <= want] or [min(choices)])
            yield {"threads": threads, "vector": vector}
        return
    ext, rext = list(sk.extents), list(sk.reduce_extents)
    # the longest reduction axes first into a shared-memory stage (a convolution's channels)
    rorder = sorted(range(len(rext)), key=lambda i: (-rext[i], -i))
    pair = tile_axes(sk)[:1] + [len(ext) - 1]
    for inner, threads, step in ((GPU_INNER, GPU_THREADS, GPU_REDUCE_STEP), (GPU_INNER, GPU_THREADS // 2, 8),
                                 (2, GPU_THREADS // 2, 8), (1, GPU_THREADS // 2, 4), (1, 4, 1)):
        cfg: Config = {f"tile_{a}": t for a, t in zip(sk.axes, _gpu_tiles(ext, inner, threads, pair))}
        k1 = _fill(rext, step, rorder)
        cfg.update({f"tile_{r}": [e // b, b] for r, e, b in zip(sk.reduce_axes, rext, k1)})
        cfg.update(pad=0, unroll_k=int(math.prod(k1) <= 32), shared_layout=0, stage_padded=0, stages=1)
        for fetch, local in ((4, 1), (1, 1), (1, 0)):
            yield dict(cfg, fetch_vector=fetch, local_cache=local)
