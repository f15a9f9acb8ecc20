"""IR passes: simplification with loop ranges, explicit unrolling, vectorization, checks."""

from __future__ import annotations

from typing import Callable

from ..schedule.state import ScheduleError
from ..te.expr import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Binary,
    Call,
    Compare,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
    walk,
)
from .nodes import (
    Allocate,
    AllReduce,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Broadcast,
    Buffer,
    For,
    Gather,
    IfThen,
    Load,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    VBinary,
    VCall,
    VCompare,
    VLoad,
    VReduce,
    VSelect,
    VStore,
    seq,
)
from .registers import promote_accumulators
from .simplify import Ranges, aligned, expr_key, linear, simplify
from .visit import map_deep
from .visit import walk_deep as _walk_deep


def map_exprs(s: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """A copy of ``s`` with ``fn`` applied to every top-level expression."""
    if isinstance(s, Seq):
        return Seq([map_exprs(c, fn) for c in s.stmts])
    if isinstance(s, For):
        return For(s.var, s.extent, map_exprs(s.body, fn), s.kind)
    if isinstance(s, IfThen):
        return IfThen(fn(s.cond), map_exprs(s.body, fn))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, map_exprs(s.body, fn))
    if isinstance(s, Store):
        return Store(s.buffer, fn(s.index), fn(s.value))
    if isinstance(s, VStore):
        return VStore(s.buffer, fn(s.base), fn(s.value), s.lanes)
    if isinstance(s, (Barrier, AsyncCommit, AsyncWait)):
        return s
    if isinstance(s, AllReduce):
        return AllReduce(s.buffer, fn(s.index), s.combiner)
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, fn(s.index))
    if isinstance(s, AsyncCopy):
        valid = None if s.valid is None else fn(s.valid)
        return AsyncCopy(s.dst, fn(s.dst_index), s.src, fn(s.src_index), s.lanes, valid)
    raise TypeError(type(s).__name__)


# --- simplification ---------------------------------------------------------------------------
def simplify_stmt(s: Stmt, ranges: Ranges | None = None) -> Stmt | None:
    """Simplify expressions, drop guards that always hold and code that never runs."""
    ranges = dict(ranges or {})
    if isinstance(s, Seq):
        parts = [simplify_stmt(c, ranges) for c in s.stmts]
        kept = [p for p in parts if p is not None]
        return seq(*kept) if kept else None
    if isinstance(s, For):
        if s.extent == 1:
            body = simplify_stmt(substitute_stmt(s.body, {s.var: IntImm(0)}), ranges)
            if body is not None and s.kind == "parallel":
                return body
            return body
        inner = dict(ranges)
        inner[s.var] = (0, s.extent - 1)
        body = simplify_stmt(s.body, inner)
        return None if body is None else For(s.var, s.extent, body, s.kind)
    if isinstance(s, IfThen):
        cond = simplify(s.cond, ranges)
        if isinstance(cond, IntImm):
            return simplify_stmt(s.body, ranges) if cond.value else None
        body = simplify_stmt(s.body, ranges)
        return None if body is None else IfThen(cond, body)
    if isinstance(s, Allocate):
        body = simplify_stmt(s.body, ranges)
        return None if body is None else Allocate(s.buffer, body)
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges), simplify(s.value, ranges))
    if isinstance(s, VStore):
        return VStore(s.buffer, simplify(s.base, ranges), simplify(s.value, ranges), s.lanes)
    if isinstance(s, (Barrier, AsyncCommit, AsyncWait)):
        return s
    if isinstance(s, AllReduce):
        return AllReduce(s.buffer, simplify(s.index, ranges), s.combiner)
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, simplify(s.index, ranges))
    if isinstance(s, AsyncCopy):
        return map_exprs(s, lambda e: simplify(e, ranges))
    raise TypeError(type(s).__name__)


def substitute_stmt(s: Stmt, mapping: dict[Var, Expr]) -> Stmt:
    return map_exprs(s, lambda e: _subst_deep(e, mapping))


