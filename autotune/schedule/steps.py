"""Schedule steps as small frozen values: they serialise to JSON, replay and compare."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar, Sequence

from ..te.tensor import Tensor
from . import state as S
from .state import Schedule, ScheduleError


@dataclass(frozen=True)
class Step:
    """Base of all steps; ``apply`` mutates a Schedule or raises ScheduleError."""

    kind: ClassVar[str] = ""

    def apply(self, sch: Schedule) -> None:
        raise NotImplementedError

    def to_dict(self) -> dict:
        d = asdict(self)
        d["step"] = self.kind
        return d


@dataclass(frozen=True)
class SplitStep(Step):
    stage: str
    loop: str
    factor: int | None = None
    nparts: int | None = None
    overlap: bool = False  # a last partial tile shifted back (``state.split``)
    kind: ClassVar[str] = "split"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        S.split(st, st.loop(self.loop), self.factor, self.nparts, self.overlap)


@dataclass(frozen=True)
class TileStep(Step):
    """Split two loops and reorder to (x.0, y.0, x.1, y.1)."""

    stage: str
    x: str
    y: str
    x_factor: int
    y_factor: int
    kind: ClassVar[str] = "tile"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        xo, xi = S.split(st, st.loop(self.x), self.x_factor)
        yo, yi = S.split(st, st.loop(self.y), self.y_factor)
        S.reorder(st, [xo, yo, xi, yi])


@dataclass(frozen=True)
class ReorderStep(Step):
    stage: str
    loops: tuple[str, ...]
    kind: ClassVar[str] = "reorder"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        S.reorder(st, [st.loop(n) for n in self.loops])


@dataclass(frozen=True)
class FuseStep(Step):
    stage: str
    loops: tuple[str, ...]
    kind: ClassVar[str] = "fuse"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        S.fuse(st, [st.loop(n) for n in self.loops])


@dataclass(frozen=True)
class AnnotateStep(Step):
    """parallel / vectorize / unroll / registers (or a GPU thread axis) on one loop."""

    stage: str
    loop: str
    annotation: str
    kind: ClassVar[str] = "annotate"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        S.annotate(st, st.loop(self.loop), self.annotation)


def bind(stage: str, loop: str, axis: str) -> AnnotateStep:
    """Bind a loop to a GPU axis: blockIdx.{x,y,z}, threadIdx.{x,y,z} or vthread."""
    return AnnotateStep(stage, loop, axis)


def parallel(stage: str, loop: str) -> AnnotateStep:
    return AnnotateStep(stage, loop, "parallel")


def vectorize(stage: str, loop: str) -> AnnotateStep:
    return AnnotateStep(stage, loop, "vectorize")


def unroll(stage: str, loop: str) -> AnnotateStep:
    return AnnotateStep(stage, loop, "unroll")


@dataclass(frozen=True)
class ComputeAtStep(Step):
    stage: str
    target: str
    loop: str
    kind: ClassVar[str] = "compute_at"

    def apply(self, sch: Schedule) -> None:
        tgt = sch.stage(self.target)
        S.compute_at(sch, sch.stage(self.stage), tgt, tgt.loop(self.loop))


@dataclass(frozen=True)
class ComputeInlineStep(Step):
    stage: str
    kind: ClassVar[str] = "compute_inline"

    def apply(self, sch: Schedule) -> None:
        S.compute_inline(sch, sch.stage(self.stage))


@dataclass(frozen=True)
class CacheWriteStep(Step):
    """Compute ``stage`` into a local accumulator (named ``<stage>_local``)."""

    stage: str
    scope: str = "local"
    kind: ClassVar[str] = "cache_write"

    def apply(self, sch: Schedule) -> None:
        S.cache_write(sch, sch.stage(self.stage), self.scope)


@dataclass(frozen=True)
class CacheReadStep(Step):
    """Copy ``tensor`` into a local buffer (``<tensor>_local``) read by ``readers``, optionally
    with permuted dims; place it with a ComputeAtStep."""

    tensor: str
    readers: tuple[str, ...]
    layout: tuple[int, ...] | None = None
    scope: str = "local"
    kind: ClassVar[str] = "cache_read"

    def apply(self, sch: Schedule) -> None:
        S.cache_read(sch, self.tensor, [sch.stage(r) for r in self.readers], self.layout, self.scope)


@dataclass(frozen=True)
class StoragePadStep(Step):
    """Pad the innermost dim of a cache stage's buffer (against shared-memory bank conflicts)."""

    stage: str
    pad: int
    kind: ClassVar[str] = "storage_pad"

    def apply(self, sch: Schedule) -> None:
        S.storage_pad(sch.stage(self.stage), self.pad)


@dataclass(frozen=True)
class PipelineStep(Step):
    """Fill the shared-memory copies computed at ``loop`` of ``stage`` ``stages - 1`` iterations
    ahead, into a ring of ``stages`` tiles (``cp.async`` on CUDA; ``state.pipeline``)."""

    stage: str
    loop: str
    stages: int
    kind: ClassVar[str] = "pipeline"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        S.pipeline(st, st.loop(self.loop), self.stages)


@dataclass(frozen=True)
class TensorizeStep(Step):
    """Compute the reduction ``stage`` (a matrix product, ``schedule.tensorize.gemm_view``) with
    warp-level tensor-core instructions: block and warp tiles, a ``stages``-deep cp.async
    pipeline, swizzled shared tiles, split-K (``codegen.tensorcore``). It replaces the stage's
    loop nest, so it is the stage's only step."""

    stage: str
    block_m: int
    block_n: int
    block_k: int
    warp_m: int
    warp_n: int
    stages: int = 2
    swizzle: int = 1
    split_k: int = 1
    kind: ClassVar[str] = "tensorize"

    def apply(self, sch: Schedule) -> None:
        st = sch.stage(self.stage)
        if st.relations or st.annotations or st.attached_here or not st.is_output:
            raise ScheduleError(f"tensorize: {self.stage} must be an untouched output stage")
        st.tensorize = self

    @property
    def tile(self):  # noqa: ANN201 - codegen.tensorcore.TensorCoreTile
        from ..codegen.tensorcore import TensorCoreTile

        return TensorCoreTile(self.block_m, self.block_n, self.block_k, self.warp_m, self.warp_n,
                              self.stages, self.swizzle, self.split_k)


STEP_TYPES: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        SplitStep,
        TileStep,
        ReorderStep,
        FuseStep,
        AnnotateStep,
        ComputeAtStep,
        ComputeInlineStep,
        CacheWriteStep,
        CacheReadStep,
        StoragePadStep,
        PipelineStep,
        TensorizeStep,
    )
}


def step_from_dict(d: dict) -> Step:
    """Inverse of :meth:`Step.to_dict`."""
    d = dict(d)
    cls = STEP_TYPES.get(d.pop("step", None))
    if cls is None:
        raise ScheduleError(f"unknown step {d!r}")
    kwargs = {}
    for f in fields(cls):
        if f.name in d:
            v = d[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


def apply_steps(outputs: Sequence[Tensor], steps: Sequence[Step]) -> Schedule:
    """A fresh schedule of ``outputs`` with ``steps`` replayed in order."""
    sch = Schedule(list(outputs))
    for step in steps:
        step.apply(sch)
    return sch
