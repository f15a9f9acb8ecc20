"""Workload analysis shared by every target's space generator: which producers to inline, which
reduction gets multi-level tiling, and whether its consumer is a fusable epilogue."""

from __future__ import annotations

import math

from autotune.schedule import Schedule, Stage
from autotune.target import Target
from autotune.te import Workload
from autotune.te.expr import Binary, Compare, IntImm, Select, TensorRead, Var, free_vars, walk

MAX_COEFF_PERIOD = 8  # the longest period of a coefficient axis (see coefficient_axes)
# producers that an anchor may compute tile by tile (``Sketch.tile_prologues``): each element a few
# reads of one input, so a tile is cheap to form where the product needs it (Strassen's sums of A)
TILE_PROLOGUE_TAGS = {"strassen_input"}
MAX_COEFF_COPIES = 64  # the most unrolled copies of a body over its coefficient axes


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


def coefficient_axes(stages: list[Stage], out: Stage) -> dict[int, int]:
    """Axes of ``out`` (by position, the last excepted) along which some stage of the same shape
    picks literal coefficients, with their period ``d``: the axis variable compared with a
    constant (``d`` = its extent, at most MAX_COEFF_PERIOD) or taken ``// d`` and ``% d``; the
    longest periods dropped until their product is at most MAX_COEFF_COPIES. Loops of
    length ``d`` over such an axis, unrolled, turn the coefficient ``select`` s into literals (the
    Winograd transforms: autotune.graph.winograd)."""
    found: dict[int, int] = {}
    for st in stages:
        if st.tensor.shape != out.tensor.shape or st.is_reduction:
            continue
        pos = {a.var: i for i, a in enumerate(st.axes[:-1])}
        for node in walk(st.body):
            if not isinstance(node, (Binary, Compare)):
                continue
            a, b = node.a, node.b
            if isinstance(node, Compare) and isinstance(b, Var) and isinstance(a, IntImm):
                a, b = b, a
            if not (isinstance(a, Var) and a in pos and isinstance(b, IntImm)):
                continue
            ext = st.axes[pos[a]].extent
            if isinstance(node, Compare) and node.op in ("lt", "le", "eq") and ext <= MAX_COEFF_PERIOD:
                found.setdefault(pos[a], ext)
            elif isinstance(node, Binary) and node.op in ("floordiv", "mod"):
                if 1 < b.value <= MAX_COEFF_PERIOD:
                    found.setdefault(pos[a], b.value)
    while math.prod(found.values()) > MAX_COEFF_COPIES:
        del found[max(found, key=lambda i: (found[i], i))]
    return found


class Sketch:
    """The structure of one workload that the space rules work from (target-independent)."""

    def __init__(self, workload: Workload, target: Target) -> None:
        self.workload = workload
        self.target = target
        self.lanes = target.vector_lanes
        self.cores = target.cores
        sch = Schedule(workload.outputs)
        self.sch = sch
        self.inline_always: list[str] = []
        self.inline_knob: list[str] = []
        after_reduction: set[str] = set()  # stages that read a reduction's result (through others)
        for st in sch.stages:  # (in topological order)
            if any(t.name in after_reduction or sch.stage(t.name).is_reduction
                   for t in st.reads() if not t.is_placeholder):
                after_reduction.add(st.name)
            if not st.is_output and not st.is_reduction:
                # a select that could be its own stage: a padding-like producer, not one that reads a
                # reduction's result (an attention mask after the product feeds the epilogue inlined)
                knob = _has_select(st) and st.name not in after_reduction
                (self.inline_knob if knob else self.inline_always).append(st.name)
        anchors = [st for st in sch.stages if _has_reuse(st)]
        self.anchor = anchors[0] if len(anchors) == 1 else None
        self.mode = "simple"
        self.tile_stage = self.compute_stage = ""
        self.tile_prologues: dict[str, set[str]] = {}
        outs = [st for st in sch.stages if st.is_output]
        self.coefficient_axes = coefficient_axes(sch.stages, outs[0]) if len(outs) == 1 else {}
        if self.anchor is not None:
            self._plan_tiling(self.anchor)
        else:
            self._plan_rowwise()

    def _plan_rowwise(self) -> None:
        """Reductions without reuse feeding one elementwise output over the same leading axes
        (softmax, layernorm, pooling-like sums): one block a row, cross-thread reductions."""
        inlined = set(self.inline_always) | set(self.inline_knob)
        live = [s for s in self.sch.stages if s.name not in inlined]
        reductions = [s for s in live if s.is_reduction]
        outs = [s for s in live if s.is_output]
        if not reductions or len(outs) != 1:
            return
        out = outs[0]
        if out.is_reduction:
            if len(reductions) != 1:
                return
            self.row_cache_write = out.name
            self.row_reductions = [out.name + "_local"]
            prefix = len(out.axes)
        else:
            self.row_cache_write = None
            if any(s is not out and not s.is_reduction for s in live):
                return
            shapes = {s.tensor.shape for s in reductions}
            if len(shapes) != 1:
                return
            shape = shapes.pop()
            if out.tensor.shape[: len(shape)] != shape:
                return
            prefix = len(shape)
            self.row_reductions = [s.name for s in reductions]
        self.mode = "rowwise"
        self.row_out = out.name
        self.row_prefix = prefix
        self.row_axes = [a.name for a in out.axes]
        self.row_reduce_axes = {
            name: [a.name for a in (out if name.endswith("_local") else self.sch.stage(name)).reduce_axes]
            for name in self.row_reductions
        }

    def _plan_tiling(self, anchor: Stage) -> None:
        inlined = set(self.inline_always) | set(self.inline_knob)
        consumers = [
            s
            for s in self.sch.stages
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
        # operands that could be packed: inputs of the anchor with reuse (those that are constants
        # of a model can be packed once, at compile time: ``prepackable``)
        self.pack_candidates: dict[str, tuple[tuple[int, ...], set[str]]] = {}
        consts = {self.workload.inputs[i].name for i in self.workload.const_inputs}
        self.prepackable: list[str] = []
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
            if r.tensor.name in consts:
                self.prepackable.append(r.tensor.name)
        # producers in TILE_PROLOGUE_TAGS that the anchor reads directly: name -> the anchor axes
        # their reads depend on (a tile of them can be formed outside the loops over the others)
        self.tile_prologues: dict[str, set[str]] = {}
        for r in _reads(anchor):
            if r.tensor.name in self.inline_knob and r.tensor.tag in TILE_PROLOGUE_TAGS:
                used = set().union(*(free_vars(i) for i in r.indices))
                self.tile_prologues[r.tensor.name] = {spatial.get(v) or reduce[v] for v in used
                                                      if v in spatial or v in reduce}

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
