"""Readable loop-nest text of a lowered kernel (``print(func)``)."""

from __future__ import annotations

from .nodes import (
    Allocate,
    AllReduce,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    For,
    IfThen,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    VStore,
)


def format_stmt(s: Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, Seq):
        return [line for c in s.stmts for line in format_stmt(c, indent)]
    if isinstance(s, For):
        tag = "" if s.kind == "serial" else f" {s.kind}"
        return [f"{pad}for {s.var.name} in 0..{s.extent}{tag}:"] + format_stmt(s.body, indent + 1)
    if isinstance(s, IfThen):
        return [f"{pad}if {s.cond!r}:"] + format_stmt(s.body, indent + 1)
    if isinstance(s, Allocate):
        b = s.buffer
        head = f"{pad}allocate {b.name}[{b.size}] {b.dtype} {b.scope}"
        return [head] + format_stmt(s.body, indent)
    if isinstance(s, Barrier):
        return [f"{pad}barrier"]
    if isinstance(s, AllReduce):
        return [f"{pad}{s.buffer.name}[{s.index!r}] = allreduce_{s.combiner}(threadIdx.x)"]
    if isinstance(s, Prefetch):
        return [f"{pad}prefetch {s.buffer.name}[{s.index!r}]"]
    if isinstance(s, Store):
        return [f"{pad}{s.buffer.name}[{s.index!r}] = {s.value!r}"]
    if isinstance(s, VStore):
        return [f"{pad}{s.buffer.name}[{s.base!r} : +{s.lanes}] = {s.value!r}"]
    if isinstance(s, AsyncCopy):
        when = "" if s.valid is None else f" if {s.valid!r} else 0"
        src = f"{s.src.name}[{s.src_index!r}]"
        return [f"{pad}{s.dst.name}[{s.dst_index!r} : +{s.lanes}] <- async {src}{when}"]
    if isinstance(s, AsyncCommit):
        return [f"{pad}async commit"]
    if isinstance(s, AsyncWait):
        return [f"{pad}async wait (at most {s.pending} pending)"]
    raise TypeError(f"unknown statement {type(s).__name__}")


def format_func(f: PrimFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.args)
    return "\n".join([f"kernel {f.name}({args}):"] + format_stmt(f.body, 1))