def _subst_deep(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """substitute() that also reaches into loads and vector nodes."""
    return map_deep(e, lambda x: mapping.get(x, x) if isinstance(x, Var) else None)


def simplify_func(f: PrimFunc) -> PrimFunc:
    body = simplify_stmt(f.body)
    return PrimFunc(f.name, f.args, body if body is not None else Seq([]))


# --- unrolling --------------------------------------------------------------------------------
def unroll_loops(s: Stmt, max_extent: int = 64) -> Stmt:
    """Replace loops marked ``unroll`` (extent <= max_extent) by copies of their body."""
    if isinstance(s, Seq):
        return Seq([unroll_loops(c, max_extent) for c in s.stmts])
    if isinstance(s, For):
        body = unroll_loops(s.body, max_extent)
        if s.kind in ("unroll", "vthread") and s.extent <= max_extent:
            return seq(*[substitute_stmt(body, {s.var: IntImm(i)}) for i in range(s.extent)])
        return For(s.var, s.extent, body, s.kind)
    if isinstance(s, IfThen):
        return IfThen(s.cond, unroll_loops(s.body, max_extent))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, unroll_loops(s.body, max_extent))
    return s


# --- vectorization ----------------------------------------------------------------------------
class _NotVectorizable(Exception):
    pass


def _coeff(index: Expr, var: Var) -> tuple[int | None, Expr]:
    """(coefficient of var, rest) when index is linear in var, else (None, index)."""
    lin = linear(index, {})
    coeff = 0
    rest = type(lin)(const=lin.const)
    for key, (atom, c) in lin.terms.items():
        if atom is var:
            coeff = c
        elif var in free_vars_deep(atom):
            return None, index
        else:
            rest.terms[key] = (atom, c)
    return coeff, rest.to_expr()


def free_vars_deep(e: Expr) -> set[Var]:
    return {n for n in _walk_deep(e) if isinstance(n, Var)}


def _invariant(cond: Expr, var: Var) -> bool:
    """Whether ``cond`` is the same on every iteration of ``var``'s loop: it neither names ``var``
    nor reads memory (which the loop may write)."""
    return all(n is not var and not isinstance(n, (Load, VLoad, Gather)) for n in _walk_deep(cond))


VECTOR_CALLS = ("exp", "sigmoid", "tanh", "nearbyint")  # math functions with lane-wise versions


def _vector(e: Expr, lanes: int) -> Expr:
    """``e`` as a vector: itself where it is one, else broadcast to ``lanes``."""
    return e if getattr(e, "lanes", 1) > 1 else Broadcast(e, lanes)


def _vec_expr(e: Expr, var: Var, base: Expr, lanes: int, masks: bool = False) -> Expr:
    """The vector form of ``e`` for lanes var = base + 0 .. base + lanes-1 (scalar if invariant);
    ``masks``: lane-wise conditions allowed."""
    if var not in free_vars_deep(e):
        return e
    if isinstance(e, Load):
        coeff, rest = _coeff(e.index, var)
        if coeff == 1:
            return VLoad(e.buffer, simplify(rest + base), lanes)
        lane_loads = tuple(
            Load(e.buffer, simplify(_subst_deep(e.index, {var: base + IntImm(i)}))) for i in range(lanes)
        )
        if coeff is None and any(var in free_vars_deep(x.index) for x in lane_loads):
            raise _NotVectorizable("load index")
        return Gather(lane_loads)
    if (
        isinstance(e, Binary)
        and e.dtype in FLOAT_DTYPES
        and e.op in ("add", "sub", "mul", "div", "max", "min")
    ):
        a, b = (_vector(_vec_expr(x, var, base, lanes, masks), lanes) for x in (e.a, e.b))
        return VBinary(e.op, a, b, lanes)
    if isinstance(e, Call) and e.name in VECTOR_CALLS and e.dtype == "float32" and len(e.args) == 1:
        return VCall(e.name, _vector(_vec_expr(e.args[0], var, base, lanes, masks), lanes), lanes)
    if isinstance(e, Select) and e.dtype in FLOAT_DTYPES:
        # one condition for every lane (e.g. a padding test on the spatial position of a pool), or
        # a mask where the renderer has them (e.g. Where(IsNaN(x), 0, x) after a softmax)
        cond = e.cond
        if var in free_vars_deep(cond):
            if _same_on_every_lane(cond, var, base, lanes):
                cond = simplify(_subst_deep(cond, {var: base}))
            elif not masks:
                raise _NotVectorizable("lane-wise condition")
            else:
                cond = _vec_mask(cond, var, base, lanes)
        t, f = (_vector(_vec_expr(x, var, base, lanes, masks), lanes) for x in (e.t, e.f))
        return VSelect(cond, t, f, lanes)
    raise _NotVectorizable(type(e).__name__)


