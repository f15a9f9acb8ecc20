"""Run GPU-lowered kernels on the CPU: OpenMP threads play one block's threads.

The same lowered kernels that become CUDA are rendered as C: blocks run one after another, a block's
threads are an OpenMP team (``omp_get_thread_num()`` is ``threadIdx.x``), ``__syncthreads()`` is an
OpenMP barrier, shared buffers are declared once per block outside the team, local ones inside it;
each thread queues its ``cp.async`` copies until a wait retires them (``codegen.cp_async``).
This checks the GPU lowering (thread binding, shared-memory regions, barriers, float4 paths) on any
machine, CI included; it says nothing about GPU speed.
"""

from __future__ import annotations

from ..ir.nodes import Allocate, AllReduce, Barrier, Buffer, For, Seq, Stmt, allocated
from .c_base import C_TYPES
from .cp_async import EMULATION_CP_ASYNC, EMULATION_QUEUE_DECL, EMULATION_QUEUE_FREE
from .cpu import CpuRenderer


class CudaEmulationRenderer(CpuRenderer):
    """C for GPU kernels; ``render_program`` gives one ``void name(void** args)`` entry point."""

    def __init__(self) -> None:
        super().__init__(lanes=4)
        self.block_dims: dict[str, int] = {}
        self.threads = 1
        self.in_team = False

    def render_program(self, name: str, kernels: list, args: list[Buffer], workspace: list[Buffer]) -> str:
        lines = ["#include <omp.h>", f"void {name}(void** args) {{"]
        lines += ["  " + line for line in self.unpack_args_list(args)]
        for b in workspace:
            alloc, _ = self.heap_alloc(b)
            lines.append("  " + alloc)
        for k in kernels:
            self.block_dims, self.threads, self.in_team = dict(k.block), max(k.threads, 1), False
            # each kernel in its own scope: its team's declarations must not meet the next one's
            lines.append(f"  {{ /* kernel {k.name} grid={k.grid} block={k.block} */")
            if any(isinstance(n, For) and n.kind.startswith("blockIdx") for n in _top_loops(k.body)):
                lines += self.stmt(k.body, 2)
            else:
                lines += self._team(k.body, 2)
            lines.append("  }")
        lines += [f"  free({b.name});" for b in workspace]
        lines.append("}")
        return self.with_prelude(EMULATION_CP_ASYNC + "\n".join(lines) + "\n")

    def unpack_args_list(self, args: list[Buffer]) -> list[str]:
        return [
            f"{C_TYPES[b.dtype]}* {self.restrict} {b.name} = ({C_TYPES[b.dtype]}*)args[{i}];"
            for i, b in enumerate(args)
        ]

    def _team(self, body: Stmt, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        decls = [
            f"{pad}{C_TYPES[b.dtype]} {b.name}[{b.size}] __attribute__((aligned(64)));"
            for b in allocated(body, "shared")
        ]
        decls.append(f"{pad}float at_red[{self.threads}];")
        self.in_team = True
        inner = self.stmt(body, depth + 1)
        self.in_team = False
        return (
            decls
            + [
                f"{pad}#pragma omp parallel num_threads({self.threads})",
                pad + "{",
                f"{pad}  int at_tx = omp_get_thread_num();",
                f"{pad}  {EMULATION_QUEUE_DECL}",
            ]
            + inner
            + [f"{pad}  {EMULATION_QUEUE_FREE}", pad + "}"]
        )

    def stmt(self, s: Stmt, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        if isinstance(s, For) and s.kind.startswith("blockIdx"):
            v = s.var.name
            return (
                [f"{pad}for (int {v} = 0; {v} < {s.extent}; ++{v}) {{"]
                + self._team(s.body, depth + 1)
                + [pad + "}"]
            )
        if isinstance(s, For) and s.kind.startswith("threadIdx"):
            if s.kind != "threadIdx.x":
                raise NotImplementedError("the emulation runs 1-D thread blocks (threadIdx.x)")
            return self.bound_loop(s, depth, "at_tx", self.block_dims.get(s.kind, s.extent))
        if isinstance(s, Barrier):
            return [f"{pad}#pragma omp barrier"]
        if isinstance(s, AllReduce):
            comb = {"sum": "({a} + {b})", "max": "fmax({a}, {b})", "min": "fmin({a}, {b})"}[s.combiner]
            ref = f"{s.buffer.name}[{self.expr(s.index)}]"
            return [
                f"{pad}at_red[at_tx] = {ref};",
                f"{pad}#pragma omp barrier",
                f"{pad}{{",
                f"{pad}  float at_v = at_red[0];",
                f"{pad}  for (int at_w = 1; at_w < {self.threads}; ++at_w) at_v = "
                + comb.format(a="at_v", b="at_red[at_w]")
                + ";",
                f"{pad}  #pragma omp barrier",
                f"{pad}  {ref} = at_v;",
                f"{pad}}}",
            ]
        if isinstance(s, Allocate) and s.buffer.scope == "shared":
            return self.stmt(s.body, depth)  # declared once per block, outside the team
        if isinstance(s, For) and s.kind == "vthread":
            return super().stmt(For(s.var, s.extent, s.body, "serial"), depth)
        return super().stmt(s, depth)

    def loop_pragma(self, s: For) -> str | None:
        if s.kind == "parallel" or (self.in_team and s.kind == "simd"):
            return None  # no nested OpenMP constructs inside the team
        return super().loop_pragma(s)


def _top_loops(s: Stmt) -> list[Stmt]:
    if isinstance(s, Seq):
        return [n for c in s.stmts for n in _top_loops(c)]
    if isinstance(s, Allocate):
        return _top_loops(s.body)
    return [s]
