"""CPU schedule-space generator: rules applied to any workload, no per-op templates.

Rules (after Ansor's sketch rules, reduced to what this compiler's primitives express):
- inline injective producers (padding-like producers that hold a ``select`` are a knob: inlined,
  or computed as their own vectorizable stage);
- a reduction with data reuse (an input not indexed by every spatial axis) gets multi-level tiling
  "SSRSRS": spatial tiles S0 S1 on the tile stage, then R0 S2 R1 S3 on the compute stage, the
  accumulator in a local buffer (cache_write), or fused into an elementwise epilogue (compute_at);
- optional packing of one reused operand into a local buffer (cache_read with a layout that makes
  the innermost spatial axis contiguous), placed where it is reused across the other S2 loops;
- outer tiles fused and parallel; innermost spatial loop vectorized; register tile unrolled;
- every other stage: outer loops fused and parallel, innermost spatial loop vectorized.
"""

from __future__ import annotations

import math

from autotune.schedule import (
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    Schedule,
    SplitStep,
    Stage,
    Step,
    parallel,
    unroll,
    vectorize,
)
from autotune.target import Target
from autotune.te import Workload
from autotune.te.expr import Select, TensorRead, free_vars, walk

from .space import ChoiceKnob, Config, SearchSpace, SplitKnob

MAX_ACCUMULATOR = 16384  # floats in the local accumulator tile (64 KiB)
MAX_PACK = 32768  # floats in a packed operand tile (128 KiB, about L2-resident)
MAX_UNROLLED = 64  # vector statements in the unrolled register tile


def _reads(stage: Stage) -> list[TensorRead]:
    return [n for n in walk(stage.body) if isinstance(n, TensorRead)]


def _has_select(stage: Stage) -> bool:
    return any(isinstance(n, Select) for n in walk(stage.body))


def _has_reuse(stage: Stage) -> bool:
    """Some input is read with indices that miss a spatial axis (so tiling reuses it)."""
    spatial = {a.var for a in stage.axes}
    return stage.is_reduction and any(
        not spatial <= set().union(*(free_vars(i) for i in r.indices)) for r in _reads(stage)
    )


def _root_steps(stage: Stage, lanes: int) -> list[Step]:
    """Parallel outer loops, vectorized innermost spatial loop (when it divides into vectors)."""
    names = [a.name for a in stage.axes]
    steps: list[Step] = []
    if stage.is_reduction:
        if len(names) > 1:
            steps.append(FuseStep(stage.name, tuple(names)))
        outer = "@".join(names)
        if math.prod(stage.tensor.shape) > 1:
            steps.append(parallel(stage.name, outer))
        return steps
    last, last_ext = names[-1], stage.tensor.shape[-1]
    outer_names = names[:-1]
    if last_ext % lanes == 0 and last_ext >= lanes:
        steps += [SplitStep(stage.name, last, lanes), vectorize(stage.name, f"{last}.1")]
        outer_names.append(f"{last}.0")
    else:
        outer_names.append(last)
    if len(outer_names) > 1:
        steps.append(FuseStep(stage.name, tuple(outer_names)))
    steps.append(parallel(stage.name, "@".join(outer_names)))
    return steps


