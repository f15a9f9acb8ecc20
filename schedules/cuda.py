"""GPU schedule-space generator: the same analysis as the CPU rules, GPU tiling on top.

Rules:
- inline every injective producer (a select costs little on a GPU);
- a reduction with data reuse gets "SSSRRSRS"-style tiling: each spatial axis split into block /
  thread / virtual-thread / inner levels, each reduction axis into an outer level (one shared-memory
  tile per step) and an inner level; the accumulator lives in registers (cache_write local, or the
  reduction itself when an elementwise epilogue is fused into the tile); every reused operand is
  staged in shared memory, fetched cooperatively by the whole block (optionally 16 bytes a thread),
  with optional padding of its rows against bank conflicts, and optionally in a ring of 2 or 3
  tiles filled ahead by asynchronous copies (``cp.async``: a software pipeline over the shared
  tiles); a knob stores each tile with a spatial dim innermost (A as [k][i], copied in A's own
  order so global reads stay coalesced) and another copies per-k register fragments of every tile
  (float4 loads when the fragment allows); an operand read through an inlined padding stage (a
  convolution's input) is either read straight from global memory (the window reuse served by
  L1) or, with knob ``stage_padded``, staged in shared memory too, its tile with the halo, the
  padding computed by the cooperative fetch;
- every other stage: its spatial loops fused and spread over blocks x threads (x 4 lanes when the
  extent allows float4), one output element (or 4) a thread.
Virtual threads are per-thread sub-tiles, lowered as unrolled loops.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Iterator

from autotune.ir.simplify import linear
from autotune.schedule import (
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    PipelineStep,
    ReorderStep,
    SplitStep,
    Stage,
    Step,
    StoragePadStep,
    bind,
    unroll,
    vectorize,
)
from autotune.te.expr import TensorRead, free_vars, walk

from .defaults import cuda_defaults
from .sketch import Sketch
from .space import ChoiceKnob, Config, SearchSpace, SplitKnob

THREAD_CHOICES = (64, 128, 256, 512, 1024)


class CudaSketch(Sketch):
    """GPU rules; turns configs into steps."""

    @property
    def max_threads(self) -> int:
        return int(self.target.fingerprint.get("max_threads_per_block", 1024))

    @property
    def max_shared(self) -> int:
        """Shared bytes of one set of tiles: what a kernel may use without opting in (48 KiB)."""
        return int(self.target.fingerprint.get("max_shared_per_block", 49152))

    @property
    def max_shared_ring(self) -> int:
        """Shared bytes of a pipeline's ring of tiles: beyond 48 KiB it is dynamic shared memory,
        up to the device's opt-in limit (less a little for 16-byte alignment of each buffer)."""
        fp = self.target.fingerprint
        return int(fp.get("max_shared_per_block_optin", fp.get("max_shared_per_block", 49152))) - 64

    # --- the space ------------------------------------------------------------------------------
    def space(self) -> SearchSpace:
        if self.mode == "rowwise":
            knobs = [ChoiceKnob("threads", THREAD_CHOICES), ChoiceKnob("vector", (1, 4))]
            return SearchSpace(
                f"cuda/rowwise/{self.workload.name}",
                knobs,
                self.steps,
                [("vector_width", self._row_vector_ok)],
                rules=self._defaults,
            )
        if self.mode not in ("cache_write", "epilogue"):
            knobs = [ChoiceKnob("threads", THREAD_CHOICES), ChoiceKnob("vector", (1, 4))]
            return SearchSpace(
                f"cuda/simple/{self.workload.name}",
                knobs,
                self.steps,
                [("vector_width", self._simple_vector_ok)],
                rules=self._defaults,
            )
        knobs: list = [SplitKnob(f"tile_{a}", e, 4) for a, e in zip(self.axes, self.extents)]
        knobs += [SplitKnob(f"tile_{a}", e, 2) for a, e in zip(self.reduce_axes, self.reduce_extents)]
        knobs += [
            ChoiceKnob("fetch_vector", (1, 4)),
            ChoiceKnob("pad", (0, 4)),
            ChoiceKnob("unroll_k", (0, 1)),
            # shared tiles stored with a spatial dim innermost (1) so threads read them as float4
            ChoiceKnob("shared_layout", (0, 1)),
            # per-k register fragments of the shared tiles (loaded once, reused by the whole tile)
            ChoiceKnob("local_cache", (0, 1)),
            # shared tiles in a ring of this many, filled ahead by cp.async (1: copy, sync, compute)
            ChoiceKnob("stages", (1, 2, 3)),
        ]
        if self.padded_inputs:
            knobs.append(ChoiceKnob("stage_padded", (0, 1)))
        constraints = [
            ("threads_per_block", self._threads_ok),
            ("occupancy", self._occupancy_ok),
            ("registers", lambda c: self._registers(c) <= 128),
            ("shared_memory", lambda c: self._shared_bytes(c) <= self.max_shared),
            ("shared_ring", lambda c: self._shared_bytes(c) * c.get("stages", 1) <= self.max_shared_ring),
            # a ring needs a shared tile to fill (an anchor whose operands are all inlined has none)
            ("stages", lambda c: c.get("stages", 1) == 1 or bool(self._shared_names(c))),
            ("fetch_vector", self._fetch_ok),
            ("shared_layout", lambda c: not c["shared_layout"] or self._transposable),
            (
                "unroll_k",
                lambda c: not c["unroll_k"] or math.prod(self._t(c, r)[1] for r in self.reduce_axes) <= 32,
            ),
        ]
        return SearchSpace(f"cuda/{self.mode}/{self.workload.name}", knobs, self.steps, constraints,
                           rules=self._defaults)

    def _defaults(self, space: SearchSpace) -> Iterator[Config]:
        return cuda_defaults(self, space)

    @cached_property
    def padded_inputs(self) -> list[str]:
        """Operands the anchor reads with reuse through an inlined select-only stage (padding)
        that reads one input: candidates for shared staging with the padding done by the fetch."""
        spatial = {a.var for a in self.anchor.axes}
        found: list[str] = []
        for r in _reads(self.anchor):
            if r.tensor.name not in self.inline_knob or r.tensor.name in found:
                continue
            srcs = {t.name for t in self.sch.stage(r.tensor.name).reads()}
            used = set().union(*(free_vars(i) for i in r.indices))
            if len(srcs) == 1 and not spatial <= used:
                found.append(r.tensor.name)
        return found

    def _shared_names(self, c: Config) -> list[str]:
        """The operands staged in shared memory under config ``c``."""
        return self._shared_candidates if c.get("stage_padded") else list(self.pack_candidates)

    def _t(self, c: Config, axis: str) -> list[int]:
        return c[f"tile_{axis}"]

    def _threads(self, c: Config) -> int:
        return math.prod(self._t(c, a)[1] for a in self.axes)

    def _threads_ok(self, c: Config) -> bool:
        """At least a warp (unless the whole problem is smaller), within the device limit."""
        n = self._threads(c)
        return min(32, math.prod(self.extents)) <= n <= self.max_threads

    def _occupancy_ok(self, c: Config) -> bool:
        """Enough blocks to give every multiprocessor work when the problem is large enough."""
        sms = int(self.target.fingerprint.get("multiprocessors", 1))
        blocks = math.prod(self._t(c, a)[0] for a in self.axes)
        return blocks >= min(sms // 4, math.prod(self.extents) // 1024)

    def _per_thread(self, c: Config) -> int:
        return math.prod(self._t(c, a)[2] * self._t(c, a)[3] for a in self.axes)

    def _registers(self, c: Config) -> int:
        """Accumulators plus, with ``local_cache``, the operand fragments of one k step."""
        frags = sum(math.prod(d) for d in self._local_regions(c).values()) if c["local_cache"] else 0
        return self._per_thread(c) + frags

    def _regions(self, c: Config, levels: slice, reduce_level: int | None) -> dict[str, list[int]]:
        """Per shared operand, the extent of each stored dim of the tile one loop level holds:
        spatial axes span the product of their tile factors in ``levels``; reduction axes span
        their level ``reduce_level`` (or one point when None)."""
        ranges = {}
        anchor = self.anchor
        for ax, a in zip(anchor.axes, self.axes):
            ranges[ax.var] = math.prod(self._t(c, a)[levels]) - 1
        for ax, r in zip(anchor.reduce_axes, self.reduce_axes):
            ranges[ax.var] = 0 if reduce_level is None else self._t(c, r)[reduce_level] - 1
        out = {}
        names = self._shared_names(c)
        for name, index in self._index_terms.items():  # in the anchor's order of reading them
            if name in names:
                dims = [min(sum(k * ranges.get(v, 0) for v, k in terms) + 1, size) for terms, size in index]
                out[name] = [dims[p] for p in self._layout(name, c)]
        return out

    @cached_property
    def _index_terms(self) -> dict[str, list[tuple[tuple[tuple[object, int], ...], int]]]:
        """Per operand the anchor reads (its first read), per dim: the terms of that dim's index as
        (loop variable, |coefficient|) pairs, and the dim's extent (what ``_regions`` spans; the
        anchor's expressions are walked once, not per config)."""
        out: dict[str, list[tuple[tuple[tuple[object, int], ...], int]]] = {}
        for r in _reads(self.anchor):
            if r.tensor.name in out or r.tensor.name not in self._shared_candidates:
                continue
            out[r.tensor.name] = [
                (tuple((atom, abs(k)) for atom, k in linear(idx, {}).terms.values()), r.tensor.shape[d])
                for d, idx in enumerate(r.indices)
            ]
        return out

    @cached_property
    def _shared_candidates(self) -> list[str]:
        return list(self.pack_candidates) + self.padded_inputs

    def _shared_regions(self, c: Config) -> list[list[int]]:
        """Stored extent per dim of each shared operand's block tile."""
        return list(self._regions(c, slice(1, 4), 1).values())

    def _local_regions(self, c: Config) -> dict[str, list[int]]:
        """Stored extent per dim of each operand's per-thread register fragment (one k step)."""
        return self._regions(c, slice(2, 4), None)

    def _spatial_last(self, name: str) -> tuple[int, ...]:
        """The dim order of ``name`` with the dim of its innermost spatial axis moved last."""
        return self._orders[name][1]

    @cached_property
    def _orders(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per operand the anchor reads (its first read): its dims in source order, and with the dim
        of its innermost spatial axis moved last."""
        out: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        for read in _reads(self.anchor):
            if read.tensor.name in out:
                continue
            order = list(range(read.tensor.ndim))
            last = tuple(order)
            for ax in reversed(self.anchor.axes):
                dim = next((d for d, i in enumerate(read.indices) if ax.var in free_vars(i)), None)
                if dim is not None:
                    order.remove(dim)
                    last = tuple(order + [dim])
                    break
            out[read.tensor.name] = (tuple(range(read.tensor.ndim)), last)
        return out

    def _layout(self, name: str, c: Config) -> tuple[int, ...]:
        """Stored dim order of a shared operand under config ``c``."""
        return self._orders[name][1 if c.get("shared_layout") else 0]

    @property
    def _transposable(self) -> bool:
        return any(self._spatial_last(n) != tuple(sorted(self._spatial_last(n)))
                   for n in self._shared_candidates)

    def _shared_bytes(self, c: Config) -> int:
        return sum(4 * math.prod(d[:-1]) * (d[-1] + c["pad"]) for d in self._shared_regions(c))

    def _vector_fetch(self, name: str, c: Config) -> bool:
        """Is ``name`` fetched 16 bytes a thread under ``c``? Inputs copied in source order only
        (a padded operand's tile starts off the 16-byte grid: fetched one element a thread)."""
        layout = self._layout(name, c)
        identity = layout == tuple(range(len(layout)))
        return c["fetch_vector"] > 1 and name not in self.padded_inputs and identity

    def _fetch_ok(self, c: Config) -> bool:
        """float4 fetch needs a multiple of 4 innermost in every tile fetched that way."""
        regions = self._regions(c, slice(1, 4), 1)
        return all(d[-1] % 4 == 0 for n, d in regions.items() if self._vector_fetch(n, c))

    def _simple_vector_ok(self, c: Config) -> bool:
        return c["vector"] == 1 or all(
            s.tensor.shape[-1] % 4 == 0 for s in self._root_stages() if not s.is_reduction
        )

    def _row_vector_ok(self, c: Config) -> bool:
        cols = math.prod(self.sch.stage(self.row_out).tensor.shape[self.row_prefix :])
        return c["vector"] == 1 or cols % 4 == 0

    def _rowwise_steps(self, c: Config) -> list[Step]:
        steps: list[Step] = []
        out = self.row_out
        if self.row_cache_write:
            steps.append(CacheWriteStep(self.row_cache_write))
        rows, cols = self.row_axes[: self.row_prefix], self.row_axes[self.row_prefix :]
        steps += [FuseStep(out, tuple(rows))] if len(rows) > 1 else []
        row = "@".join(rows)
        steps.append(bind(out, row, "blockIdx.x"))
        threads = c["threads"]
        if cols:
            steps += [FuseStep(out, tuple(cols))] if len(cols) > 1 else []
            f = "@".join(cols)
            if c["vector"] > 1:
                steps.append(SplitStep(out, f, c["vector"]))
                lanes, f = f"{f}.1", f"{f}.0"
            steps += [SplitStep(out, f, threads), bind(out, f"{f}.1", "threadIdx.x")]
            if c["vector"] > 1:
                steps.append(vectorize(out, lanes))
        for name in reversed(self.row_reductions):
            steps.append(ComputeAtStep(name, out, row))
            raxes = self.row_reduce_axes[name]
            steps += [FuseStep(name, tuple(raxes))] if len(raxes) > 1 else []
            r = "@".join(raxes)
            steps += [SplitStep(name, r, threads), bind(name, f"{r}.1", "threadIdx.x")]
        return steps

    def _root_stages(self) -> list[Stage]:
        return [s for s in self.sch.stages if s.name not in self.inline_always + self.inline_knob]

    # --- config -> steps --------------------------------------------------------------------------
    def steps(self, c: Config) -> list[Step]:
        tiled = self.mode in ("cache_write", "epilogue")
        staged = self.padded_inputs if tiled and c.get("stage_padded") else []
        steps: list[Step] = [
            ComputeInlineStep(n) for n in self.inline_always + self.inline_knob if n not in staged
        ]
        if self.mode == "rowwise":
            return steps + self._rowwise_steps(c)
        if self.mode not in ("cache_write", "epilogue"):
            for st in self._root_stages():
                steps += _spread(st, c["threads"], c["vector"])
            return steps
        T, R = self.tile_stage, self.compute_stage
        if self.mode == "cache_write":
            steps.append(CacheWriteStep(self.anchor.name))
        shared = self._shared_names(c)
        for name in shared:
            steps.append(CacheReadStep(name, (R,), self._layout(name, c), "shared"))
        # the padding stage is inlined into its shared copy: the fetch computes the padding
        steps += [ComputeInlineStep(n) for n in staged]
        if c["local_cache"]:
            for name in shared:
                steps.append(CacheReadStep(f"{name}_shared", (R,), None, "local"))
        b, t, v, i = [], [], [], []
        for ta, a in zip(self.tile_axes, self.axes):
            f = self._t(c, a)
            steps += [
                SplitStep(T, ta, f[1] * f[2] * f[3]),
                SplitStep(T, f"{ta}.1", f[2] * f[3]),
                SplitStep(T, f"{ta}.1.1", f[3]),
            ]
            b.append(f"{ta}.0")
            t.append(f"{ta}.1.0")
            v.append(f"{ta}.1.1.0")
            i.append(f"{ta}.1.1.1")
        steps.append(ReorderStep(T, tuple(b + t + v + i)))
        steps += _fuse_bind(T, b, "blockIdx.x") + _fuse_bind(T, t, "threadIdx.x")
        thread_loop = "@".join(t)
        steps.append(ComputeAtStep(R, T, thread_loop))
        steps += [unroll(T, x) for x in v + i[:-1]]
        steps.append(vectorize(T, i[-1]) if self._t(c, self.axes[-1])[3] % 4 == 0 else unroll(T, i[-1]))
        r0, r1, rv, ri = [], [], [], []
        for r in self.reduce_axes:
            steps.append(SplitStep(R, r, self._t(c, r)[1]))
            r0.append(f"{r}.0")
            r1.append(f"{r}.1")
        for a in self.axes:
            steps.append(SplitStep(R, a, self._t(c, a)[3]))
            rv.append(f"{a}.0")
            ri.append(f"{a}.1")
        steps.append(ReorderStep(R, tuple(r0 + r1 + rv + ri)))
        depth = c.get("stages", 1)
        if depth > 1 and len(r0) > 1:  # one loop over the shared tiles: the one pipelined
            steps.append(FuseStep(R, tuple(r0)))
            r0 = ["@".join(r0)]
        steps += [bind(R, x, "vthread") for x in rv]
        steps += [unroll(R, x) for x in ri[:-1]]
        steps.append(vectorize(R, ri[-1]) if self._t(c, self.axes[-1])[3] % 4 == 0 else unroll(R, ri[-1]))
        if c["unroll_k"]:
            steps += [unroll(R, x) for x in r1]
        threads = self._threads(c)
        frags = self._local_regions(c)
        for name in shared:
            sh = f"{name}_shared"
            if c["local_cache"]:
                # the fragment stage reads the shared tile: attach it first so the tile's region
                # is inferred from the fragment's reads
                steps.append(ComputeAtStep(f"{sh}_local", R, r1[-1]))
                steps += _register_fragment(f"{sh}_local", frags[name])
            layout = self._layout(name, c)
            steps.append(ComputeAtStep(sh, R, r0[-1]))
            vec = c["fetch_vector"] if self._vector_fetch(name, c) else 1
            steps += _cooperative_fetch(sh, layout, threads, vec)
            if c["pad"]:
                steps.append(StoragePadStep(sh, c["pad"]))
        if depth > 1:
            steps.append(PipelineStep(R, r0[-1], depth))
        return steps


def _reads(stage: Stage) -> list[TensorRead]:
    return [n for n in walk(stage.body) if isinstance(n, TensorRead)]


def _fuse_bind(stage: str, loops: list[str], axis: str) -> list[Step]:
    steps: list[Step] = [FuseStep(stage, tuple(loops))] if len(loops) > 1 else []
    return steps + [bind(stage, "@".join(loops), axis)]


def _register_fragment(stage: str, extents: list[int]) -> list[Step]:
    """A per-thread copy of a fragment: every loop unrolled, the innermost as float4 when it can."""
    names = [f"a{d}" for d in range(len(extents))]
    steps: list[Step] = [unroll(stage, n) for n in names[:-1]]
    if extents[-1] % 4 == 0:
        return steps + [SplitStep(stage, names[-1], 4), unroll(stage, f"{names[-1]}.0"),
                        vectorize(stage, f"{names[-1]}.1")]
    return steps + [unroll(stage, names[-1])]


def _cooperative_fetch(stage: str, layout: tuple[int, ...], threads: int, vec: int) -> list[Step]:
    """All threads of the block copy the tile together: fused loop -> [serial, threadIdx.x, lanes].
    The copy walks the source's dim order (coalesced global reads) even when the tile is stored
    permuted (``layout``: stored dim d holds source dim layout[d])."""
    ndim = len(layout)
    order = sorted(range(ndim), key=lambda d: layout[d])
    names = [f"a{d}" for d in order]
    steps: list[Step] = [ReorderStep(stage, tuple(names))] if order != list(range(ndim)) else []
    steps += [FuseStep(stage, tuple(names))] if ndim > 1 else []
    f = "@".join(names)
    if vec > 1:
        steps += [SplitStep(stage, f, vec), vectorize(stage, f"{f}.1")]
        f = f"{f}.0"
    steps += [SplitStep(stage, f, threads), bind(stage, f"{f}.1", "threadIdx.x")]
    return steps


def _spread(stage: Stage, threads: int, vec: int) -> list[Step]:
    """Spatial loops fused and spread over blocks and threads (and float4 lanes)."""
    names = [a.name for a in stage.axes]
    steps: list[Step] = [FuseStep(stage.name, tuple(names))] if len(names) > 1 else []
    f = "@".join(names)
    if stage.is_reduction:
        vec = 1  # the spatial loop sits outside the reduction: nothing to vectorize
    if vec > 1:
        steps += [SplitStep(stage.name, f, vec)]
        lanes, f = f"{f}.1", f"{f}.0"
    steps += [
        SplitStep(stage.name, f, threads),
        bind(stage.name, f"{f}.0", "blockIdx.x"),
        bind(stage.name, f"{f}.1", "threadIdx.x"),
    ]
    if vec > 1:
        # the lane loop must be innermost: it already is (split order outer -> inner)
        steps.append(vectorize(stage.name, lanes))
    return steps


def cuda_space(workload, target) -> SearchSpace:  # noqa: ANN001 - Workload, Target
    """The GPU search space of a workload."""
    return CudaSketch(workload, target).space()
