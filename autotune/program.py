"""From (workload, schedule steps, target) to lowered IR and source code: the path every backend,
the cost model and the graph compiler share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .codegen import CpuRenderer, CudaRenderer
from .ir import PrimFunc, lower, optimize
from .ir.lower import lower_stages
from .ir.nodes import (
    Allocate,
    AsyncCopy,
    Buffer,
    For,
    IfThen,
    Load,
    Seq,
    Stmt,
    Store,
    VLoad,
    VStore,
    allocated,
)
from .ir.passes import (
    _walk_deep,
    async_copies,
    check_parallel,
    map_exprs,
    simplify_stmt,
    unroll_loops,
    vectorize_loops,
)
from .ir.printer import format_stmt
from .prepack import PrepackSpec
from .schedule import ScheduleError, Step, TensorizeStep, apply_steps
from .target import Target
from .te import Workload
from .te.expr import Expr


@dataclass(frozen=True)
class Program:
    """A scheduled, lowered and rendered kernel."""

    kernel_name: str
    func: PrimFunc
    source: str

    @property
    def prepack(self) -> tuple[tuple[int, PrepackSpec], ...]:
        """(argument index, layout) of every operand the kernel reads pre-tiled."""
        return tuple((i, b.prepack) for i, b in enumerate(self.func.args) if b.prepack is not None)


def kernel_name(workload: Workload) -> str:
    return f"{workload.name}_{workload.key[:10]}"


OutView = tuple[tuple[int, ...], tuple[int, ...]]  # (shape of the buffer written, start in it)


def lower_program(workload: Workload, steps: Sequence[Step], target: Target,
                  out_view: OutView | None = None) -> PrimFunc:
    """Apply the steps and lower; raises ScheduleError for an illegal schedule. With ``out_view``
    the output is written into a buffer of that shape at that start (a slice of a concatenation);
    the kernel's name then says so."""
    sch = apply_steps(workload.outputs, steps)
    name = kernel_name(workload)
    views = {}
    if out_view is not None:
        views = {len(workload.args) - 1: out_view}
        name += "_into_" + "x".join(map(str, out_view[0])) + "_at_" + "_".join(map(str, out_view[1]))
    func = lower(sch, workload.args, name, views=views)
    return optimize(func, target.vector_lanes, max_registers=target.accumulator_registers)


def build_program(workload: Workload, steps: Sequence[Step], target: Target,
                  out_view: OutView | None = None) -> Program:
    """Lowered IR and rendered source of one schedule (CPU); ``out_view`` as in lower_program."""
    if target.kind != "cpu":
        raise NotImplementedError(
            f"build_program is the CPU path; use build_cuda_program for {target.kind!r}"
        )
    func = lower_program(workload, steps, target, out_view)
    return Program(func.name, func, CpuRenderer(target.vector_lanes).render(func))


