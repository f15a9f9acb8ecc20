"""Memory planning: where every runtime value lives, and one arena for all intermediates with
lifetime-based reuse.

Storage kinds: ``input`` / ``output`` (the caller's arrays), ``const`` (weights bound at load),
``arena`` (a byte offset into the one intermediate buffer). Aliases (Reshape, Flatten, ...) share
their root's storage. A kernel output whose root is a graph output is written straight into the
caller's output array.

Arena placement is greedy by size (largest first, each at the lowest offset that overlaps no
already placed value alive at the same time), the interval-colouring heuristic TVM and TFLite use.
Lifetimes are inclusive ``[first step, last step]`` so a kernel never writes over its own inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Graph, GraphError
from .ops import ALIAS, op_def
from .tasks import KernelCall

ALIGN = 64


@dataclass(frozen=True)
class Storage:
    kind: str  # input | output | const | arena
    index: int = 0  # input / output / const number, or the arena byte offset

    def __str__(self) -> str:
        return f"{self.kind}[{self.index}]"


@dataclass
class MemoryPlan:
    """Storage of every value the kernels touch, and the arena's size."""

    storage: dict[str, Storage]
    consts: list[str]  # const slot -> value name (root constants only)
    arena_bytes: int  # peak: the arena's size
    naive_bytes: int  # every intermediate in its own buffer
    lifetimes: dict[str, tuple[int, int]] = field(default_factory=dict)
    output_copies: list[tuple[int, str]] = field(default_factory=list)  # (output #, value) filled by copy

    @property
    def reuse_ratio(self) -> float:
        return self.arena_bytes / self.naive_bytes if self.naive_bytes else 0.0

    def describe(self) -> str:
        return (
            f"arena {self.arena_bytes / 2**20:.2f} MiB for {len(self.lifetimes)} intermediates "
            f"({self.naive_bytes / 2**20:.2f} MiB if each had its own buffer, {100 * self.reuse_ratio:.0f}%)"
        )


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def place(intervals: dict[str, tuple[int, int, int]]) -> tuple[dict[str, int], int]:
    """Offsets for values given as ``name -> (first step, last step, bytes)``; returns (offsets,
    peak bytes). Two values overlap in memory only if their lifetimes are disjoint."""
    order = sorted(intervals, key=lambda v: (-intervals[v][2], intervals[v][0], v))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[str, int] = {}
    peak = 0
    for v in order:
        first, last, size = intervals[v]
        size = _align(max(size, 1))
        busy = sorted((o, e) for o, e, f, la in placed if not (la < first or last < f))
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[v] = offset
        placed.append((offset, offset + size, first, last))
        peak = max(peak, offset + size)
    return offsets, peak


def root_of(graph: Graph, value: str) -> str:
    """The value whose storage ``value`` shares (following alias ops back)."""
    producer = graph.producer()
    while value in producer and op_def(producer[value].op).kind == ALIAS:
        value = producer[value].inputs[0]
    return value


def plan_memory(graph: Graph, calls: list[KernelCall]) -> MemoryPlan:
    """Storage for every value read or written by ``calls`` (in execution order) and for the outputs."""
    storage: dict[str, Storage] = {}
    consts: list[str] = []
    for i, v in enumerate(graph.inputs):
        storage[v] = Storage("input", i)
    # a call with a view writes into its slice of another value's buffer: that value's storage
    into = {c.args[-1]: c.view.into for c in calls if c.view is not None}
    kernel_outputs = {into.get(c.args[-1], c.args[-1]) for c in calls}
    copies: list[tuple[int, str]] = []
    for j, o in enumerate(graph.outputs):
        r = root_of(graph, o)
        if r in kernel_outputs and r not in storage:
            storage[r] = Storage("output", j)
        else:
            copies.append((j, o))
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, call in enumerate(calls):
        for v in call.args:
            r = root_of(graph, v)
            r = into.get(r, r)
            if r in graph.consts and r not in storage:
                storage[r] = Storage("const", len(consts))
                consts.append(r)
            first.setdefault(r, step)
            last[r] = step
        out = root_of(graph, call.args[-1])
        if out != call.args[-1]:
            raise GraphError(f"kernel output {call.args[-1]!r} is an alias")
    for _, o in copies:
        r = root_of(graph, o)
        if r in kernel_outputs and storage[r].kind != "output":
            raise GraphError(f"output {o!r} would be read from the arena after it was reused")
    intervals = {
        v: (first[v], last[v], graph.types[v].nbytes)
        for v in first
        if v not in storage and v in kernel_outputs
    }
    offsets, peak = place(intervals)
    for v, off in offsets.items():
        storage[v] = Storage("arena", off)
    for v, whole in into.items():
        storage[v] = storage[whole]
    for v in list(first):
        if v not in storage:
            raise GraphError(f"value {v!r} has no storage")
    naive = sum(_align(graph.types[v].nbytes) for v in intervals)
    lifetimes = {v: (first[v], last[v]) for v in intervals}
    return MemoryPlan(storage, consts, peak, naive, lifetimes, copies)


def storage_of(graph: Graph, plan: MemoryPlan, value: str) -> Storage:
    return plan.storage[root_of(graph, value)]