def _same_on_every_lane(cond: Expr, var: Var, base: Expr, lanes: int) -> bool:
    """Is an integer condition provably the same for var = base .. base + lanes - 1? So it is for
    ``var + r < k`` when ``base + r - k`` is a multiple of ``lanes``: the chunk starts on a
    boundary of the condition (a concatenation's pieces whose sizes are multiples of the lanes)."""
    if isinstance(cond, Not):
        return _same_on_every_lane(cond.a, var, base, lanes)
    if not isinstance(cond, Compare):
        return False
    if cond.op in ("and", "or"):
        return all(_same_on_every_lane(x, var, base, lanes) for x in (cond.a, cond.b))
    if cond.op not in ("lt", "le") or cond.a.dtype not in INT_DTYPES:
        return False
    coeff, rest = _coeff(Binary("sub", cond.a, cond.b), var)
    if coeff not in (1, -1) or var in free_vars_deep(rest):
        return False
    # lane j holds where coeff * (base + j) + rest < 0 (lt), <= 0 (le); with coeff = -1 it fails
    # where base + j - rest < 0 (lt: <= 0): the first lane of the other side must start a chunk
    first = {(1, "lt"): base + rest, (1, "le"): base + rest - IntImm(1),
             (-1, "lt"): base - rest - IntImm(1), (-1, "le"): base - rest}[(coeff, cond.op)]
    return aligned(simplify(first), lanes)


def _vec_mask(e: Expr, var: Var, base: Expr, lanes: int) -> VCompare:
    """A lane-wise condition (for a renderer with masks): comparisons of float32 values, and, or,
    not."""
    if isinstance(e, Not):
        return VCompare("not", _vec_mask(e.a, var, base, lanes), None, lanes)
    if isinstance(e, Compare) and e.op in ("and", "or"):
        a, b = (_vec_mask(x, var, base, lanes) for x in (e.a, e.b))
        return VCompare(e.op, a, b, lanes)
    if isinstance(e, Compare) and e.a.dtype == e.b.dtype == "float32":
        a, b = (_vector(_vec_expr(x, var, base, lanes, True), lanes) for x in (e.a, e.b))
        return VCompare(e.op, a, b, lanes)
    raise _NotVectorizable(f"condition {type(e).__name__}")


def _float32_only(st: Store) -> bool:
    """Vector code is float32 lanes: every buffer touched must be float32."""
    return st.buffer.dtype == "float32" and all(
        n.buffer.dtype == "float32" for n in _walk_deep(st.value) if isinstance(n, Load)
    )


