"""Schedule state: one Stage per computed tensor, its loops and their relations.

A schedule is built by applying step values (:mod:`autotune.schedule.steps`) to a fresh
:class:`Schedule`; every primitive checks its preconditions and raises :class:`ScheduleError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..te.expr import Expr, IterVar, Reduce, TensorRead, rebuild, substitute
from ..te.expr import children as expr_children
from ..te.tensor import Tensor
from ..te.workload import topo_order


class ScheduleError(Exception):
    """An illegal schedule step (the one exception every primitive raises)."""


class Loop:
    """A loop of a stage: a root axis or one derived from it by split / fuse."""

    __slots__ = ("name", "kind")

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind  # "spatial" or "reduce"

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False)
class Split:
    parent: Loop
    outer: Loop
    inner: Loop
    factor: int | None  # inner extent
    nparts: int | None  # outer extent
    # where the extent does not divide: the last tile shifted back to end at the extent (it
    # overlaps the one before it and recomputes those elements) instead of a guarded partial tile
    overlap: bool = False


@dataclass(eq=False)
class Fuse:
    outer: Loop
    inner: Loop
    fused: Loop


class Stage:
    """How one tensor is computed: its loops, annotations and where it is placed."""

    def __init__(self, tensor: Tensor, body: Expr, axes: tuple[IterVar, ...], is_output: bool) -> None:
        self.tensor = tensor
        self.name = tensor.name
        self.body = body
        self.axes = axes
        self.is_output = is_output
        self.scope = "global"
        self.root_loops: list[Loop] = [Loop(a.name, "spatial") for a in axes] + [
            Loop(a.name, "reduce") for a in self.reduce_axes
        ]
        self.leaf_loops: list[Loop] = list(self.root_loops)
        self.relations: list[Split | Fuse] = []
        self.annotations: dict[Loop, str] = {}
        self.inlined = False
        self.attach: tuple[Stage, Loop] | None = None
        self.attached_here: list[Stage] = []  # stages computed at one of this stage's loops
        self.storage_pad = 0  # elements added to the innermost dim of its buffer (bank conflicts)
        self.pipeline: dict[Loop, int] = {}  # loop -> depth of the shared-copy pipeline at it

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body, Reduce)

    @property
    def root_axes(self) -> tuple[IterVar, ...]:
        return tuple(self.axes) + self.reduce_axes

    def loop(self, name: str) -> Loop:
        for lp in self.leaf_loops:
            if lp.name == name:
                return lp
        raise ScheduleError(f"stage {self.name} has no loop {name!r} (loops: {self.leaf_loops})")

    def reads(self) -> list[Tensor]:
        from ..te.expr import distinct_nodes

        out: list[Tensor] = []
        for node in distinct_nodes(self.body):
            if isinstance(node, TensorRead) and node.tensor not in out:
                out.append(node.tensor)
        return out

    def __repr__(self) -> str:
        return f"Stage({self.name}, loops={self.leaf_loops})"


class Schedule:
    """The stages of a workload's outputs, in producer-before-consumer order."""

    def __init__(self, outputs: list[Tensor]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        names: set[str] = set()
        for t in topo_order(outputs):
            if t.name in names:
                raise ScheduleError(f"two tensors are named {t.name!r}; stage names must be unique")
            names.add(t.name)
            if not t.is_placeholder:
                self.stages.append(Stage(t, t.body, t.axes, t in self.outputs))

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ScheduleError(f"no stage {name!r} (stages: {[s.name for s in self.stages]})")

    def consumers(self, stage: Stage) -> list[Stage]:
        return [s for s in self.stages if not s.inlined and stage.tensor in s.reads()]

    def __repr__(self) -> str:
        return f"Schedule({self.stages})"


# --- primitives -----------------------------------------------------------------------------------
def _check_leaf(stage: Stage, loop: Loop) -> int:
    if loop not in stage.leaf_loops:
        raise ScheduleError(f"{loop} is not a current loop of stage {stage.name}")
    return stage.leaf_loops.index(loop)


def split(
    stage: Stage, loop: Loop, factor: int | None = None, nparts: int | None = None, overlap: bool = False
) -> tuple[Loop, Loop]:
    """Split ``loop`` into (outer, inner) by inner ``factor`` or by outer ``nparts``. With
    ``overlap`` a last partial tile is shifted back to end at the extent instead of guarded: valid
    only for a spatial loop of a stage whose elements do not depend on what it stored before (an
    elementwise stage; lowering checks it)."""
    if (factor is None) == (nparts is None):
        raise ScheduleError("split takes exactly one of factor and nparts")
    value = factor if factor is not None else nparts
    if not isinstance(value, int) or value < 1:
        raise ScheduleError(f"split factor must be a positive integer, got {value!r}")
    pos = _check_leaf(stage, loop)
    if loop in stage.annotations or loop in stage.pipeline:
        raise ScheduleError(f"cannot split annotated loop {loop}")
    outer, inner = Loop(loop.name + ".0", loop.kind), Loop(loop.name + ".1", loop.kind)
    if overlap and loop.kind != "spatial":
        raise ScheduleError(f"an overlapping split needs a spatial loop, got {loop}")
    stage.relations.append(Split(loop, outer, inner, factor, nparts, overlap))
    _move_attachments(stage, [loop], inner)
    stage.leaf_loops[pos : pos + 1] = [outer, inner]
    return outer, inner


def fuse(stage: Stage, loops: list[Loop]) -> Loop:
    """Fuse consecutive loops into one."""
    if len(loops) < 2:
        raise ScheduleError("fuse needs at least two loops")
    positions = [_check_leaf(stage, lp) for lp in loops]
    if positions != list(range(positions[0], positions[0] + len(loops))):
        raise ScheduleError(f"fuse needs adjacent loops in order, got {loops}")
    if len({lp.kind for lp in loops}) != 1:
        raise ScheduleError("cannot fuse a spatial loop with a reduction loop")
    if any(lp in stage.annotations or lp in stage.pipeline for lp in loops):
        raise ScheduleError("cannot fuse annotated loops")
    fused = loops[0]
    for lp in loops[1:]:
        new = Loop(f"{fused.name}@{lp.name}", lp.kind)
        stage.relations.append(Fuse(fused, lp, new))
        fused = new
    stage.leaf_loops[positions[0] : positions[-1] + 1] = [fused]
    _move_attachments(stage, loops, fused)
    return fused


def _move_attachments(stage: Stage, old: list[Loop], new: Loop) -> None:
    """Stages computed inside a loop that is split or fused follow the loop that now holds that body."""
    for other in stage.attached_here:
        if other.attach is not None and other.attach[1] in old:
            other.attach = (stage, new)


def reorder(stage: Stage, loops: list[Loop]) -> None:
    """Put the given loops in this order, keeping the other loops where they are."""
    positions = sorted(_check_leaf(stage, lp) for lp in loops)
    if len(set(loops)) != len(loops):
        raise ScheduleError("reorder names a loop twice")
    for pos, lp in zip(positions, loops):
        stage.leaf_loops[pos] = lp


THREAD_AXES = (
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
    "vthread",
)


def annotate(stage: Stage, loop: Loop, kind: str) -> None:
    """Mark a loop parallel / vectorize / unroll, bind it to a GPU thread axis, or (``registers``,
    a reduction loop) ask for the accumulators it updates to be kept in registers throughout."""
    if kind not in ("parallel", "vectorize", "unroll", "registers") + THREAD_AXES:
        raise ScheduleError(f"unknown annotation {kind!r}")
    if kind == "registers" and loop.kind != "reduce":
        raise ScheduleError(f"registers annotates a reduction loop, {loop} is not")
    if kind in THREAD_AXES and kind != "vthread":
        for lp, other in stage.annotations.items():
            if other == kind and lp is not loop:
                raise ScheduleError(f"stage {stage.name} binds {kind} twice ({lp} and {loop})")
    _check_leaf(stage, loop)
    if loop in stage.annotations:
        raise ScheduleError(f"loop {loop} is already annotated {stage.annotations[loop]}")
    # a vectorized reduction loop is allowed (its lanes accumulate separately: CPU lowering)
    if kind in ("parallel",) + THREAD_AXES[:3] and loop.kind == "reduce":
        raise ScheduleError(f"cannot {kind} reduction loop {loop}")
    if kind == "vectorize" and stage.leaf_loops[-1] is not loop:
        raise ScheduleError(f"only the innermost loop can be vectorized ({loop} is not)")
    stage.annotations[loop] = kind


def compute_inline(sch: Schedule, stage: Stage) -> None:
    """Substitute the stage's body into every consumer."""
    if stage.is_reduction:
        raise ScheduleError(f"cannot inline reduction {stage.name}")
    if stage.is_output:
        raise ScheduleError(f"cannot inline output {stage.name}")
    if stage.attach is not None or stage.inlined:
        raise ScheduleError(f"stage {stage.name} is already placed")
    if any(s.attach is not None and s.attach[0] is stage for s in sch.stages):
        raise ScheduleError(f"stage {stage.name} has stages attached to it")
    for cons in sch.stages:
        if cons is not stage and not cons.inlined:
            cons.body = _inline_into(cons.body, stage)
    stage.inlined = True


def _inline_into(e: Expr, stage: Stage, done: dict[int, Expr] | None = None) -> Expr:
    """``e`` with the stage's reads replaced by its body; a subexpression several parents share is
    rewritten once (``done``, by node) and stays shared."""
    if done is None:
        done = {}
    out = done.get(id(e))
    if out is not None:
        return out
    kids = tuple(expr_children(e))
    new = tuple(_inline_into(k, stage, done) for k in kids)
    if isinstance(e, TensorRead) and e.tensor is stage.tensor:
        out = substitute(stage.body, {a.var: i for a, i in zip(stage.axes, new)})
    elif all(n is k for n, k in zip(new, kids)):
        out = e
    else:
        out = rebuild(e, new)
    done[id(e)] = out
    return out


def compute_at(sch: Schedule, stage: Stage, target: Stage, loop: Loop) -> None:
    """Compute ``stage`` inside ``loop`` of ``target``, just the region target needs there."""
    _check_leaf(target, loop)
    if stage.is_output:
        raise ScheduleError(f"cannot compute_at output {stage.name}")
    if stage.inlined or stage.attach is not None:
        raise ScheduleError(f"stage {stage.name} is already placed")
    consumers = sch.consumers(stage)
    pos = target.leaf_loops.index(loop)
    allowed = [target] + [
        s for s in target.attached_here if s.attach[1] in target.leaf_loops[pos:]
    ]
    if not consumers or any(c not in allowed for c in consumers):
        raise ScheduleError(
            f"compute_at needs every consumer of {stage.name} ({[c.name for c in consumers]}) to be "
            f"{target.name} or computed at the same or a deeper loop of it"
        )
    if target.inlined:
        raise ScheduleError(f"cannot attach to inlined stage {target.name}")
    stage.attach = (target, loop)
    target.attached_here.append(stage)


def cache_write(sch: Schedule, stage: Stage, scope: str = "local") -> Stage:
    """Compute the stage into a ``scope`` buffer; the stage becomes a copy out of it."""
    if scope != "local":
        raise ScheduleError(f"unsupported cache scope {scope!r}")
    if stage.relations or stage.annotations or stage.attach or stage.inlined or stage.attached_here:
        raise ScheduleError(f"cache_write must come before other steps on {stage.name}")
    if stage.scope != "global":
        raise ScheduleError(f"{stage.name} is already a cache")
    name = stage.name + "_local"
    if any(s.name == name for s in sch.stages):
        raise ScheduleError(f"{stage.name} already has a write cache")
    axes = tuple(IterVar(a.name, a.extent) for a in stage.axes)
    body = substitute(stage.body, {old.var: new.var for old, new in zip(stage.axes, axes)})
    cached = Tensor(stage.tensor.shape, stage.tensor.dtype, name, axes, body)
    local = Stage(cached, body, axes, is_output=False)
    local.scope = scope
    stage.body = TensorRead(cached, [a.var for a in stage.axes])
    stage.root_loops = [Loop(a.name, "spatial") for a in stage.axes]
    stage.leaf_loops = list(stage.root_loops)
    sch.stages.insert(sch.stages.index(stage), local)
    return local


def cache_read(
    sch: Schedule,
    tensor_name: str,
    readers: list[Stage],
    layout: tuple[int, ...] | None = None,
    scope: str = "local",
) -> Stage:
    """Copy ``tensor`` into a ``scope`` buffer that ``readers`` read instead.

    ``layout`` permutes the dims of the copy (``copy[d0', d1', ...] = tensor[...]``), so a strided
    operand can be packed contiguous for the innermost loop (a transposing copy). ``prepacked``: the
    copies of all tiles are made once, outside the kernel, and the kernel's argument holds them
    (only for an input, placed like a local copy; see ``autotune.prepack``).
    """
    if scope not in ("local", "shared", "prepacked"):
        raise ScheduleError(f"unsupported cache scope {scope!r}")
    src = next((t for s in sch.stages for t in s.reads() if t.name == tensor_name), None)
    if src is None:
        raise ScheduleError(f"no stage reads a tensor named {tensor_name!r}")
    if not readers or any(src not in r.reads() for r in readers):
        raise ScheduleError(f"cache_read of {tensor_name}: every reader must read it")
    if scope == "prepacked":
        if not src.is_placeholder:
            raise ScheduleError(f"only an input can be prepacked, {tensor_name} is computed")
        if any(src in s.reads() for s in sch.stages if s not in readers):
            raise ScheduleError(f"prepacked {tensor_name}: every stage reading it must read the copy")
    perm = tuple(range(src.ndim)) if layout is None else tuple(layout)
    if sorted(perm) != list(range(src.ndim)):
        raise ScheduleError(f"layout {perm} is not a permutation of {src.ndim} dims")
    name = f"{tensor_name}_{scope}"
    if any(s.name == name for s in sch.stages):
        raise ScheduleError(f"{tensor_name} already has a read cache")
    shape = tuple(src.shape[p] for p in perm)
    axes = tuple(IterVar(f"a{d}", n) for d, n in enumerate(shape))
    src_idx = [None] * src.ndim
    for d, p in enumerate(perm):
        src_idx[p] = axes[d].var
    body = TensorRead(src, src_idx)
    copy = Tensor(shape, src.dtype, name, axes, body)
    stage = Stage(copy, body, axes, is_output=False)
    stage.scope = scope
    for r in readers:
        r.body = _redirect_reads(r.body, src, copy, perm)
    first = min(sch.stages.index(r) for r in readers)
    sch.stages.insert(first, stage)
    return stage


def _redirect_reads(e: Expr, src: Tensor, copy: Tensor, perm: tuple[int, ...]) -> Expr:
    kids = tuple(expr_children(e))
    new = tuple(_redirect_reads(k, src, copy, perm) for k in kids)
    if isinstance(e, TensorRead) and e.tensor is src:
        return TensorRead(copy, [new[p] for p in perm])
    if all(n is k for n, k in zip(new, kids)):
        return e
    return rebuild(e, new)


def pipeline(stage: Stage, loop: Loop, stages: int) -> None:
    """Software-pipeline the shared-memory copies computed at serial ``loop``: a ring of ``stages``
    tiles, each filled ``stages - 1`` iterations before it is read, by asynchronous copies where
    the target has them (1: the plain copy, barrier, compute order)."""
    _check_leaf(stage, loop)
    if not isinstance(stages, int) or not 1 <= stages <= 8:
        raise ScheduleError(f"pipeline stages must be an integer in 1..8, got {stages!r}")
    if stage.annotations.get(loop, "serial") not in ("serial", "unroll"):
        raise ScheduleError(f"a pipelined loop runs in order; {loop} is {stage.annotations[loop]}")
    shared = [o for o in stage.attached_here if o.attach == (stage, loop) and o.scope == "shared"]
    if not shared:
        raise ScheduleError(f"no shared-memory copy is computed at {loop} of {stage.name}")
    stage.pipeline[loop] = stages


def storage_pad(stage: Stage, pad: int) -> None:
    """Pad the innermost dim of a cached stage's buffer by ``pad`` elements."""
    if stage.scope not in ("local", "shared"):
        raise ScheduleError(f"storage_pad applies to cache stages, {stage.name} is {stage.scope}")
    if not isinstance(pad, int) or pad < 0:
        raise ScheduleError(f"storage pad must be a non-negative integer, got {pad!r}")
    stage.storage_pad = pad