class CpuSketch:
    """The structure chosen for one workload; turns configs into steps."""

    def __init__(self, workload: Workload, target: Target) -> None:
        self.workload = workload
        self.lanes = target.vector_lanes
        self.cores = target.cores
        sch = Schedule(workload.outputs)
        self.sch = sch
        self.inline_always: list[str] = []
        self.inline_knob: list[str] = []
        for st in sch.stages:
            if not st.is_output and not st.is_reduction:
                (self.inline_knob if _has_select(st) else self.inline_always).append(st.name)
        anchors = [st for st in sch.stages if _has_reuse(st)]
        self.anchor = anchors[0] if len(anchors) == 1 else None
        self.mode = "simple"
        self.tile_stage = self.compute_stage = ""
        if self.anchor is not None:
            self._plan_tiling(self.anchor)

    def _plan_tiling(self, anchor: Stage) -> None:
        inlined = set(self.inline_always) | set(self.inline_knob)
        consumers = [
            s for s in self.sch.stages
            if s.name not in inlined and s is not anchor and self._reads_through(s, anchor, inlined)
        ]
        if anchor.is_output:
            self.mode = "cache_write"
            self.tile_stage, self.compute_stage = anchor.name, anchor.name + "_local"
        elif (
            len(consumers) == 1
            and consumers[0].is_output
            and not consumers[0].is_reduction
            and consumers[0].tensor.shape == anchor.tensor.shape
        ):
            self.mode = "epilogue"
            self.tile_stage, self.compute_stage = consumers[0].name, anchor.name
        else:
            return
        self.tile_axes = [a.name for a in self.sch.stage(self.tile_stage).axes]
        self.axes = [a.name for a in anchor.axes]
        self.extents = list(anchor.tensor.shape)
        self.reduce_axes = [a.name for a in anchor.reduce_axes]
        self.reduce_extents = [a.extent for a in anchor.reduce_axes]
        # operands that could be packed: inputs of the anchor with reuse
        self.pack_candidates: dict[str, tuple[tuple[int, ...], set[str]]] = {}
        spatial = {a.var: a.name for a in anchor.axes}
        reduce = {a.var: a.name for a in anchor.reduce_axes}
        last = anchor.axes[-1].var
        for r in _reads(anchor):
            if r.tensor.name in inlined or not r.tensor.is_placeholder:
                continue
            used = set().union(*(free_vars(i) for i in r.indices))
            if set(spatial) <= used:
                continue
            dims = list(range(r.tensor.ndim))
            last_dim = next((d for d, i in enumerate(r.indices) if last in free_vars(i)), None)
            if last_dim is not None:
                dims.remove(last_dim)
                dims.append(last_dim)
            deps = {spatial.get(v) or reduce.get(v) for v in used if v in spatial or v in reduce}
            self.pack_candidates[r.tensor.name] = (tuple(dims), deps)

    def _reads_through(self, stage: Stage, producer: Stage, inlined: set[str]) -> bool:
        """Does ``stage`` read ``producer`` directly or through stages that will be inlined?"""
        todo, seen = [stage], set()
        while todo:
            st = todo.pop()
            for t in st.reads():
                if t is producer.tensor:
                    return True
                if t.name in inlined and t.name not in seen:
                    seen.add(t.name)
                    todo.append(self.sch.stage(t.name))
        return False

    # --- the space ------------------------------------------------------------------------------
    def space(self) -> SearchSpace:
        knobs: list = [ChoiceKnob(f"inline_{n}", (1, 0)) for n in self.inline_knob]
        constraints = []
        if self.mode in ("cache_write", "epilogue"):
            knobs += [SplitKnob(f"tile_{a}", e, 4) for a, e in zip(self.axes, self.extents)]
            knobs += [SplitKnob(f"tile_{a}", e, 2) for a, e in zip(self.reduce_axes, self.reduce_extents)]
            knobs.append(ChoiceKnob("parallel_depth", (1, 2)))
            knobs.append(ChoiceKnob("pack", ("none", *self.pack_candidates)))
            knobs.append(ChoiceKnob("unroll", (1, 0)))
            constraints = [
                ("vector_width", self._vector_ok),
                ("register_tile", self._registers_ok),
                ("accumulator_size", lambda c: self._tile_elems(c, 2) <= MAX_ACCUMULATOR),
                ("pack_size", self._pack_ok),
                ("parallelism", self._parallel_ok),
            ]
        return SearchSpace(f"cpu/{self.mode}/{self.workload.name}", knobs, self.steps, constraints)

    def _t(self, c: Config, axis: str) -> list[int]:
        return c[f"tile_{axis}"]

    def _tile_elems(self, c: Config, from_level: int) -> int:
        return math.prod(math.prod(self._t(c, a)[from_level:]) for a in self.axes)

    def _vector_ok(self, c: Config) -> bool:
        ext, t3 = self.extents[-1], self._t(c, self.axes[-1])[3]
        return ext % self.lanes != 0 or t3 % self.lanes == 0

    def _registers_ok(self, c: Config) -> bool:
        t3 = [self._t(c, a)[3] for a in self.axes]
        vectors = math.prod(t3[:-1]) * max(1, t3[-1] // self.lanes)
        return vectors <= 16 and (not c["unroll"] or vectors <= MAX_UNROLLED)

    def _pack_ok(self, c: Config) -> bool:
        if c["pack"] == "none":
            return True
        _, deps = self.pack_candidates[c["pack"]]
        elems = 1
        for a in self.axes:
            if a in deps:
                elems *= math.prod(self._t(c, a)[3:])
        for r in self.reduce_axes:
            if r in deps:
                elems *= self._t(c, r)[1]
        return elems <= MAX_PACK

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
        for n in self.inline_knob:
            if c.get(f"inline_{n}", 1):
                steps.append(ComputeInlineStep(n))
            else:
                rooted.append(n)
        if self.mode == "simple":
            for st in self.sch.stages:
                if st.name not in self.inline_always and st.name not in self.inline_knob or st.name in rooted:
                    steps += _root_steps(st, self.lanes)
            return steps
        for n in rooted:
            steps += _root_steps(self.sch.stage(n), self.lanes)
        T, R = self.tile_stage, self.compute_stage
        if self.mode == "cache_write":
            steps.append(CacheWriteStep(self.anchor.name))
        pack = c["pack"]
        if pack != "none":
            layout, deps = self.pack_candidates[pack]
            steps.append(CacheReadStep(pack, (R,), layout))
        # tile stage: S0 S1 | inner
        s0, s1, inner = [], [], []
        for ta, a in zip(self.tile_axes, self.axes):
            t = self._t(c, a)
            steps.append(SplitStep(T, ta, t[1] * t[2] * t[3]))
            steps.append(SplitStep(T, f"{ta}.1", t[2] * t[3]))
            s0.append(f"{ta}.0")
            s1.append(f"{ta}.1.0")
            inner.append(f"{ta}.1.1")
        steps.append(ReorderStep(T, tuple(s0 + s1 + inner)))
        steps.append(ComputeAtStep(R, T, s1[-1]))
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
            dep_s2 = [f"{a}.0" for a in self.axes if a in deps]
            s2 = dep_s2 + [x for x in s2 if x not in dep_s2]
        steps.append(ReorderStep(R, tuple(r0 + s2 + r1 + s3)))
        if pack != "none":
            outer = r0 + s2
            dep_loops = [x for x in outer if x.split(".")[0] in deps]
            steps.append(ComputeAtStep(f"{pack}_local", R, dep_loops[-1] if dep_loops else outer[0]))
            steps.append(vectorize(f"{pack}_local", f"a{len(layout) - 1}"))
        if c["unroll"]:
            steps += [unroll(R, x) for x in s3[:-1]]
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

