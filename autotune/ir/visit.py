"""Walking and rewriting expressions that mix te nodes with the IR's loads and vector nodes."""

from __future__ import annotations

from typing import Callable, Iterator

from ..te.expr import Expr, children, rebuild
from .nodes import Broadcast, Gather, Load, VBinary, VCall, VCompare, VLoad, VReduce, VSelect


def ir_children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, IR nodes included (a load's index, a vector op's operands)."""
    if isinstance(e, Load):
        return (e.index,)
    if isinstance(e, VLoad):
        return (e.base,)
    if isinstance(e, Broadcast):
        return (e.value,)
    if isinstance(e, VBinary):
        return (e.a, e.b)
    if isinstance(e, (VCall, VReduce)):
        return (e.arg,)
    if isinstance(e, VSelect):
        return (e.cond, e.t, e.f)
    if isinstance(e, VCompare):
        return (e.a,) if e.b is None else (e.a, e.b)
    if isinstance(e, Gather):
        return tuple(e.elems)
    return tuple(children(e))


def walk_deep(e: Expr) -> Iterator[Expr]:
    """Every node of an expression, pre-order, reaching into loads and vector nodes."""
    yield e
    for c in ir_children(e):
        yield from walk_deep(c)


def map_deep(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """A copy of ``e`` where every node for which ``fn`` returns an expression is replaced by it
    (the replacement is not visited again); reaches into loads and vector nodes."""
    hit = fn(e)
    if hit is not None:
        return hit
    kids = ir_children(e)
    if not kids:
        return e
    new = tuple(map_deep(k, fn) for k in kids)
    if isinstance(e, Load):
        return Load(e.buffer, new[0])
    if isinstance(e, VLoad):
        return VLoad(e.buffer, new[0], e.lanes)
    if isinstance(e, Broadcast):
        return Broadcast(new[0], e.lanes)
    if isinstance(e, VBinary):
        return VBinary(e.op, new[0], new[1], e.lanes)
    if isinstance(e, VCall):
        return VCall(e.name, new[0], e.lanes)
    if isinstance(e, VReduce):
        return VReduce(e.op, new[0])
    if isinstance(e, VSelect):
        return VSelect(new[0], new[1], new[2], e.lanes)
    if isinstance(e, VCompare):
        return VCompare(e.op, new[0], new[1] if e.b is not None else None, e.lanes)
    if isinstance(e, Gather):
        return Gather(new)
    return e if all(n is k for n, k in zip(new, kids)) else rebuild(e, new)