@dataclass(frozen=True)
class CudaKernelPlan:
    """One kernel of a CUDA program: its name, launch shape and buffer arguments."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: tuple[str, ...]
    shared_bytes: int = 0  # dynamic shared memory (above 48 KiB the runner opts in)


@dataclass(frozen=True)
class CudaSource:
    """A rendered CUDA program: source, kernels in launch order, buffers (args then workspace)."""

    source: str
    kernels: tuple[CudaKernelPlan, ...]
    buffers: tuple[Buffer, ...]
    n_args: int
    lowered: str

    def launch_plan(self):  # noqa: ANN201 - autotune.measure.cuda_builder.CudaProgram
        """The measurement-side description (kernel params as buffer indices)."""
        from .measure.cuda_builder import CudaProgram, Launch

        index = {b.name: i for i, b in enumerate(self.buffers)}
        launches = tuple(
            Launch(k.name, k.grid, k.block, tuple(index[p] for p in k.params), k.shared_bytes)
            for k in self.kernels
        )
        workspace = tuple(b.size * 4 for b in self.buffers[self.n_args :])
        return CudaProgram(self.source, launches, workspace)


_AXES = "xyz"


def _launch_dims(s: Stmt) -> tuple[dict[str, int], dict[str, int]]:
    grid: dict[str, int] = {}
    block: dict[str, int] = {}
    todo = [s]
    while todo:
        n = todo.pop()
        if isinstance(n, Seq):
            todo.extend(n.stmts)
        elif isinstance(n, (IfThen, Allocate)):
            todo.append(n.body)
        elif isinstance(n, For):
            if n.kind.startswith("blockIdx."):
                grid[n.kind] = max(grid.get(n.kind, 1), n.extent)
            elif n.kind.startswith("threadIdx."):
                block[n.kind] = max(block.get(n.kind, 1), n.extent)
            todo.append(n.body)
    return grid, block


def _buffers_used(s: Stmt) -> set[str]:
    names: set[str] = set()

    def visit(e: Expr) -> Expr:
        for n in _walk_deep(e):
            if isinstance(n, (Load, VLoad)):
                names.add(n.buffer.name)
        return e

    def stmts(n: Stmt) -> None:
        if isinstance(n, (Store, VStore)):
            names.add(n.buffer.name)
        if isinstance(n, AsyncCopy):
            names.update((n.dst.name, n.src.name))
        if isinstance(n, Seq):
            for c in n.stmts:
                stmts(c)
        elif isinstance(n, (For, IfThen, Allocate)):
            stmts(n.body)

    map_exprs(s, visit)
    stmts(s)
    return names


@dataclass(frozen=True)
class GpuKernel:
    """One lowered GPU kernel before rendering."""

    name: str
    body: Stmt
    params: tuple[Buffer, ...]
    grid: dict
    block: dict

    @property
    def threads(self) -> int:
        n = 1
        for v in self.block.values():
            n *= v
        return n


def lower_cuda_kernels(
    workload: Workload, steps: Sequence[Step], target: Target
) -> tuple[list[GpuKernel], list[Buffer], list[Buffer]]:
    """(kernels in launch order, argument buffers, workspace buffers): one kernel per root stage."""
    sch = apply_steps(workload.outputs, steps)
    args, heap, nests = lower_stages(sch, workload.args)
    if any(b.prepack is not None for b in args):
        raise ScheduleError("prepacked operands are a CPU schedule feature")
    base = kernel_name(workload)
    kernels = []
    for i, nest in enumerate(nests):
        check_parallel(nest)
        body = unroll_loops(nest, 64)
        body = simplify_stmt(body) or Seq([])
        body = vectorize_loops(body, target.vector_lanes)
        body = async_copies(simplify_stmt(body) or Seq([]))
        grid, block = _launch_dims(body)
        k = GpuKernel(
            f"{base}_k{i}", body, tuple(b for b in args + heap if b.name in _buffers_used(body)), grid, block
        )
        if k.threads > int(target.fingerprint.get("max_threads_per_block", 1024)):
            raise ScheduleError(f"{k.threads} threads per block exceed the device limit")
        kernels.append(k)
    return kernels, args, heap


def _tensorized(workload: Workload, steps: Sequence[Step], target: Target):  # noqa: ANN202
    """(GemmView, TensorizeStep) when the schedule tensorizes the workload's product, else None;
    raises ScheduleError for a tensorize step that cannot apply."""
    from .codegen.tensorcore import tile_problem
    from .schedule.tensorize import product_view

    tz = [s for s in steps if isinstance(s, TensorizeStep)]
    if not tz:
        return None
    if len(workload.outputs) != 1 or len(steps) != 1:
        raise ScheduleError("tensorize: the schedule must be one tensorize step of a single-output product")
    apply_steps(workload.outputs, steps)
    view = product_view(workload)
    if view is None:
        raise ScheduleError("tensorize: not a matrix product in float16/bfloat16/TF32")
    fp = target.fingerprint
    limit = int(fp.get("max_shared_per_block_optin", fp.get("max_shared_per_block", 49152)))
    why = tile_problem(view, tz[0].tile, limit, int(fp.get("max_threads_per_block", 1024)))
    if why:
        raise ScheduleError(f"tensorize: {why}")
    return view, tz[0]


def _tensor_core_program(workload: Workload, view, step, target: Target) -> CudaSource:  # noqa: ANN001
    from .codegen.tensorcore import launch_shape, render_cuda, shared_bytes, splitk_name

    name = kernel_name(workload)
    tile = step.tile
    args = [Buffer(t.name, t.dtype, t.shape) for t in workload.args]
    heap = [Buffer("at_ws", "float32", (view.batch * tile.split_k * view.m * view.n,), "global")]
    heap = heap if tile.split_k > 1 else []
    grid, block = launch_shape(view, tile)
    names = tuple(b.name for b in args + heap)
    plans = [CudaKernelPlan(name, grid, block, names, shared_bytes(view, tile))]
    if tile.split_k > 1:
        total = view.batch * view.m * view.n
        plans.append(CudaKernelPlan(splitk_name(name), (-(-total // 256), 1, 1), (256, 1, 1),
                                    (heap[0].name, *(b.name for b in args))))
    text = f"tensorized {view} with {tile}"
    return CudaSource(render_cuda(view, tile, name), tuple(plans), tuple(args + heap), len(args), text)


def dynamic_shared(body: Stmt) -> tuple[dict[str, int], int]:
    """Where a kernel's shared buffers go: static arrays while they fit the 48 KiB every kernel
    may use ({}, 0), else one dynamic allocation ({name: byte offset}, bytes; the runner opts the
    kernel in up to the device's limit, which the space's constraints respect)."""
    from .measure.cuda_worker import OPT_IN_SHARED_BYTES
    from .te.workload import numpy_dtype

    offsets, total = {}, 0
    for b in allocated(body, "shared"):
        offsets[b.name] = total
        total += -(-b.size * numpy_dtype(b.dtype).itemsize // 16) * 16
    return ({}, 0) if total <= OPT_IN_SHARED_BYTES else (offsets, total)


def build_cuda_program(workload: Workload, steps: Sequence[Step], target: Target) -> CudaSource:
    """Lower a schedule for a GPU and render it as CUDA: one kernel per root stage, in order."""
    tz = _tensorized(workload, steps, target)
    if tz is not None:
        return _tensor_core_program(workload, *tz, target)
    kernels, args, heap = lower_cuda_kernels(workload, steps, target)
    parts, texts, plans = [], [], []
    for k in kernels:
        dynamic, shared = dynamic_shared(k.body)
        parts.append(
            CudaRenderer(k.block, target.vector_lanes, dynamic).render_kernel(
                k.name, list(k.params), k.body, max(k.threads, 1)
            )
        )
        texts.append(f"kernel {k.name} grid={k.grid} block={k.block}:\n" + "\n".join(format_stmt(k.body, 1)))
        plans.append(
            CudaKernelPlan(
                k.name,
                tuple(k.grid.get(f"blockIdx.{a}", 1) for a in _AXES),
                tuple(k.block.get(f"threadIdx.{a}", 1) for a in _AXES),
                tuple(b.name for b in k.params),
                shared,
            )
        )
    source = CudaRenderer().with_prelude("\n\n".join(parts) + "\n")
    return CudaSource(source, tuple(plans), tuple(args + heap), len(args), "\n".join(texts))


def build_cuda_emulation(workload: Workload, steps: Sequence[Step], target: Target) -> Program:
    """The GPU lowering of a schedule rendered as C that runs on the CPU (see
    autotune.codegen.cuda_emulation): same kernel ABI as build_program, for checking GPU schedules
    without a GPU."""
    from .codegen.cuda_emulation import CudaEmulationRenderer

    tz = _tensorized(workload, steps, target)
    if tz is not None:
        from .codegen.tensorcore import render_emulation

        name = kernel_name(workload) + "_emu"
        args = [Buffer(t.name, t.dtype, t.shape) for t in workload.args]
        return Program(name, PrimFunc(name, args, Seq([])), render_emulation(tz[0], tz[1].tile, name))
    kernels, args, heap = lower_cuda_kernels(workload, steps, target)
    name = kernel_name(workload) + "_emu"
    source = CudaEmulationRenderer().render_program(name, kernels, args, heap)
    return Program(name, PrimFunc(name, args, Seq([k.body for k in kernels])), source)
