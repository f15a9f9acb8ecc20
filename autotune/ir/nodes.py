"""Loop-nest IR: flat buffers, loads, stores, loops, guards and vector forms.

Expressions reuse the te nodes (autotune.te.expr); this module adds the memory-level ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..te.expr import Expr, Var

if TYPE_CHECKING:
    from ..prepack import PrepackSpec


@dataclass(eq=False)
class Buffer:
    """A flat array. ``scope`` is "arg" (kernel argument), "global" (kernel-owned heap) or "local".
    An argument with ``prepack`` holds its operand in that tiled layout (``autotune.prepack``)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "arg"
    prepack: PrepackSpec | None = None
    # a shared buffer of a software pipeline: ``slots`` copies of its tile (its leading dim), filled
    # by asynchronous copies issued ``slots - 1`` iterations ahead of their readers
    slots: int = 1

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        return self.name


class Load(Expr):
    """Scalar read of ``buffer[index]``."""

    __slots__ = ("buffer", "index", "dtype")

    def __init__(self, buffer: Buffer, index: Expr) -> None:
        self.buffer, self.index, self.dtype = buffer, index, buffer.dtype

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{self.index!r}]"


class VLoad(Expr):
    """Contiguous vector read of ``lanes`` elements starting at ``buffer[base]``."""

    __slots__ = ("buffer", "base", "lanes", "dtype")

    def __init__(self, buffer: Buffer, base: Expr, lanes: int) -> None:
        self.buffer, self.base, self.lanes, self.dtype = buffer, base, lanes, buffer.dtype

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{self.base!r} : +{self.lanes}]"


class Broadcast(Expr):
    __slots__ = ("value", "lanes", "dtype")

    def __init__(self, value: Expr, lanes: int) -> None:
        self.value, self.lanes, self.dtype = value, lanes, value.dtype

    def __repr__(self) -> str:
        return f"x{self.lanes}({self.value!r})"


class VBinary(Expr):
    """Lane-wise arithmetic on vectors (add sub mul div max min)."""

    __slots__ = ("op", "a", "b", "lanes", "dtype")

    def __init__(self, op: str, a: Expr, b: Expr, lanes: int) -> None:
        self.op, self.a, self.b, self.lanes, self.dtype = op, a, b, lanes, a.dtype

    def __repr__(self) -> str:
        return f"v{self.op}({self.a!r}, {self.b!r})"


class VCall(Expr):
    """A math function on every lane (``exp``): the renderers supply vector versions."""

    __slots__ = ("name", "arg", "lanes", "dtype")

    def __init__(self, name: str, arg: Expr, lanes: int) -> None:
        self.name, self.arg, self.lanes, self.dtype = name, arg, lanes, arg.dtype

    def __repr__(self) -> str:
        return f"v{self.name}({self.arg!r})"


class VCompare(Expr):
    """A lane-wise condition (a mask): a comparison of two float vectors (lt le eq ne), or masks
    combined (and, or; not with ``b`` None)."""

    __slots__ = ("op", "a", "b", "lanes", "dtype")

    def __init__(self, op: str, a: Expr, b: Expr | None, lanes: int) -> None:
        self.op, self.a, self.b, self.lanes, self.dtype = op, a, b, lanes, "bool"

    def __repr__(self) -> str:
        return f"vcmp_{self.op}({self.a!r}, {self.b!r})"


class VSelect(Expr):
    """Lane-wise choice between two vectors under one scalar (lane-invariant) condition, or under
    a mask (a ``VCompare``)."""

    __slots__ = ("cond", "t", "f", "lanes", "dtype")

    def __init__(self, cond: Expr, t: Expr, f: Expr, lanes: int) -> None:
        self.cond, self.t, self.f, self.lanes, self.dtype = cond, t, f, lanes, t.dtype

    def __repr__(self) -> str:
        return f"vselect({self.cond!r}, {self.t!r}, {self.f!r})"


