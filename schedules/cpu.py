"""CPU schedule-space generator: rules applied to any workload, no per-op templates.

Rules (after Ansor's sketch rules, reduced to what this compiler's primitives express):
- inline injective producers (padding-like producers that hold a ``select`` are a knob: inlined,
  or computed as their own vectorizable stage);
- a reduction with data reuse (an input not indexed by every spatial axis) gets multi-level tiling
  "SSRSRS": spatial tiles S0 S1 on the tile stage, then R0 S2 R1 S3 on the compute stage, the
  accumulator in a local buffer (cache_write), or fused into an elementwise epilogue (compute_at);
- optional packing of one reused operand into a local buffer (cache_read with a layout that makes
  the innermost spatial axis contiguous), placed where it is reused across the other S2 loops; an
  operand that is a model constant can instead be stored in those tiles once, at compile time
  (pack value ``<operand>@pre``, ``autotune.prepack``), so the kernel reads its tiles in place;
- outer tiles fused and parallel; innermost spatial loop vectorized; register tile unrolled; where
  an operand is a model constant, the order of the outer tiles is a knob (``outer_order`` 1: last
  spatial axis outermost, so each thread works through whole weight panels);
- a tile prologue (a producer the tiled reduction reads directly whose every element is a few reads
  of one input: Strassen's sums of A, ``sketch.TILE_PROLOGUE_TAGS``) has a third choice besides
  inlined and its own stage (``inline_<stage>`` 2): formed tile by tile at the tile stage, the S1
  loops it depends on moved outside the others so one tile of it serves every output tile under
  them (a pack of a computed operand: the product reads the sums from a small buffer and nothing
  writes them to memory);
- the inner reduction loops (R1) around the register tile can keep its accumulators in registers
  throughout (knob ``registers``, with the register tile unrolled; autotune.ir.registers);
- an elementwise output that picks literal coefficients along some axes (compares them with
  constants, or takes them ``// d`` / ``% d``: the Winograd transforms) can split those axes by
  their period and unroll the short loops inside the vector chunks (knob ``unroll_coefficients``):
  the coefficients become literals, and the unrolled copies share their loads;
- every other stage: outer loops fused and parallel, innermost spatial loop vectorized; a
  reduction without reuse (softmax's row max, layernorm's mean, pooling) optionally vectorizes its
  innermost spatial axis under the reduction loops (knob ``vector_reduce`` 1: lanes across rows)
  or its innermost reduction axis (``vector_reduce`` 2: lanes along the row, each accumulating
  its own share, combined at the end of the row);
- row reductions feeding one elementwise output over the same leading axes (softmax, layernorm)
  can be computed row by row inside the output's parallel row loop (knob ``row_fused``): one
  parallel loop, each row's data in L1 while all its stages run, and an elementwise stage that
  several of them read (softmax's exponentials) kept as a row buffer, computed once instead of
  inlined into each reader.
"""

from __future__ import annotations

import math
from typing import Iterator

from autotune.schedule import (
    AnnotateStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
    Stage,
    Step,
    parallel,
    unroll,
    vectorize,
)
from autotune.target import Target
from autotune.te import Workload
from autotune.te.expr import TensorRead

from .defaults import cpu_defaults, row_vectorizable
from .sketch import Sketch
from .space import ChoiceKnob, Config, SearchSpace, SplitKnob, divisors

MAX_ACCUMULATOR = 16384  # floats in the local accumulator tile (64 KiB)
MAX_PACK = 32768  # floats in a packed operand tile (128 KiB, about L2-resident)
MAX_UNROLLED = 64  # vector statements in the unrolled register tile
PREPACKED = "@pre"  # pack knob suffix: the operand (a model constant) is pre-tiled at compile time