def vector_chunks(extent: int, lanes: int, half: bool) -> list[int] | None:
    """The widths a vectorized loop of ``extent`` iterations is cut into, in order: whole vectors,
    and with ``half`` (a renderer with half-width vectors too) one half vector at the end where
    the extent is an odd number of them (24 or 40 channels on 16 lanes; 8 alone); None where
    they do not cover it."""
    if extent % lanes == 0:
        return [lanes] * (extent // lanes)
    h = lanes // 2
    if half and h >= 4 and extent % h == 0:
        return [lanes] * (extent // lanes) + [h]
    return None


def vectorize_loops(s: Stmt, lanes: int, masks: bool = False, half: bool = False) -> Stmt:
    """Turn ``vectorize`` loops into vector stores when the body allows; else keep a loop marked
    ``simd`` for the compiler's own vectorizer. ``masks``: the renderer has lane-wise conditions
    (``VCompare``), so a select whose condition varies across the lanes vectorizes too; ``half``:
    it has half-width vectors too, for a loop of an odd number of half vectors."""
    if isinstance(s, Seq):
        return Seq([vectorize_loops(c, lanes, masks, half) for c in s.stmts])
    if isinstance(s, IfThen):
        return IfThen(s.cond, vectorize_loops(s.body, lanes, masks, half))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, vectorize_loops(s.body, lanes, masks, half))
    if not isinstance(s, For):
        return s
    if s.kind != "vectorize":
        inner = s.body
        if isinstance(inner, For) and inner.kind == "vectorize":
            done = _vector_reduction(inner, lanes, outer=s)
            if done is not None:
                return done
        return For(s.var, s.extent, vectorize_loops(s.body, lanes, masks, half), s.kind)
    if isinstance(s.body, IfThen) and _invariant(s.body.cond, s.var):
        # a guard the lanes share (a split's tail: a row past the edge): tested once, around the
        # vectors, not on every element of a scalar loop
        inner = For(s.var, s.extent, s.body.body, s.kind)
        return IfThen(s.body.cond, vectorize_loops(inner, lanes, masks, half))
    stores = s.body.stmts if isinstance(s.body, Seq) else [s.body]
    if any(isinstance(x, Store) and _coeff(x.index, s.var)[0] == 0 for x in stores):
        # a vectorized reduction loop: lanes that accumulate separately, or else in order
        done = _vector_reduction(s, lanes)
        return done if done is not None else For(s.var, s.extent, s.body, "serial")
    widths = vector_chunks(s.extent, lanes, half)
    if widths is None or not all(isinstance(x, Store) and _float32_only(x) for x in stores):
        return For(s.var, s.extent, s.body, "simd")
    chunks = []
    try:
        start = 0
        for width in widths:
            base = IntImm(start)
            for st in stores:
                coeff, rest = _coeff(st.index, s.var)
                if coeff != 1:
                    raise _NotVectorizable("store stride")
                value = _vec_expr(st.value, s.var, base, width, masks)
                chunks.append(VStore(st.buffer, simplify(rest + base), _vector(value, width), width))
            start += width
    except _NotVectorizable:
        return For(s.var, s.extent, s.body, "simd")
    return seq(*chunks)


_IDENTITY = {"add": 0.0, "max": float("-inf"), "min": float("inf")}


def _vector_reduction(loop: For, lanes: int, outer: For | None = None) -> Stmt | None:
    """A reduction over a ``vectorize`` loop (``acc[i] = acc[i] op f(r)``, ``acc[i]`` the same in
    every iteration) computed with vector lanes that accumulate separately: the loop's chunks of
    ``lanes`` combine into one vector, and with ``outer`` (the loop around it, also a reduction
    loop) a vector accumulator carries across its iterations; the lanes are combined into
    ``acc[i]`` once at the end. The order of the sum changes (float reassociation, like any
    parallel reduction). A ``loop`` that is not whole vectors (without ``outer``) ends with its
    last iterations in scalar code. None when ``loop`` is not such a reduction."""
    st = loop.body
    tail = loop.extent % lanes  # iterations past the whole vectors: scalar, after them
    if not isinstance(st, Store) or (tail and outer is not None) or loop.extent < lanes:
        return None
    if not _float32_only(st):
        return None
    v = st.value
    if not (isinstance(v, Binary) and v.op in _IDENTITY):
        return None
    same = [x for x in (v.a, v.b) if isinstance(x, Load) and x.buffer is st.buffer
            and expr_key(x.index) == expr_key(st.index)]
    if not same:
        return None
    rhs = v.b if same[0] is v.a else v.a
    loops = [loop.var] + ([outer.var] if outer is not None else [])
    if any(x in free_vars_deep(st.index) for x in loops) or any(
        isinstance(n, Load) and n.buffer is st.buffer for n in _walk_deep(rhs)
    ):
        return None
    try:
        chunks = [_vec_expr(rhs, loop.var, IntImm(c * lanes), lanes) for c in range(loop.extent // lanes)]
    except _NotVectorizable:
        return None
    chunks = [_vector(c, lanes) for c in chunks]
    acc = chunks[0]
    for c in chunks[1:]:
        acc = VBinary(v.op, acc, c, lanes)
    if outer is None:
        done = Store(st.buffer, st.index, Binary(v.op, Load(st.buffer, st.index), VReduce(v.op, acc)))
        if not tail:
            return done
        t = Var(loop.var.name + "_tail")
        rest = substitute_stmt(st, {loop.var: t + IntImm(loop.extent - tail)})
        return seq(done, For(t, tail, rest, "serial"))
    tmp = Buffer(f"{st.buffer.name}_lanes", "float32", (lanes,), "local")
    zero = IntImm(0)
    lanes_acc = VLoad(tmp, zero, lanes)
    start = VStore(tmp, zero, Broadcast(FloatImm(_IDENTITY[v.op], "float32"), lanes), lanes)
    update = VStore(tmp, zero, VBinary(v.op, lanes_acc, acc, lanes), lanes)
    step = For(outer.var, outer.extent, update, "serial")
    done = Store(st.buffer, st.index, Binary(v.op, Load(st.buffer, st.index), VReduce(v.op, lanes_acc)))
    return Allocate(tmp, seq(start, step, done))


# --- asynchronous copies ----------------------------------------------------------------------
ASYNC_BYTES = (4, 16)  # the copy sizes cp.async offers for 4-byte elements: one, or four (aligned)


def _copy_source(value: Expr, lanes: int) -> tuple[Load | VLoad, Expr | None] | None:
    """(the load, the condition under which it is read) when a stored value is a plain read of
    memory, or a read where a condition holds and 0 elsewhere (padding); else None."""
    cond = None
    if isinstance(value, (Select, VSelect)):
        zero = value.f.value if isinstance(value.f, Broadcast) else value.f
        if not (isinstance(zero, FloatImm) and zero.value == 0.0):
            return None
        cond, value = value.cond, value.t
    if lanes == 1 and isinstance(value, Load):
        return value, cond
    if lanes > 1 and isinstance(value, VLoad) and value.lanes == lanes:
        return value, cond
    return None


def async_copies(s: Stmt) -> Stmt:
    """Stores into pipelined shared buffers (``Buffer.slots > 1``) that copy memory become
    asynchronous copies (4 bytes, or 16 where both ends are 16-byte aligned); any other store into
    them stays a plain store, which is as correct (the pipeline's barrier orders both)."""
    if isinstance(s, Seq):
        return Seq([async_copies(c) for c in s.stmts])
    if isinstance(s, (For, IfThen, Allocate)):
        body = async_copies(s.body)
        if isinstance(s, For):
            return For(s.var, s.extent, body, s.kind)
        return IfThen(s.cond, body) if isinstance(s, IfThen) else Allocate(s.buffer, body)
    if not isinstance(s, (Store, VStore)) or s.buffer.slots < 2 or s.buffer.dtype not in ("float32", "int32"):
        return s
    lanes = s.lanes if isinstance(s, VStore) else 1
    dst = s.base if isinstance(s, VStore) else s.index
    found = _copy_source(s.value, lanes)
    if found is None or lanes * 4 not in ASYNC_BYTES:
        return s
    load, cond = found
    src = load.base if isinstance(load, VLoad) else load.index
    if load.buffer.dtype != s.buffer.dtype or load.buffer.scope not in ("arg", "global"):
        return s
    if lanes > 1 and not (aligned(dst, lanes) and aligned(src, lanes)):
        return s
    if cond is not None:
        src = Select(cond, src, IntImm(0))  # nothing is read where the condition fails
    return AsyncCopy(s.buffer, dst, load.buffer, src, lanes, cond)


# --- checks -----------------------------------------------------------------------------------
def check_parallel(s: Stmt, inside: bool = False) -> None:
    """Raise ScheduleError on a parallel loop nested inside another."""
    if isinstance(s, Seq):
        for c in s.stmts:
            check_parallel(c, inside)
    elif isinstance(s, For):
        if s.kind == "parallel" and inside:
            raise ScheduleError("nested parallel loops")
        check_parallel(s.body, inside or s.kind == "parallel")
    elif isinstance(s, (IfThen, Allocate)):
        check_parallel(s.body, inside)


def optimize(f: PrimFunc, lanes: int, max_unroll: int = 64, max_registers: int = 16) -> PrimFunc:
    """The CPU pass pipeline after lowering (``max_registers``: accumulators kept in registers)."""
    check_parallel(f.body)
    body = unroll_loops(f.body, max_unroll)
    body = simplify_stmt(body) or Seq([])
    body = vectorize_loops(body, lanes, masks=True, half=True)
    body = simplify_stmt(body) or Seq([])
    body = promote_accumulators(body, max_registers)
    return PrimFunc(f.name, f.args, body)


_ = (FloatImm, walk)