class VReduce(Expr):
    """The lanes of a vector combined into one scalar (sum / max / min): the end of a reduction
    whose lanes accumulated separately."""

    __slots__ = ("op", "arg", "dtype")

    def __init__(self, op: str, arg: Expr) -> None:
        self.op, self.arg, self.dtype = op, arg, arg.dtype

    def __repr__(self) -> str:
        return f"reduce_{self.op}({self.arg!r})"


class Gather(Expr):
    """A vector assembled from scalar expressions, one a lane."""

    __slots__ = ("elems", "lanes", "dtype")

    def __init__(self, elems: tuple[Expr, ...]) -> None:
        self.elems, self.lanes, self.dtype = elems, len(elems), elems[0].dtype

    def __repr__(self) -> str:
        return f"gather({', '.join(map(repr, self.elems))})"


class Stmt:
    """Base class of statements."""


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class VStore(Stmt):
    buffer: Buffer
    base: Expr
    value: Expr
    lanes: int


@dataclass(eq=False)
class For(Stmt):
    """A loop ``var`` over ``[0, extent)``; kind: serial, parallel, vectorize, unroll."""

    var: Var
    extent: int
    body: Stmt
    kind: str = "serial"


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class IfThen(Stmt):
    cond: Expr
    body: Stmt


@dataclass(eq=False)
class Barrier(Stmt):
    """All threads of a GPU block wait here (``__syncthreads``)."""


@dataclass(eq=False)
class AsyncCopy(Stmt):
    """``dst[dst_index : +lanes] = src[src_index : +lanes]`` started now and complete only after an
    ``AsyncWait`` that retires its group (``cp.async``); where ``valid`` is false the destination is
    zero-filled and nothing is read (``src_index`` must still be in range)."""

    dst: Buffer
    dst_index: Expr
    src: Buffer
    src_index: Expr
    lanes: int = 1
    valid: Expr | None = None


@dataclass(eq=False)
class AsyncCommit(Stmt):
    """The asynchronous copies this thread started since the last commit form one group."""


@dataclass(eq=False)
class AsyncWait(Stmt):
    """Wait until at most ``pending`` of this thread's committed groups are incomplete (the others'
    copies are done; a barrier after it makes them visible to the block)."""

    pending: int


@dataclass(eq=False)
class AllReduce(Stmt):
    """Combine ``buffer[index]`` across the threads of a block (threadIdx.x); every thread gets
    the result back in its own ``buffer[index]`` (a cross-thread reduction)."""

    buffer: Buffer
    index: Expr
    combiner: str  # sum / max / min


@dataclass(eq=False)
class Prefetch(Stmt):
    """A cache hint: start bringing the line that holds ``buffer[index]`` into the cache (CPU;
    no effect on results). The lowering keeps ``index`` inside the buffer."""

    buffer: Buffer
    index: Expr


@dataclass(eq=False)
class Allocate(Stmt):
    """A buffer that lives for ``body``: a stack array (local; registers on GPU), GPU shared memory
    (shared) or a kernel-owned heap / workspace buffer (global)."""

    buffer: Buffer
    body: Stmt


def allocated(s: Stmt, scope: str) -> list[Buffer]:
    """The buffers of ``scope`` allocated anywhere in ``s``, each once, outermost first."""
    out: list[Buffer] = []
    todo = [s]
    while todo:
        n = todo.pop(0)
        if isinstance(n, Seq):
            todo[:0] = n.stmts
        elif isinstance(n, (For, IfThen)):
            todo.insert(0, n.body)
        elif isinstance(n, Allocate):
            if n.buffer.scope == scope and n.buffer not in out:
                out.append(n.buffer)
            todo.insert(0, n.body)
    return out


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement sequence with nested sequences flattened and empty parts dropped."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(flat)


@dataclass(eq=False)
class PrimFunc:
    """A lowered kernel: its arguments (buffers in order) and body."""

    name: str
    args: list[Buffer]
    body: Stmt

    def __str__(self) -> str:
        from .printer import format_func

        return format_func(self)