def padded_extent(extent: int, lanes: int, innermost: bool) -> int:
    """The extent whose factorizations a tiled axis's tile sizes are: the axis's own, or where that
    offers no useful tile the next multiple of the lanes / of 8: the innermost axis not whole
    vectors (but a short one of whole half vectors, such as 24 or 40 channels, where a shifted
    vector would recompute a third of the row), another axis with no divisor from 4 to 16 (ViT's
    197 tokens). The tiles of such an axis are split with ``overlap``: its last tile is shifted
    back to end at the extent, so every tile is whole (vectors, unrolled rows) and no element is
    guarded."""
    if innermost:
        half = max(1, lanes // 2)
        whole = extent <= lanes or extent % lanes == 0 or (extent % half == 0 and extent < 4 * lanes)
        return extent if whole else -(-extent // lanes) * lanes
    if extent <= 16 or any(4 <= d <= 16 for d in divisors(extent)):
        return extent
    return -(-extent // 8) * 8


def _vector_reducible(stage: Stage, lanes: int) -> bool:
    """A reduction whose innermost spatial axis splits into whole vectors (a row reduction over
    many rows, a pool over NHWC channels)."""
    return stage.is_reduction and stage.tensor.shape[-1] % lanes == 0 and stage.tensor.shape[-1] >= lanes


def _row_reducible(stage: Stage, lanes: int) -> bool:
    """A reduction whose innermost reduction axis takes vector lanes: it splits into whole vectors
    (a row of 128), or it is a row of a few vectors and a scalar tail (197 tokens)."""
    return stage.is_reduction and row_vectorizable(stage.reduce_axes[-1].extent, lanes)


def _coefficient_steps(stage: Stage, lanes: int, periods: dict[int, int]) -> list[Step]:
    """An elementwise stage with coefficient axes (``Sketch.coefficient_axes``: position ->
    period d): each such axis split by d, the d-long loops moved inside the vector chunks of the
    last axis and unrolled, so every unrolled copy sees literal coefficients and the copies share
    their loads; the other loops fused and parallel."""
    names = [a.name for a in stage.axes]
    steps: list[Step] = []
    outer, inner = [], []
    for i, (name, ext) in enumerate(zip(names[:-1], stage.tensor.shape[:-1])):
        if i not in periods:
            outer.append(name)
        elif periods[i] >= ext:
            inner.append(name)
        else:
            steps.append(SplitStep(stage.name, name, periods[i]))
            outer.append(f"{name}.0")
            inner.append(f"{name}.1")
    last, last_ext = names[-1], stage.tensor.shape[-1]
    vector = last_ext % lanes == 0 and last_ext >= lanes
    if vector:
        steps.append(SplitStep(stage.name, last, lanes))
        outer.append(f"{last}.0")
    steps.append(ReorderStep(stage.name, tuple(outer + inner + ([f"{last}.1"] if vector else [last]))))
    steps += [unroll(stage.name, x) for x in inner]
    if vector:
        steps.append(vectorize(stage.name, f"{last}.1"))
    if len(outer) > 1:
        steps.append(FuseStep(stage.name, tuple(outer)))
    if outer:
        steps.append(parallel(stage.name, "@".join(outer)))
    return steps


def _moves_input(stage: Stage) -> bool:
    """The stage copies elements of a model input or weight to other places (a transpose)."""
    return isinstance(stage.body, TensorRead) and stage.body.tensor.is_placeholder


def _root_steps(stage: Stage, lanes: int, vector_reduce: int = 0) -> list[Step]:
    """Parallel outer loops, vectorized innermost spatial loop (when it divides into vectors). A
    reduction keeps its reduction loops inside its spatial ones; with ``vector_reduce`` 1 the
    innermost spatial axis is split into vectors that stay innermost, under the reduction loops,
    so every step of the reduction combines whole vectors; with 2 the innermost reduction axis is
    (where it divides into vectors; else as 1)."""
    names = [a.name for a in stage.axes]
    steps: list[Step] = []
    if vector_reduce == 2 and _row_reducible(stage, lanes):
        steps += _along_row_steps(stage, lanes)
        steps += [FuseStep(stage.name, tuple(names))] if len(names) > 1 else []
        return steps + [parallel(stage.name, "@".join(names))]
    if stage.is_reduction and vector_reduce and _vector_reducible(stage, lanes):
        last = names[-1]
        outer = names[:-1] + [f"{last}.0"]
        reduce = [a.name for a in stage.reduce_axes]
        steps += [SplitStep(stage.name, last, lanes),
                  ReorderStep(stage.name, tuple(outer + reduce + [f"{last}.1"])),
                  vectorize(stage.name, f"{last}.1")]
        steps += [FuseStep(stage.name, tuple(outer))] if len(outer) > 1 else []
        return steps + [parallel(stage.name, "@".join(outer))]
    if stage.is_reduction:
        if len(names) > 1:
            steps.append(FuseStep(stage.name, tuple(names)))
        outer = "@".join(names)
        if math.prod(stage.tensor.shape) > 1:
            steps.append(parallel(stage.name, outer))
        return steps
    last, last_ext = names[-1], stage.tensor.shape[-1]
    outer_names = names[:-1]
    if last_ext >= lanes:
        steps += _last_axis_vectors(stage, lanes)
        outer_names.append(f"{last}.0")
    elif len(names) >= 3 and _moves_input(stage):
        # a move with a short innermost axis (e.g. a channel shuffle's pairs): that axis unrolled
        # under a plain loop of the axis before it, which gcc vectorizes; the axes outside them
        # parallel (one fused loop of all would compute every element's position by divisions).
        # Only plain moves: gcc 12 vectorized this form of PRelu's select with the wrong masks.
        steps.append(unroll(stage.name, last))
        outer_names = names[:-2]
    else:
        outer_names.append(last)
    if len(outer_names) > 1:
        steps.append(FuseStep(stage.name, tuple(outer_names)))
    steps.append(parallel(stage.name, "@".join(outer_names)))
    return steps


def _last_axis_vectors(stage: Stage, lanes: int) -> list[Step]:
    """A stage's last axis in whole vectors (``.1``), under the loop of them (``.0``); where the
    extent is not whole vectors the last one overlaps the one before."""
    last, ext = stage.axes[-1].name, stage.tensor.shape[-1]
    return [SplitStep(stage.name, last, lanes, overlap=ext % lanes != 0), vectorize(stage.name, f"{last}.1")]


def _along_row_steps(stage: Stage, lanes: int) -> list[Step]:
    """A reduction's innermost reduction axis in vector lanes along the row: split into whole
    vectors, or where it is not whole vectors the whole row one vectorized loop (its vectors, then
    the tail: autotune.ir.passes)."""
    r = stage.reduce_axes[-1]
    if r.extent % lanes == 0:
        return [SplitStep(stage.name, r.name, lanes), vectorize(stage.name, f"{r.name}.1")]
    return [vectorize(stage.name, r.name)]


def _row_vector_steps(stage: Stage, lanes: int, prefix: int) -> list[Step]:
    """A stage's last axis, past its ``prefix`` row axes, in vectors, where it has one that long."""
    if len(stage.axes) <= prefix or stage.tensor.shape[-1] < lanes:
        return []
    return _last_axis_vectors(stage, lanes)


class CpuSketch(Sketch):
    """CPU rules on top of the shared analysis; turns configs into steps."""

    def __init__(self, workload: Workload, target: Target, pad: bool = True) -> None:
        super().__init__(workload, target)
        self.padded: set[str] = set()  # tiled axes on a padded extent (overlapping tiles)
        if self.mode not in ("cache_write", "epilogue"):
            return
        last = len(self.extents) - 1
        self.tile_extents = [padded_extent(e, self.lanes, i == last) if pad else e
                             for i, e in enumerate(self.extents)]
        self.padded = {a for a, e, p in zip(self.axes, self.extents, self.tile_extents) if p != e}

    # --- the space ------------------------------------------------------------------------------
    def space(self) -> SearchSpace:
        # inline_N: 1 inlined into its readers, 0 its own loop nest; 2 (a tile prologue) formed
        # tile by tile where the product needs it
        knobs: list = [ChoiceKnob(f"inline_{n}", (1, 0) + ((2,) if n in self.tile_prologues else ()))
                       for n in self.inline_knob]
        if self.mode not in ("cache_write", "epilogue"):
            across = any(_vector_reducible(st, self.lanes) for st in self.sch.stages)
            along = any(_row_reducible(st, self.lanes) for st in self.sch.stages)
            if across or along:
                knobs.append(ChoiceKnob("vector_reduce", (1, 0) + ((2,) if along else ())))
            if self.coefficient_axes:
                knobs.append(ChoiceKnob("unroll_coefficients", (1, 0)))
            if self._row_fusable():
                knobs.append(ChoiceKnob("row_fused", (1, 0), before=0))
        constraints = []
        if self.mode in ("cache_write", "epilogue"):
            knobs += [SplitKnob(f"tile_{a}", e, 4) for a, e in zip(self.axes, self.tile_extents)]
            knobs += [SplitKnob(f"tile_{a}", e, 2) for a, e in zip(self.reduce_axes, self.reduce_extents)]
            knobs.append(ChoiceKnob("parallel_depth", (1, 2)))
            prepacked = tuple(f"{n}{PREPACKED}" for n in self.prepackable)
            knobs.append(ChoiceKnob("pack", ("none", *self.pack_candidates, *prepacked)))
            knobs.append(ChoiceKnob("unroll", (1, 0)))
            if self.prepackable:
                knobs.append(ChoiceKnob("outer_order", (0, 1), before=0))
            knobs.append(ChoiceKnob("registers", (0, 1), before=0))
            constraints = [
                ("vector_width", self._vector_ok),
                ("register_tile", self._registers_ok),
                ("accumulator_size", lambda c: self._tile_elems(c, 2) <= MAX_ACCUMULATOR),
                ("pack_size", self._pack_ok),
                ("parallelism", self._parallel_ok),
                ("registers", self._registers_loop_ok),
                ("overlap", self._overlap_ok),
                ("prologue_tile", self._prologue_ok),
            ]
        unpadded = None
        if self.padded:
            def unpadded() -> SearchSpace:
                return CpuSketch(self.workload, self.target, pad=False).space()
        return SearchSpace(f"cpu/{self.mode}/{self.workload.name}", knobs, self.steps, constraints,
                           rules=self._defaults, unpadded=unpadded)

    # --- row by row (softmax, layernorm) --------------------------------------------------------
    def _row_fusable(self) -> bool:
        """A rowwise plan (see Sketch._plan_rowwise) whose output is elementwise, with rows enough
        for every core."""
        if self.mode != "rowwise" or self.row_cache_write is not None:
            return False
        out = self.sch.stage(self.row_out)
        return self.row_prefix >= 1 and math.prod(out.tensor.shape[: self.row_prefix]) >= self.cores

    def _row_kept(self) -> list[str]:
        """Always-inlined stages of the output's shape that several stages read: kept as a row."""
        shape = self.sch.stage(self.row_out).tensor.shape
        readers: dict[str, int] = {}
        for st in self.sch.stages:
            for t in {t.name for t in st.reads() if not t.is_placeholder}:
                readers[t] = readers.get(t, 0) + 1
        return [n for n in self.inline_always
                if readers.get(n, 0) > 1 and self.sch.stage(n).tensor.shape == shape]

    def _row_fused_steps(self, c: Config, rooted: list[str]) -> list[Step]:
        """The output's leading (row) axes fused into one parallel loop; the row reductions and the
        kept stages computed at it, each row vectorized along its last axis."""
        kept = self._row_kept()
        steps: list[Step] = [ComputeInlineStep(n) for n in self.inline_always if n not in kept]
        for n in self.inline_knob:
            steps += [ComputeInlineStep(n)] if n not in rooted else _root_steps(self.sch.stage(n), self.lanes)
        out = self.sch.stage(self.row_out)
        rows = [a.name for a in out.axes[: self.row_prefix]]
        row = "@".join(rows)
        steps += _row_vector_steps(out, self.lanes, self.row_prefix)
        steps += [FuseStep(out.name, tuple(rows))] if len(rows) > 1 else []
        steps.append(parallel(out.name, row))
        inner = set(self.row_reductions) | set(kept)
        for st in reversed(self.sch.stages):  # consumers before producers
            if st.name not in inner:
                continue
            steps.append(ComputeAtStep(st.name, out.name, row))
            if st.is_reduction:
                if c.get("vector_reduce", 0) and _row_reducible(st, self.lanes):
                    steps += _along_row_steps(st, self.lanes)
            else:
                steps += _row_vector_steps(st, self.lanes, self.row_prefix)
        return steps

    def _defaults(self, space: SearchSpace) -> Iterator[Config]:
        return cpu_defaults(self, space)

    def _t(self, c: Config, axis: str) -> list[int]:
        return c[f"tile_{axis}"]

    def _tile_elems(self, c: Config, from_level: int) -> int:
        return math.prod(math.prod(self._t(c, a)[from_level:]) for a in self.axes)

    def _overlap_ok(self, c: Config) -> bool:
        """A tile of an overlapping axis fits in its extent (its last one is shifted back)."""
        return all(math.prod(self._t(c, a)[1:]) <= e
                   for a, e in zip(self.axes, self.extents) if a in self.padded)

    def _vector_ok(self, c: Config) -> bool:
        ext, t3 = self.tile_extents[-1], self._t(c, self.axes[-1])[3]
        return ext % self.lanes != 0 or t3 % self.lanes == 0

    def _registers_ok(self, c: Config) -> bool:
        t3 = [self._t(c, a)[3] for a in self.axes]
        vectors = math.prod(t3[:-1]) * -(-t3[-1] // self.lanes)  # 24 lanes: a vector and a half one
        return vectors <= self.target.accumulator_registers and (not c["unroll"] or vectors <= MAX_UNROLLED)

    def _register_loop(self, c: Config) -> str | None:
        """The outermost R1 loop that is not a single step: with the register tile unrolled under
        the R1 loops, they hold only the accumulator updates the ``registers`` knob keeps in
        registers for all of them (autotune.ir.registers)."""
        inner = [r for r in self.reduce_axes if self._t(c, r)[1] > 1]
        return f"{inner[0]}.1" if inner and c["unroll"] else None

    def _registers_loop_ok(self, c: Config) -> bool:
        return not c.get("registers", 0) or self._register_loop(c) is not None

    def _pack_ok(self, c: Config) -> bool:
        if c["pack"] == "none":
            return True
        _, deps = self.pack_candidates[c["pack"].removesuffix(PREPACKED)]
        elems = 1
        for a in self.axes:
            if a in deps:
                elems *= math.prod(self._t(c, a)[3:])
        for r in self.reduce_axes:
            if r in deps:
                elems *= self._t(c, r)[1]
        return elems <= MAX_PACK

    def _prologue_ok(self, c: Config) -> bool:
        """A prologue formed tile by tile: under the one parallel loop, its tile (the rows of the
        axes it depends on, every step of the reduction) at most MAX_PACK floats."""
        for n, deps in self.tile_prologues.items():
            if c.get(f"inline_{n}", 1) != 2:
                continue
            if c["parallel_depth"] != 1:
                return False
            elems = math.prod(math.prod(self._t(c, a)[2:]) for a in self.axes if a in deps)
            elems *= math.prod(e for r, e in zip(self.reduce_axes, self.reduce_extents) if r in deps)
            if elems > MAX_PACK:
                return False
        return True

    def _parallel_ok(self, c: Config) -> bool:
        total = math.prod(self.extents)
        par = math.prod(math.prod(self._t(c, a)[: c["parallel_depth"]]) for a in self.axes)
        return par >= min(self.cores, total // max(1, self.lanes)) and (
            c["parallel_depth"] == 1 or math.prod(self._t(c, a)[0] for a in self.axes) < self.cores * 4
        )

    # --- config -> steps --------------------------------------------------------------------------
    def steps(self, c: Config) -> list[Step]:
        steps: list[Step] = [ComputeInlineStep(n) for n in self.inline_always]
        rooted = []
        tiled = []
        for n in self.inline_knob:
            choice = c.get(f"inline_{n}", 1)
            if choice == 1:
                steps.append(ComputeInlineStep(n))
            elif choice == 2:
                tiled.append(n)
            else:
                rooted.append(n)
        if self.mode == "rowwise" and c.get("row_fused", 0):
            return self._row_fused_steps(c, rooted)
        if self.mode not in ("cache_write", "epilogue"):  # simple, and rowwise (a GPU-only plan)
            for st in self.sch.stages:
                if st.name not in self.inline_always and st.name not in self.inline_knob or st.name in rooted:
                    if st.is_output and c.get("unroll_coefficients", 0):
                        steps += _coefficient_steps(st, self.lanes, self.coefficient_axes)
                    else:
                        steps += _root_steps(st, self.lanes, int(c.get("vector_reduce", 0)))
            return steps
        for n in rooted:
            steps += _root_steps(self.sch.stage(n), self.lanes)
        T, R = self.tile_stage, self.compute_stage
        if self.mode == "cache_write":
            steps.append(CacheWriteStep(self.anchor.name))
        pack, scope = c["pack"], "local"
        if pack.endswith(PREPACKED):
            pack, scope = pack.removesuffix(PREPACKED), "prepacked"
        if pack != "none":
            layout, deps = self.pack_candidates[pack]
            steps.append(CacheReadStep(pack, (R,), layout, scope))
        # tile stage: S0 S1 | inner
        s0, s1, inner = [], [], []
        for ta, a in zip(self.tile_axes, self.axes):
            t = self._t(c, a)
            steps.append(SplitStep(T, ta, t[1] * t[2] * t[3], overlap=a in self.padded))
            steps.append(SplitStep(T, f"{ta}.1", t[2] * t[3]))
            s0.append(f"{ta}.0")
            s1.append(f"{ta}.1.0")
            inner.append(f"{ta}.1.1")
        if c.get("outer_order", 0):
            # output tiles visited last axis first: with a weight's axis last (dense, NHWC conv) each
            # thread's share of the parallel loop is whole weight panels, read once and reused from
            # its own cache by every row tile, instead of every thread streaming all the weights
            s0, s1 = s0[::-1], s1[::-1]
        by_axis = {f"{ta}.1.0": a for ta, a in zip(self.tile_axes, self.axes)}
        if tiled:  # the loops a prologue's tile depends on outside the others: one tile serves them
            needs = set().union(*(self.tile_prologues[n] for n in tiled))
            s1 = [x for x in s1 if by_axis[x] in needs] + [x for x in s1 if by_axis[x] not in needs]
        steps.append(ReorderStep(T, tuple(s0 + s1 + inner)))
        steps.append(ComputeAtStep(R, T, s1[-1]))
        for n in tiled:
            at = [x for x in s1 if by_axis[x] in self.tile_prologues[n]]
            steps.append(ComputeAtStep(n, T, at[-1] if at else s0[-1]))
            st = self.sch.stage(n)
            steps += _last_axis_vectors(st, self.lanes) if st.tensor.shape[-1] >= self.lanes else []
        # compute stage: R0 S2 R1 S3
        r0, r1, s2, s3 = [], [], [], []
        for r in self.reduce_axes:
            steps.append(SplitStep(R, r, self._t(c, r)[1]))
            r0.append(f"{r}.0")
            r1.append(f"{r}.1")
        for a in self.axes:
            steps.append(SplitStep(R, a, self._t(c, a)[3]))
            s2.append(f"{a}.0")
            s3.append(f"{a}.1")
        if pack != "none":
            # loops the packed operand depends on go outside, so the copy is reused by the others
            dep_inner = [f"{a}.0" for a in self.axes if a in deps]
            s2 = dep_inner + [x for x in s2 if x not in dep_inner]
        steps.append(ReorderStep(R, tuple(r0 + s2 + r1 + s3)))
        if pack != "none":
            outer = r0 + s2
            dep_loops = [x for x in outer if x.split(".")[0] in deps]
            steps.append(ComputeAtStep(f"{pack}_{scope}", R, dep_loops[-1] if dep_loops else outer[0]))
            if scope == "local":  # a prepacked copy is made before the call, not in the kernel
                steps.append(vectorize(f"{pack}_local", f"a{len(layout) - 1}"))
        if c["unroll"]:
            steps += [unroll(R, x) for x in s3[:-1]]
        if c.get("registers", 0):
            steps.append(AnnotateStep(R, self._register_loop(c), "registers"))
        steps.append(vectorize(R, s3[-1]))
        steps.append(vectorize(T, inner[-1]))
        par = s0 + (s1 if c["parallel_depth"] == 2 else [])
        if len(par) > 1:
            steps.append(FuseStep(T, tuple(par)))
        steps.append(parallel(T, "@".join(par)))
        return steps


def cpu_space(workload: Workload, target: Target) -> SearchSpace:
    """The CPU search space of a workload."""
    return CpuSketch(workload, target).space()
