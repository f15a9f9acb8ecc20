"""Register promotion: the accumulators of a reduction loop marked ``registers`` live in registers.

After unrolling and vectorization the innermost reduction loop of a tiled contraction is a
straight run of updates ``acc[c_i] = acc[c_i] + a * b`` whose accumulator addresses do not move
with the loop. Left as memory operations, the C compiler decides for itself whether they stay in
registers for the whole loop; GCC often interchanges loops instead, or reloads and stores the
accumulator tile every few steps. For a loop the schedule marks ``registers`` (the CPU knob of the
same name) this pass makes it explicit: each accumulator element (a vector, or a scalar) is loaded
into a ``register`` buffer before the loop, updated there, and stored back after it. Whether that
is faster depends on the tile (measured: bench/cpu_kernels/registers), so it is a knob, not a default.

A loop qualifies when it holds only stores (and prefetch hints), directly or in serial loops
nested inside (the rest of a multi-axis reduction tile: a convolution's channel and window
loops), every store goes to a ``local`` buffer at an address none of those loops moves, all
stores to one buffer share one base and sit at constant offsets that either coincide or do not
overlap, and every read of those buffers in the nest is one of the stored elements. A marked
loop that does not qualify stays a plain loop.
"""

from __future__ import annotations

import itertools
from typing import Iterator

from ..te.expr import Expr, IntImm, Var
from .nodes import (
    Allocate,
    Buffer,
    For,
    IfThen,
    Load,
    Prefetch,
    Seq,
    Stmt,
    Store,
    VLoad,
    VStore,
    seq,
)
from .simplify import linear
from .visit import map_deep, walk_deep

MAX_REGISTERS = 16  # accumulators promoted per loop by default (Target.accumulator_registers)

Slot = tuple[int, tuple, int, int]  # (buffer id, non-constant part of the address, offset, lanes)


def _reads(e: Expr) -> list[Load | VLoad]:
    return [n for n in walk_deep(e) if isinstance(n, (Load, VLoad))]


def _mentions(e: Expr, var: Var) -> bool:
    return any(n is var for n in walk_deep(e))


def _slot(buffer: Buffer, index: Expr, lanes: int) -> Slot:
    lin = linear(index, {})
    terms = tuple(sorted((k, c) for k, (_, c) in lin.terms.items()))
    return (id(buffer), terms, lin.const, lanes)


def _may_alias(slots: list[Slot]) -> bool:
    """Two different slots that might share an element: on one buffer, with different non-constant
    parts (not comparable), or the same part and intersecting constant ranges."""
    for a, b in itertools.combinations(set(slots), 2):
        if a[0] == b[0] and (a[1] != b[1] or (a[2] < b[2] + b[3] and b[2] < a[2] + a[3])):
            return True
    return False


def _nest(s: Stmt, loop_vars: list[Var]) -> list[Store | VStore] | None:
    """The stores of a nest of serial loops whose leaves are only stores (and prefetch hints),
    collecting the loop variables; None if anything else is inside."""
    if isinstance(s, Seq):
        parts = [_nest(c, loop_vars) for c in s.stmts]
        if any(p is None for p in parts):
            return None
        return [x for p in parts if p is not None for x in p]
    if isinstance(s, For) and s.kind in ("serial", "registers"):
        loop_vars.append(s.var)
        return _nest(s.body, loop_vars)
    if isinstance(s, (Store, VStore)):
        return [s]
    return [] if isinstance(s, Prefetch) else None


def _address(s: Store | VStore | Load | VLoad) -> tuple[Expr, int]:
    if isinstance(s, (Store, Load)):
        return s.index, 1
    return s.base, s.lanes


def _promote(loop: For, max_registers: int, names: Iterator[int]) -> Stmt | None:
    loop_vars: list[Var] = []
    stores = _nest(loop, loop_vars)
    if not stores:
        return None
    where: dict[Slot, tuple[Buffer, Expr]] = {}
    for s in stores:
        index, lanes = _address(s)
        if s.buffer.scope != "local" or any(_mentions(index, v) for v in loop_vars):
            return None
        where.setdefault(_slot(s.buffer, index, lanes), (s.buffer, index))
    if len(where) > max_registers or _may_alias(list(where)):
        return None
    promoted = {slot[0] for slot in where}
    for s in stores:
        for r in _reads(s.value):
            if id(r.buffer) in promoted and _slot(r.buffer, *_address(r)) not in where:
                return None
    regs = {slot: Buffer(f"{buf.name}_r{next(names)}", buf.dtype, (slot[3],), "register")
            for slot, (buf, _) in where.items()}

    def read(x: Expr) -> Expr | None:
        if isinstance(x, (Load, VLoad)) and id(x.buffer) in promoted:
            index, lanes = _address(x)
            return _read(regs[_slot(x.buffer, index, lanes)], IntImm(0), lanes)
        return None

    def rewrite(s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            return Seq([rewrite(c) for c in s.stmts])
        if isinstance(s, For):
            return For(s.var, s.extent, rewrite(s.body))  # a "registers" loop becomes a plain one
        if isinstance(s, (Store, VStore)):
            index, lanes = _address(s)
            return _write(regs[_slot(s.buffer, index, lanes)], IntImm(0), map_deep(s.value, read), lanes)
        return s

    loads = [_write(regs[slot], IntImm(0), _read(buf, index, slot[3]), slot[3])
             for slot, (buf, index) in where.items()]
    stores_back = [_write(buf, index, _read(regs[slot], IntImm(0), slot[3]), slot[3])
                   for slot, (buf, index) in where.items()]
    out: Stmt = seq(*loads, rewrite(loop), *stores_back)
    for reg in reversed(list(regs.values())):
        out = Allocate(reg, out)
    return out


def _read(buf: Buffer, index: Expr, lanes: int) -> Expr:
    return Load(buf, index) if lanes == 1 else VLoad(buf, index, lanes)


def _write(buf: Buffer, index: Expr, value: Expr, lanes: int) -> Stmt:
    return Store(buf, index, value) if lanes == 1 else VStore(buf, index, value, lanes)


def promote_accumulators(s: Stmt, max_registers: int = MAX_REGISTERS) -> Stmt:
    """Keep the accumulators of every qualifying ``registers`` loop in registers (see the module
    doc); every ``registers`` loop comes back ``serial``. Registers are named ``<buffer>_r<n>``,
    numbered in program order."""
    names = itertools.count()

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            return Seq([visit(c) for c in s.stmts])
        if isinstance(s, For):
            if s.kind == "registers":
                done = _promote(s, max_registers, names)
                if done is not None:
                    return done
            kind = "serial" if s.kind == "registers" else s.kind
            return For(s.var, s.extent, visit(s.body), kind)
        if isinstance(s, IfThen):
            return IfThen(s.cond, visit(s.body))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, visit(s.body))
        return s

    return visit(s)
