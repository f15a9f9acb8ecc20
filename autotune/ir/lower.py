"""Lowering: (tensor expressions, schedule) -> loop-nest IR, with bound inference for compute_at."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..prepack import PrepackSpec
from ..schedule.state import Fuse, Loop, Schedule, ScheduleError, Split, Stage
from ..te.expr import (
    Binary,
    Expr,
    IntImm,
    Reduce,
    Select,
    TensorRead,
    Var,
    all_of,
    children,
    distinct_nodes,
    free_vars,
    rebuild,
    substitute,
    walk,
)
from ..te.tensor import Tensor, reduce_identity
from .nodes import (
    Allocate,
    AllReduce,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Buffer,
    For,
    IfThen,
    Load,
    Prefetch,
    PrimFunc,
    Stmt,
    Store,
    seq,
)
from .simplify import Linear, bounds, expr_key, linear, simplify

_ANNOTATION_KIND = {
    "parallel": "parallel",
    "vectorize": "vectorize",
    "unroll": "unroll",
    "vthread": "vthread",
    "registers": "registers",
}
THREAD_KINDS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
_ANNOTATION_KIND.update({k: k for k in THREAD_KINDS})


SERIAL_KINDS = ("serial", "unroll", "registers")  # loops one thread runs in order
LoopInfo = tuple[Var, int, str]  # a loop's variable, extent and kind


@dataclass
class Placed:
    """Where a tensor lives while a consumer reads it: its buffer and the region origin."""

    buffer: Buffer
    origin: list[Expr] | None = None  # per-dim start of the region held (None: whole tensor)
    tiles: list[Expr] | None = None  # prepacked: per-dim tile index, before the in-tile index
    slot: Expr | None = None  # pipelined shared buffer: the slot of the ring read now (leading dim)

    @property
    def shape(self) -> tuple[int, ...]:
        """The stored tile's dims (without a ring's slot dim)."""
        return self.buffer.shape[1:] if self.slot is not None else self.buffer.shape


def c_name(text: str) -> str:
    """``text`` as a C identifier's characters: anything but ASCII letters, digits and _ becomes _."""
    return re.sub(r"[^0-9a-zA-Z_]", "_", text)


def flat_index(shape: tuple[int, ...], idx: list[Expr]) -> Expr:
    if not idx:
        return IntImm(0)  # a 0-d tensor: its one element
    out: Expr = idx[0]
    for s, i in zip(shape[1:], idx[1:]):
        out = Binary("add", Binary("mul", out, IntImm(s)), i)
    return out


class _Lowerer:
    def __init__(self, sch: Schedule, args: list[Tensor],
                 views: Mapping[int, tuple[tuple[int, ...], tuple[int, ...]]] | None = None) -> None:
        self.sch = sch
        self.placed: dict[Tensor, Placed] = {}
        self.arg_buffers = []
        for i, t in enumerate(args):
            if views and i in views:  # the argument is a region of a larger buffer: (its shape, the start)
                shape, start = views[i]
                if len(shape) != len(t.shape) or any(s < 0 or s + e > n
                                                     for s, e, n in zip(start, t.shape, shape)):
                    raise ScheduleError(f"{t.name} {t.shape} does not fit in {shape} at {start}")
                buf = Buffer(c_name(t.name), t.dtype, tuple(shape), "arg")
                self.placed[t] = Placed(buf, [IntImm(-s) for s in start])
            else:
                buf = Buffer(c_name(t.name), t.dtype, t.shape, "arg")
                self.placed[t] = Placed(buf)
            self.arg_buffers.append(buf)
        self.attached: dict[Loop, list[Stage]] = {}
        for st in sch.stages:
            if st.attach is not None:
                self.attached.setdefault(st.attach[1], []).append(st)

    # --- entry ------------------------------------------------------------------------------
    def run(self, name: str) -> PrimFunc:
        heap, nests = self.run_stages()
        stmt = seq(*nests)
        for buf in reversed(heap):
            stmt = Allocate(buf, stmt)
        return PrimFunc(c_name(name), self.arg_buffers, stmt)

    def run_stages(self) -> tuple[list[Buffer], list[Stmt]]:
        """Kernel-owned intermediate buffers and one loop nest per root stage."""
        arg_names = {b.name for b in self.arg_buffers}
        nests: list[Stmt] = []
        heap: list[Buffer] = []
        for st in self.sch.stages:
            if st.inlined or st.attach is not None:
                continue
            if st.tensor not in self.placed:
                if st.scope != "global":
                    raise ScheduleError(f"{st.scope} stage {st.name} must be computed at a consumer loop")
                buf = Buffer(c_name(st.name), st.tensor.dtype, st.tensor.shape, "global")
                if buf.name in arg_names:
                    raise ScheduleError(f"buffer name clash: {buf.name}")
                heap.append(buf)
                self.placed[st.tensor] = Placed(buf)
            region = [(IntImm(0), ext) for ext in st.tensor.shape]
            nests.append(self.emit_stage(st, region, {}))
        return heap, nests

    # --- one stage ----------------------------------------------------------------------------
    def emit_stage(
        self,
        st: Stage,
        region: list[tuple[Expr, int]],
        outer_threads: dict[Var, tuple[int, int]],
        outer_loops: tuple[LoopInfo, ...] = (),
    ) -> Stmt:
        """The loop nest of one stage over ``region``; ``outer_threads`` are the GPU thread loops
        around it (shared buffers are filled by all of them together), ``outer_loops`` all the
        loops around it, outermost first."""
        root_ext: dict[Loop, int] = {}
        n_sp = len(st.axes)
        for i, lp in enumerate(st.root_loops):
            root_ext[lp] = region[i][1] if i < n_sp else st.reduce_axes[i - n_sp].extent
        ext = dict(root_ext)
        for rel in st.relations:
            if isinstance(rel, Split):
                pe = ext[rel.parent]
                if rel.factor is not None:
                    ext[rel.inner] = min(rel.factor, pe)
                    ext[rel.outer] = -(-pe // ext[rel.inner])
                else:
                    ext[rel.outer] = min(rel.nparts, pe)
                    ext[rel.inner] = -(-pe // ext[rel.outer])
            else:
                ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        lvar = {lp: Var(c_name(f"{st.name}_{lp.name}")) for lp in st.leaf_loops}
        value: dict[Loop, Expr] = dict(lvar)
        guards: list[tuple[Expr, bool]] = []  # (condition, involves reduction)
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                start = value[rel.outer] * ext[rel.inner]
                partial = ext[rel.outer] * ext[rel.inner] != ext[rel.parent]
                if partial and rel.overlap and not isinstance(st.body, Reduce):
                    # the last tile shifted back to end at the extent: it recomputes a few
                    # elements of the one before it (the same values), and no element is guarded
                    start = Binary("min", start, IntImm(ext[rel.parent] - ext[rel.inner]))
                elif partial:
                    guards.append((start + value[rel.inner] < ext[rel.parent], rel.parent.kind == "reduce"))
                value[rel.parent] = start + value[rel.inner]
            elif isinstance(rel, Fuse):
                value[rel.outer] = Binary("floordiv", value[rel.fused], IntImm(ext[rel.inner]))
                value[rel.inner] = Binary("mod", value[rel.fused], IntImm(ext[rel.inner]))
        axis_value: dict[Var, Expr] = {}
        for i, (ax, lp) in enumerate(zip(st.root_axes, st.root_loops)):
            if i < n_sp:
                v = region[i][0] + value[lp]
                if region[i][1] != st.tensor.shape[i] or not isinstance(region[i][0], IntImm):
                    guards.append((all_of(v >= 0, v < st.tensor.shape[i]), False))
                axis_value[ax.var] = v
            else:
                axis_value[ax.var] = value[lp]

        threads_at: dict[Loop, dict[Var, tuple[int, int]]] = {}
        acc = dict(outer_threads)
        for lp in st.leaf_loops:
            if st.annotations.get(lp, "").startswith("threadIdx") or st.annotations.get(lp) == "vthread":
                acc[lvar[lp]] = (0, ext[lp] - 1)
            threads_at[lp] = dict(acc)
        regions = {}
        for lp in reversed(st.leaf_loops):
            # consumers attached at the same or a deeper loop are placed first: their region bounds
            # the producer's
            for att in reversed(self.attached.get(lp, [])):
                regions[att] = self.place_attached(att, st, lp, axis_value, ext, lvar, threads_at[lp])
        # the stage's own output buffer
        out = self.placed[st.tensor]
        out_idx = self._index(st.tensor, out, [axis_value[a.var] for a in st.axes])
        spatial_guard = [g for g, red in guards if not red]
        all_guard = [g for g, _ in guards]

        if isinstance(st.body, Reduce):
            red = st.body
            acc = Load(out.buffer, out_idx)
            rhs = self.lower_expr(red.body, axis_value)
            combined = {
                "sum": lambda: acc + rhs,
                "max": lambda: Binary("max", acc, rhs),
                "min": lambda: Binary("min", acc, rhs),
            }[red.combiner]()
            update: Stmt = Store(out.buffer, out_idx, combined)
            init: Stmt | None = Store(out.buffer, out_idx, reduce_identity(red.combiner, st.tensor.dtype))
        else:
            update = Store(out.buffer, out_idx, self.lower_expr(st.body, axis_value))
            init = None
        if all_guard:
            update = IfThen(all_of(*all_guard), update)
        if init is not None and spatial_guard:
            init = IfThen(all_of(*spatial_guard), init)

        first_reduce = next((i for i, lp in enumerate(st.leaf_loops) if lp.kind == "reduce"), None)
        cross_thread = [
            lp for lp in st.leaf_loops if lp.kind == "reduce" and st.annotations.get(lp) == "threadIdx.x"
        ]
        if cross_thread:
            if any(lp.kind == "spatial" for lp in st.leaf_loops[first_reduce:]):
                raise ScheduleError(
                    f"{st.name}: a cross-thread reduction needs its reduction loops innermost"
                )
            if out.buffer.scope != "local":
                raise ScheduleError(
                    f"{st.name}: a cross-thread reduction must be computed at a consumer loop"
                )
        leaves = st.leaf_loops
        kinds = [_ANNOTATION_KIND.get(st.annotations.get(lp, ""), "serial") for lp in leaves]
        # per loop position, the loops around its body (outermost first)
        chain = [
            outer_loops + tuple((lvar[q], ext[q], k) for q, k in zip(leaves[: p + 1], kinds))
            for p in range(len(leaves))
        ]
        prefetch: dict[int, list[Stmt]] = {}  # loop position -> prefetches at the top of its body
        for pos, lp in enumerate(leaves):
            for att in self.attached.get(lp, []):
                if att.scope != "prepacked":
                    continue
                inside = next((q for q in range(pos + 1, len(leaves)) if ext[leaves[q]] > 1), None)
                spread = (
                    None if inside is None else (lvar[leaves[inside]], ext[leaves[inside]], kinds[inside])
                )
                stmt = self._prefetch_next_tile(att, chain[pos], spread)
                if stmt is not None:
                    where = pos if spread is None or spread[2] not in SERIAL_KINDS else inside
                    prefetch.setdefault(where, []).append(stmt)
        for pos in range(len(leaves) - 1, -1, -1):
            lp = leaves[pos]
            kind = kinds[pos]
            inner = update
            atts = self.attached.get(lp, [])
            depth = st.pipeline.get(lp, 1)
            if depth > 1:
                update = self._emit_pipelined(atts, regions, threads_at[lp], inner, chain[pos], depth)
            else:
                if atts:
                    inner = self._emit_attached_group(atts, regions, threads_at[lp], inner, chain[pos])
                update = For(lvar[lp], ext[lp], seq(*prefetch.get(pos, []), inner), kind)
            if pos == first_reduce and init is not None:
                # the init copy of each spatial loop inside the reduction gets its own variable
                # (each For binds one), renamed in one pass over the init statement
                inner = [lp2 for lp2 in leaves[pos + 1 :] if lp2.kind == "spatial"]
                fresh = {lvar[lp2]: Var(lvar[lp2].name + "_init") for lp2 in inner}
                init_nest = _rename(init, fresh) if fresh else init
                for lp2 in reversed(inner):
                    kind2 = _ANNOTATION_KIND.get(st.annotations.get(lp2, ""), "serial")
                    init_nest = For(fresh[lvar[lp2]], ext[lp2], init_nest, kind2)
                update = seq(init_nest, update)
                if cross_thread:
                    update = seq(update, AllReduce(out.buffer, out_idx, st.body.combiner))
        if init is not None and first_reduce is None:
            raise ScheduleError(f"reduction stage {st.name} has no reduction loop")
        return update

    def _prefetch_next_tile(
        self, att: Stage, loops: tuple[LoopInfo, ...], spread: LoopInfo | None
    ) -> Stmt | None:
        """Prefetches of the prepacked tile that the loops around ``att``'s attach point will
        read next.

        A prepacked operand is read tile by tile straight from memory, where (a model's weight)
        it is cold; while the loops work on one tile, the lines of the next are requested,
        spread over the iterations of ``spread`` (the first loop inside the attach point) when
        it is a serial loop, else all at once. "Next" increments the innermost of ``loops``
        (outermost first, the consumers' loops included) that the tile index moves with,
        carrying into outer ones; a parallel loop ends the carry (its next iteration belongs to
        another thread). None when the tile does not change within the thread."""
        placed = self.placed[att.tensor]
        buf, tiles = placed.buffer, placed.tiles or []
        moving = set().union(*(free_vars(t) for t in tiles)) if tiles else set()
        carry: list[LoopInfo] = []  # innermost first
        for var, extent, kind in reversed(loops):
            if kind not in SERIAL_KINDS:
                break
            if var in moving and extent > 1:
                carry.append((var, extent, kind))
        if not carry:
            return None
        start = flat_index(buf.shape, tiles + [IntImm(0)] * (len(buf.shape) - len(tiles)))

        def start_after(i: int) -> Expr:  # loop carry[i] one step on, the loops inside it at 0
            mapping: dict[Var, Expr] = {v: IntImm(0) for v, _, _ in carry[:i]}
            mapping[carry[i][0]] = carry[i][0] + 1
            return substitute(start, mapping)

        nxt = start_after(len(carry) - 1)
        for i in range(len(carry) - 2, -1, -1):
            nxt = Select(carry[i][0] < carry[i][1] - 1, start_after(i), nxt)
        per_line = max(1, 64 // np.dtype(buf.dtype).itemsize)  # elements per 64-byte line
        elems = math.prod(buf.shape[len(tiles) :])
        # a tile that is not a whole number of lines starts mid-line: one line more
        lines = -(-elems // per_line) + (1 if elems % per_line else 0)
        j = Var(c_name(f"{att.name}_pf"))
        if spread is not None and spread[2] in SERIAL_KINDS:
            step = -(-lines // spread[1])
            first: Expr = spread[0] * step
        else:
            step, first = lines, IntImm(0)
        index = Binary("min", nxt + (first + j) * per_line, IntImm(buf.size - 1))
        return For(j, step, Prefetch(buf, index), "serial")

    def _emit_attached_group(
        self, atts: list[Stage], regions: dict, threads: dict, rest: Stmt, loops: tuple[LoopInfo, ...]
    ) -> Stmt:
        """The stages computed at one loop, in order, then ``rest``. Consecutive shared-memory
        copies share one barrier before (the previous readers are done) and one after (the copies
        are complete)."""
        parts: list[Stmt] = []
        in_shared = False
        atts = [att for att in atts if att.scope != "prepacked"]  # filled before the call
        if not atts:
            return rest
        for att in atts:
            shared = att.scope == "shared"
            if shared != in_shared:
                parts.append(Barrier())
                in_shared = shared
            parts.append(self.emit_stage(att, regions[att], threads, loops))
        if in_shared:
            parts.append(Barrier())
        body = seq(*parts, rest)
        for att in reversed(atts):
            body = Allocate(self.placed[att.tensor].buffer, body)
        return body

    def _emit_pipelined(
        self,
        atts: list[Stage],
        regions: dict,
        threads: dict,
        rest: Stmt,
        loops: tuple[LoopInfo, ...],
        depth: int,
    ) -> Stmt:
        """The last of ``loops`` software-pipelined: its shared copies fill a ring of ``depth`` tiles
        (``Placed.slot``), the tile of iteration i started at iteration i - depth + 1 (the first
        depth - 1 before the loop) and waited for, then made visible by one barrier, at iteration
        i. That barrier also tells the copies of iteration i (into the slot read at i - 1) that
        every thread is done with it. Copies of memory become asynchronous (``passes.async_copies``);
        each iteration commits one group, so waiting for all but ``depth - 2`` of them retires
        exactly the tile about to be read. Other stages computed at the loop keep their place."""
        from .passes import substitute_stmt

        var, extent, kind = loops[-1]
        ring = [a for a in atts if a.scope == "shared"]
        others = [a for a in atts if a.scope != "shared"]
        fill = seq(*[self.emit_stage(a, regions[a], threads, loops) for a in ring])
        ahead = depth - 1
        first = Var(var.name + "_fill")
        start = IfThen(first < extent, substitute_stmt(fill, {var: first}))
        prologue = For(first, ahead, seq(start, AsyncCommit()), "serial")
        body = seq(
            AsyncWait(pipeline_wait(depth)),
            Barrier(),
            IfThen(var + ahead < extent, substitute_stmt(fill, {var: var + ahead})),
            AsyncCommit(),
            self._emit_attached_group(others, regions, threads, rest, loops) if others else rest,
        )
        # the barrier before the prologue: the slots it fills may still be read by a loop around
        stmt = seq(Barrier(), prologue, For(var, extent, body, kind))
        for att in reversed(ring):
            stmt = Allocate(self.placed[att.tensor].buffer, stmt)
        return stmt

    def place_attached(
        self,
        att: Stage,
        target: Stage,
        loop: Loop,
        target_axis_value: dict[Var, Expr],
        ext: dict[Loop, int],
        lvar: dict[Loop, Var],
        threads: dict[Var, tuple[int, int]],
    ) -> list[tuple[Expr, int]]:
        """Infer the region of ``att`` that ``loop`` of ``target`` needs and give it a buffer.

        Readers are ``target`` (its loops inside ``loop`` range) and stages attached at the same
        or a deeper loop of it (their whole region ranges). A shared buffer serves every thread of
        the block, so the thread loops around it range too."""
        pos = target.leaf_loops.index(loop)
        ranges = {lvar[lp]: (0, ext[lp] - 1) for lp in target.leaf_loops[pos + 1 :]}
        if att.scope == "shared":
            ranges.update(threads)
        uses: list[tuple[list[Expr], dict[Var, tuple[int, int]]]] = []
        for indices in _distinct_reads(target.body, att.tensor):
            uses.append(([substitute(i, target_axis_value) for i in indices], ranges))
        deeper = [o for lp in target.leaf_loops[pos:] for o in self.attached.get(lp, [])]
        for other in deeper:
            if other is att or att.tensor not in other.reads():
                continue
            placed = self.placed.get(other.tensor)
            if placed is None or placed.origin is None:
                raise ScheduleError(f"{other.name} must be placed before its producer {att.name}")
            fresh = {a.var: Var(f"{a.name}_r") for a in other.root_axes}
            o_ranges = dict(ranges)
            values: dict[Var, Expr] = {}
            for d, a in enumerate(other.axes):
                values[a.var] = placed.origin[d] + fresh[a.var]
                o_ranges[fresh[a.var]] = (
                    0,
                    placed.shape[d] - 1 - (other.storage_pad if d == len(other.axes) - 1 else 0),
                )
            for a in other.reduce_axes:
                values[a.var] = fresh[a.var]
                o_ranges[fresh[a.var]] = (0, a.extent - 1)
            for indices in _distinct_reads(other.body, att.tensor):
                uses.append(([substitute(i, values) for i in indices], o_ranges))
        region = infer_region(att.tensor, uses)
        if att.scope == "prepacked":
            inner = [lvar[lp] for lp in target.leaf_loops[: pos + 1]]  # the loops around the copy
            return self._place_prepacked(att, region, inner)
        shape = [e for _, e in region]
        shape[-1] += att.storage_pad
        scope = "shared" if att.scope == "shared" else "local"
        slots = target.pipeline.get(loop, 1) if scope == "shared" else 1
        if slots > 1:  # a ring of tiles, the slot of iteration i at i % slots
            buf = Buffer(c_name(att.name), att.tensor.dtype, (slots, *shape), scope, slots=slots)
            self.placed[att.tensor] = Placed(buf, [m for m, _ in region], slot=lvar[loop] % slots)
        else:
            buf = Buffer(c_name(att.name), att.tensor.dtype, tuple(shape), scope)
            self.placed[att.tensor] = Placed(buf, [m for m, _ in region])
        return region

    def _place_prepacked(
        self, att: Stage, region: list[tuple[Expr, int]], loops: list[Var]
    ) -> list[tuple[Expr, int]]:
        """The kernel argument of a prepacked operand takes the place of the operand's own: all
        of its tiles, the one a loop nest needs found from the region's origin. Every origin
        must be a whole number of tiles (tiles do not overlap). Tiles are stored in the order the
        loops visit them (``loops``: the consumer's loops around the copy, outermost first; a tile
        dim that moves with an inner loop is stored inner), so a cold operand streams in order."""
        src = att.body.tensor
        pos = next((i for i, b in enumerate(self.arg_buffers) if b.name == c_name(src.name)), None)
        if pos is None:
            raise ScheduleError(f"prepacked {src.name} is not a kernel argument")
        tiles: list[Expr] = []
        blocks: list[int] = []  # per dim: tiles per overlapping block (0: the tiles do not overlap)
        for (origin, ext), size in zip(region, att.tensor.shape):
            lin, block = _blocked_origin(linear(origin, {}), ext, size, src.name)
            if lin.const % ext or any(c % ext for _, c in lin.terms.values()):
                raise ScheduleError(f"prepacked {src.name}: tiles of {ext} start at {origin}, not a multiple")
            q = type(lin)(const=lin.const // ext)
            for key, (atom, c) in lin.terms.items():
                q.terms[key] = (atom, c // ext)
            tiles.append(simplify(q.to_expr()))
            blocks.append(block)
        perm = tuple(next(p for p, v in enumerate(src_index_vars(att)) if v is a.var) for a in att.axes)
        depth = {v: i for i, v in enumerate(loops)}

        def innermost(d: int) -> int:  # the deepest of those loops the tile index moves with
            return max((depth.get(v, -1) for v in free_vars(tiles[d])), default=-1)

        order = tuple(sorted(range(len(tiles)), key=innermost))
        spec = PrepackSpec(
            perm=perm,
            tile=tuple(e for _, e in region),
            counts=tuple(-(-size // (e * b)) * b if b else -(-size // e)
                         for (_, e), size, b in zip(region, att.tensor.shape, blocks)),
            order=order,
            blocks=tuple(blocks) if any(blocks) else None,
        )
        tiles = [tiles[d] for d in order]
        buf = Buffer(c_name(src.name), src.dtype, spec.shape, "arg", prepack=spec)
        self.arg_buffers[pos] = buf
        self.placed[att.tensor] = Placed(buf, [m for m, _ in region], tiles)
        return region

    # --- expressions --------------------------------------------------------------------------
    def _index(self, t: Tensor, placed: Placed, idx: list[Expr]) -> Expr:
        if placed.origin is not None:
            idx = [i - o for i, o in zip(idx, placed.origin)]
        if placed.tiles is not None:
            idx = placed.tiles + idx
        if placed.slot is not None:
            idx = [placed.slot] + idx
        return flat_index(placed.buffer.shape, idx)

    def lower_expr(self, e: Expr, axis_value: dict[Var, Expr], done: dict[int, Expr] | None = None) -> Expr:
        """``e`` with tensor reads turned into loads of the placed buffers; a subexpression shared
        by several parents is lowered once (``done``, by node) and stays shared."""
        if isinstance(e, Var):
            return axis_value.get(e, e)
        if done is None:
            done = {}
        out = done.get(id(e))
        if out is not None:
            return out
        if isinstance(e, TensorRead):
            if e.tensor not in self.placed:
                raise ScheduleError(f"tensor {e.tensor.name} is read before it is computed")
            idx = [self.lower_expr(i, axis_value, done) for i in e.indices]
            p = self.placed[e.tensor]
            out = Load(p.buffer, self._index(e.tensor, p, idx))
        else:
            kids = tuple(children(e))
            out = rebuild(e, tuple(self.lower_expr(k, axis_value, done) for k in kids)) if kids else e
        done[id(e)] = out
        return out


def _blocked_origin(lin: Linear, ext: int, size: int, name: str) -> tuple[Linear, int]:
    """A prepacked tile origin along an axis split with ``overlap`` holds ``min(b * B, size - B)``
    (blocks of B elements, the last shifted back to end at ``size``): the tile index then counts
    B / ``ext`` tiles a block, the packed copy stores the last block's tiles from its shifted start
    (``PrepackSpec.blocks``), and ``b * B`` stands for the min. Returns the origin so rewritten and
    the tiles per block (0 where the origin has no such term)."""
    shifted = [(k, atom) for k, (atom, c) in lin.terms.items()
               if isinstance(atom, Binary) and atom.op == "min" and c == 1 and isinstance(atom.b, IntImm)]
    if not shifted:
        return lin, 0
    if len(shifted) > 1:
        raise ScheduleError(f"prepacked {name}: an origin with two shifted blocks")
    key, atom = shifted[0]
    start = linear(atom.a, {})
    steps = [c for _, c in start.terms.values()]
    if start.const or len(steps) != 1 or steps[0] % ext or atom.b.value != size - steps[0]:
        raise ScheduleError(f"prepacked {name}: tiles of {ext} start at {atom}, not a shifted block")
    out = Linear({k: v for k, v in lin.terms.items() if k != key}, lin.const)
    return out.add(start), steps[0] // ext


def pipeline_wait(depth: int) -> int:
    """Commit groups a ``depth``-deep pipeline may leave in flight when it reads a tile."""
    return depth - 2


def src_index_vars(copy_stage: Stage) -> list[Var]:
    """Per source dim, the copy axis variable that indexes it (cache_read bodies read
    ``src[..]`` with one copy axis per dim)."""
    return list(copy_stage.body.indices)


def _distinct_reads(body: Expr, tensor: Tensor) -> list[tuple[Expr, ...]]:
    """The index tuples with which ``body`` reads ``tensor``, each distinct tuple once (an expanded
    epilogue such as GELU's reads its input many times at the same index)."""
    out: dict[tuple, tuple[Expr, ...]] = {}
    for n in distinct_nodes(body):
        if isinstance(n, TensorRead) and n.tensor is tensor:
            out.setdefault(tuple(expr_key(i) for i in n.indices), n.indices)
    return list(out.values())


def _rename(s: Stmt, mapping: dict[Var, Var]) -> Stmt:
    from .passes import map_exprs

    return map_exprs(s, lambda e: substitute(e, mapping))


def infer_region(
    tensor: Tensor, uses: list[tuple[list[Expr], dict[Var, tuple[int, int]]]]
) -> list[tuple[Expr, int]]:
    """Per dim of ``tensor``: (start, extent) of the elements the given index tuples touch while
    the variables in their ranges run; start is symbolic in the other (outer) loops, extent is
    constant. Dims that cannot be bounded that way fall back to the whole dimension."""
    region: list[tuple[Expr, int]] = []
    for d, size in enumerate(tensor.shape):
        spans: list[tuple[tuple, Expr, int, int]] = []
        ok = True
        for indices, ranges in uses:
            if any(isinstance(n, (TensorRead, Load)) for n in walk(indices[d])):
                ok = False  # a data-dependent index: no static bound
                break
            lin = linear(indices[d], {})
            sym = type(lin)(const=lin.const)
            lo = hi = 0
            for key, (atom, c) in lin.terms.items():
                if not (free_vars(atom) & ranges.keys()):
                    sym.terms[key] = (atom, c)
                else:
                    # a ranging variable, or a div/mod of ranging variables only
                    b = bounds(atom, ranges) if free_vars(atom) <= ranges.keys() else None
                    if b is None:
                        ok = False
                        continue
                    lo += min(c * b[0], c * b[1])
                    hi += max(c * b[0], c * b[1])
            if not ok:
                break
            spans.append(
                (
                    expr_key(simplify(type(lin)(sym.terms).to_expr())),
                    sym.to_expr(),
                    sym.const + lo,
                    sym.const + hi,
                )
            )
        if not ok or not spans or len({k for k, *_ in spans}) != 1:
            region.append((IntImm(0), size))
            continue
        lo = min(x[2] for x in spans)
        hi = max(x[3] for x in spans)
        extent = hi - lo + 1
        if extent >= size:
            region.append((IntImm(0), size))
            continue
        base = spans[0][1]
        region.append(
            (simplify(base - IntImm(spans[0][2] - lo)) if spans[0][2] != lo else simplify(base), extent)
        )
    return region


def lower_stages(sch: Schedule, args: list[Tensor]) -> tuple[list[Buffer], list[Buffer], list[Stmt]]:
    """(argument buffers, intermediate buffers, one simplified nest per root stage): the pieces a
    GPU backend turns into separate kernel launches."""
    from .passes import simplify_stmt

    low = _Lowerer(sch, args)
    heap, nests = low.run_stages()
    return low.arg_buffers, heap, [simplify_stmt(n) or seq() for n in nests]


def lower(sch: Schedule, args: list[Tensor], name: str = "kernel", simplify_ir: bool = True,
          views: Mapping[int, tuple[tuple[int, ...], tuple[int, ...]]] | None = None) -> PrimFunc:
    """Lower a schedule to a PrimFunc whose arguments are ``args`` (inputs then outputs); ``views``:
    argument position -> (shape, start): that argument is the region at ``start`` of a buffer of
    ``shape`` (an output written into its slice of a concatenation)."""
    for t in sch.outputs:
        if t not in args:
            raise ScheduleError(f"output {t.name} is not a kernel argument")
    func = _Lowerer(sch, args, views).run(name)
    if simplify_ir:
        from .passes import simplify_func

        func = simplify_func(func)
    return func
