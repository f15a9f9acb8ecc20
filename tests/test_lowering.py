"""Lowering: the printed loop nest, the integer simplifier, bound inference of attached stages and
the guards of split tails."""

from __future__ import annotations

import itertools
import operator

import pytest

from autotune import te
from autotune.ir import lower
from autotune.ir.nodes import Allocate, Buffer, For, IfThen, Load, Seq, Stmt, Store
from autotune.ir.passes import simplify_stmt
from autotune.ir.simplify import bounds, expr_key, simplify
from autotune.program import build_program
from autotune.schedule import (
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
    TileStep,
    apply_steps,
    parallel,
    unroll,
    vectorize,
)
from autotune.te.expr import Binary, Compare, FloatImm, IntImm, Not, Var, all_of, any_of, equal, not_equal


def stmts(s: Stmt) -> list[Stmt]:
    """Every statement of a tree, pre-order."""
    out, todo = [], [s]
    while todo:
        s = todo.pop()
        out.append(s)
        if isinstance(s, Seq):
            todo.extend(reversed(s.stmts))
        elif hasattr(s, "body") and isinstance(s.body, Stmt):
            todo.append(s.body)
    return out


def allocations(s: Stmt) -> dict[str, Buffer]:
    return {a.buffer.name: a.buffer for a in stmts(s) if isinstance(a, Allocate)}


def lowered(wl, steps):  # noqa: ANN001, ANN201
    return lower(apply_steps(wl.outputs, steps), wl.args)


# --- printer ---------------------------------------------------------------------------------------------
MM_PRINT_STEPS = [TileStep("matmul", "i", "j", 8, 8),
                  ReorderStep("matmul", ("i.0", "j.0", "k", "i.1", "j.1")),
                  parallel("matmul", "i.0"), unroll("matmul", "i.1"), vectorize("matmul", "j.1")]


def test_printer_shows_readable_loop_nest() -> None:
    wl = te.make_workload("matmul", [37, 29, 19])
    text = str(lower(apply_steps(wl.outputs, MM_PRINT_STEPS), wl.args, "mm_kernel"))
    lines = text.splitlines()
    assert lines[0].startswith("kernel mm_kernel(") and "A: float32[37, 19]" in lines[0]
    assert "matmul: float32[37, 29]" in lines[0]

    def line_of(prefix: str) -> str:
        hits = [ln for ln in lines if ln.strip().startswith(prefix)]
        assert len(hits) == 1, (prefix, text)
        return hits[0]

    outer = line_of("for matmul_i_0 in 0..5 parallel:")
    j0 = line_of("for matmul_j_0 in 0..4:")
    k = line_of("for matmul_k in 0..19:")
    i1 = line_of("for matmul_i_1 in 0..8 unroll:")
    j1 = line_of("for matmul_j_1 in 0..8 vectorize:")
    indents = [len(ln) - len(ln.lstrip()) for ln in (outer, j0, k, i1, j1)]
    assert indents == sorted(indents) and len(set(indents)) == 5  # each loop nested in the previous
    assert lines.index(outer) < lines.index(j0) < lines.index(k) < lines.index(i1) < lines.index(j1)
    assert any(ln.strip().startswith("if ") for ln in lines)  # the tail guards
    assert any("= 0.0" in ln for ln in lines)  # the reduction init
    assert any("A[" in ln and "B[" in ln for ln in lines)


def test_printer_after_optimize(host_target) -> None:  # noqa: ANN001
    lanes = host_target.vector_lanes
    wl = te.make_workload("matmul", [37, 29, 19])
    text = str(build_program(wl, MM_PRINT_STEPS, host_target).func)
    assert "for matmul_i_0 in 0..5 parallel:" in text
    assert "for matmul_j_1 in 0..8 simd:" in text  # guarded tail lanes: left to the C compiler
    assert "matmul_i_1" not in text  # unrolled away
    exact = te.make_workload("matmul", [16, 32, 8])
    steps = [CacheWriteStep("matmul"), TileStep("matmul", "i", "j", 4, 16),
             ComputeAtStep("matmul_local", "matmul", "j.0"), ReorderStep("matmul_local", ("k", "i", "j")),
             vectorize("matmul_local", "j")]
    text = str(build_program(exact, steps, host_target).func)
    assert "allocate matmul_local[64] float32 local" in text
    assert f" : +{lanes}] = " in text  # a vector store
    assert "matmul_local_j in" not in text


# --- simplifier -------------------------------------------------------------------------------------------
_INT_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
            "mod": operator.mod, "min": min, "max": max}
_CMP_OPS = {"lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne,
            "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b)}


def ev(e, env: dict) -> int:  # noqa: ANN001
    """Value of an integer / boolean expression (floor division semantics)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary):
        return _INT_OPS[e.op](ev(e.a, env), ev(e.b, env))
    if isinstance(e, Compare):
        return int(_CMP_OPS[e.op](ev(e.a, env), ev(e.b, env)))
    if isinstance(e, Not):
        return int(not ev(e.a, env))
    raise TypeError(type(e).__name__)


x, y, z = Var("x"), Var("y"), Var("z")


def same(a, b) -> bool:  # noqa: ANN001
    return expr_key(a) == expr_key(b)


def is_true(e) -> bool:  # noqa: ANN001
    return isinstance(e, IntImm) and e.value == 1


def is_false(e) -> bool:  # noqa: ANN001
    return isinstance(e, IntImm) and e.value == 0


def test_divmod_folds_with_ranges() -> None:
    r = {y: (0, 7)}
    assert same(simplify((x * 8 + y) // 8, r), x)
    assert same(simplify((x * 8 + y) % 8, r), y)
    assert same(simplify((y + x * 8 + 16) // 8, r), x + 2)
    # without a range for y nothing is known about the remainder: the div stays
    kept = simplify((x * 8 + y) // 8)
    assert not same(kept, x) and "//" in repr(kept)
    # y in [0, 8] may carry into the next multiple of 8
    assert "//" in repr(simplify((x * 8 + y) // 8, {y: (0, 8)}))


def test_simplify_is_sound_on_a_grid() -> None:
    ranges = {x: (0, 5), y: (0, 7), z: (0, 3)}
    exprs = [
        (x * 8 + y) // 8, (x * 8 + y) % 8, (x * 16 + y * 2 + 1) // 16, (x * 16 + y * 2 + 1) % 16,
        (x * 6 + z) // 3, (x * 6 + z) % 3, (y * 4 + z) // 4 * 4 + (y * 4 + z) % 4, (x - x) + y * 3 - y,
        te.min(x, 100) + te.max(y, z), (x * 12 + y) // 4, ((x * 8 + y) // 8) * 8 + (x * 8 + y) % 8,
        x * (y + 1) - x * y, (x + y * 7) % 7,
    ]
    for e in exprs:
        s = simplify(e, ranges)
        for vals in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
            env = dict(zip(ranges, vals))
            assert ev(s, env) == ev(e, env), (e, s, env)


def test_linear_cancellation() -> None:
    a = Var("a")
    assert is_false(simplify(a - a)) and simplify(a - a).value == 0
    assert isinstance(simplify((a + 3) - (a + 1)), IntImm) and simplify((a + 3) - (a + 1)).value == 2
    assert same(simplify(a * 4 - a * 4 + y), y)
    assert same(simplify(a * 2 + a * 3 - a * 5 + x), x)
    assert simplify((x + 2) * 3 - x * 3).value == 6
    assert same(simplify(te.min(x, 100), {x: (0, 63)}), x)
    assert same(simplify(te.max(x, 0), {x: (0, 63)}), x)


def test_guard_dropped_only_when_always_true() -> None:
    i = Var("i")
    assert is_true(simplify(i < 64, {i: (0, 63)}))
    kept = simplify(i < 64, {i: (0, 64)})
    assert isinstance(kept, Compare) and kept.op == "lt"
    assert isinstance(simplify(i < 64), Compare)  # unknown range: kept
    buf = Buffer("out", "float32", (80,), "arg")

    def guarded_loop(extent: int) -> Stmt:
        return For(i, extent, IfThen(i < 64, Store(buf, i, FloatImm(1.0))))

    dropped = simplify_stmt(guarded_loop(64))
    assert isinstance(dropped, For) and isinstance(dropped.body, Store)
    assert not any(isinstance(s, IfThen) for s in stmts(dropped))
    kept_loop = simplify_stmt(guarded_loop(65))
    assert isinstance(kept_loop, For) and isinstance(kept_loop.body, IfThen)
    # a guard that never holds removes the code it guards
    never = simplify_stmt(For(i, 10, IfThen(i >= 64, Store(buf, i, FloatImm(1.0)))))
    assert never is None or not any(isinstance(s, Store) for s in stmts(never))


def test_bounds() -> None:
    r = {x: (0, 3), y: (0, 7)}
    assert bounds(x * 8 + y, r) == (0, 31)
    assert bounds(x - y, r) == (-7, 3)
    assert bounds(x * y, r) == (0, 21)
    assert bounds((x * 8 + y) // 4, r) == (0, 7)
    assert bounds(z % 8, {}) == (0, 7)  # whatever z is
    assert bounds(y % 16, r) == (0, 7)  # the range is already inside [0, 16)
    assert bounds(te.min(x, y), r) == (0, 3)
    assert bounds(te.max(x, y), r) == (0, 7)
    assert bounds(IntImm(5), {}) == (5, 5)
    assert bounds(z, r) is None
    assert bounds(x + z, r) is None


def test_conditions() -> None:
    i, j = Var("i"), Var("j")
    r = {i: (0, 63), j: (0, 9)}
    assert is_true(simplify(all_of(i >= 0, i < 64), r))
    assert is_false(simplify(i >= 64, r))
    assert is_false(simplify(all_of(i < 64, i > 63), r))
    assert is_true(simplify(any_of(i < 64, Var("q") < 5), r))
    partial = simplify(all_of(i < 64, Var("q") < 5), r)  # the known half disappears
    assert isinstance(partial, Compare) and partial.op == "lt" and isinstance(partial.a, Var)
    assert partial.a.name == "q"
    assert is_true(simplify(equal(i * 2 - i, i), r))
    assert is_true(simplify(not_equal(i * 2, i * 2 + 1), r))
    assert is_false(simplify(Not(i < 64), r))
    assert is_true(simplify(i + j < 73, r)) and isinstance(simplify(i + j < 72, r), Compare)
    picked = simplify(te.select(i < 64, FloatImm(1.5), FloatImm(2.5)), r)
    assert isinstance(picked, FloatImm) and picked.value == 1.5
    folded = simplify(FloatImm(2.0) * FloatImm(3.5))
    assert isinstance(folded, FloatImm) and folded.value == 7.0


def test_simplify_keeps_reads_of_different_tensors_apart() -> None:
    a = te.placeholder((8,), "int32", "A")
    b = te.placeholder((8,), "int32", "B")
    i = Var("i")
    assert not is_false(simplify(a[i] - b[i]))


# --- bound inference ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,tile,guarded", [([64, 64, 64], (8, 16), False), ([37, 29, 19], (8, 5), True)])
def test_cache_write_buffer_has_the_tile_shape(check_kernel, shape, tile, guarded) -> None:  # noqa: ANN001
    wl = te.make_workload("matmul", shape)
    steps = [CacheWriteStep("matmul"), TileStep("matmul", "i", "j", *tile),
             ComputeAtStep("matmul_local", "matmul", "j.0")]
    func = lowered(wl, steps)
    local = allocations(func.body)["matmul_local"]
    assert local.shape == tile and local.scope == "local"
    assert any(isinstance(s, IfThen) for s in stmts(func.body)) == guarded
    check_kernel(wl, steps)


def test_region_of_outer_attachment_spans_inner_loops() -> None:
    wl = te.make_workload("matmul", [37, 29, 19])
    steps = [CacheWriteStep("matmul"), TileStep("matmul", "i", "j", 8, 5),
             ComputeAtStep("matmul_local", "matmul", "i.0")]  # outside the j loops: all of j
    assert allocations(lowered(wl, steps).body)["matmul_local"].shape == (8, 29)


@pytest.mark.parametrize("conv,split,pad_shape", [
    ([1, 3, 7, 7, 5, 3, 3, 1, 1], 3, (1, 3, 5, 9)),  # 3 output rows + 2 halo rows, padded width 9
    ([1, 3, 9, 9, 4, 3, 3, 2, 1], 2, (1, 3, 5, 11)),  # stride 2: (2 - 1) * 2 + 3 rows
])
def test_conv_pad_region_at_row_tile(check_kernel, conv, split, pad_shape) -> None:  # noqa: ANN001
    wl = te.make_workload("conv2d", conv)
    steps = [SplitStep("conv2d", "y", split), ComputeAtStep("pad", "conv2d", "y.0")]
    func = lowered(wl, steps)
    assert allocations(func.body)["pad"].shape == pad_shape
    pad_alloc = next(s for s in stmts(func.body) if isinstance(s, Allocate) and s.buffer.name == "pad")
    # the last row tile reads past the padded tensor: the copy is clipped by a guard
    assert any(isinstance(s, IfThen) for s in stmts(pad_alloc.body))
    check_kernel(wl, steps)


def test_nested_attachment_regions(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("dense", [13, 21, 11])
    steps = [CacheWriteStep("dense"), CacheReadStep("W", ("dense_local",), (1, 0)),
             TileStep("dense", "i", "j", 4, 8), ComputeAtStep("dense_local", "dense", "j.0"),
             SplitStep("dense_local", "k", 4), ReorderStep("dense_local", ("k.0", "i", "k.1", "j")),
             ComputeAtStep("W_local", "dense_local", "k.0")]
    allocs = allocations(lowered(wl, steps).body)
    assert allocs["dense_local"].shape == (4, 8)
    assert allocs["W_local"].shape == (4, 8)  # [k tile, j tile]: transposed
    check_kernel(wl, steps)


def test_epilogue_region(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("dense_bias_relu", [13, 21, 11])
    steps = [ComputeInlineStep("bias_add"), TileStep("relu", "i0", "i1", 4, 8),
             ComputeAtStep("dense", "relu", "i1.0")]
    allocs = allocations(lowered(wl, steps).body)
    assert allocs["dense"].shape == (4, 8) and allocs["dense"].scope == "local"
    check_kernel(wl, steps)


def test_an_epilogue_reading_its_input_many_times_is_lowered_once_per_read(check_kernel) -> None:  # noqa: ANN001
    """GELU reads its input at one index many times (one shared read node): inlining, substitution
    and lowering keep that one node, so the search's lowering costs what the distinct reads cost."""
    from autotune.te.expr import TensorRead, distinct_nodes, walk

    wl = te.make_workload("dense_bias_gelu", [13, 21, 11])
    body = wl.outputs[0].body
    reads = [n for n in walk(body) if isinstance(n, TensorRead)]
    assert len(reads) > 10 and len([n for n in distinct_nodes(body) if isinstance(n, TensorRead)]) == 1
    for steps in ([ComputeInlineStep("bias_add")],
                  [ComputeInlineStep("bias_add"), TileStep("gelu", "i0", "i1", 4, 8),
                   ComputeAtStep("dense", "gelu", "i1.0")]):
        func = lower(apply_steps(wl.outputs, steps), wl.args, simplify_ir=False)
        store = next(s for s in stmts(func.body) if isinstance(s, Store) and s.buffer.name == "gelu")
        loads = [n for n in walk(store.value) if isinstance(n, Load)]
        assert len(loads) == 2 * len(reads)  # the dense value and the bias, at every read
        assert len({id(n) for n in loads}) == 2
        check_kernel(wl, steps)


def test_compute_at_with_gathered_rows(check_kernel) -> None:  # noqa: ANN001
    import numpy as np

    n, m = 6, 8
    data = te.placeholder((n, m), "float32", "data")
    rows1 = te.placeholder((n,), "int32", "rows1")
    rows2 = te.placeholder((n,), "int32", "rows2")
    twice = te.compute((n, m), lambda a, b: data[a, b] * 2.0, name="twice")
    out = te.compute((n, m), lambda a, b: twice[rows1[a], b] + twice[rows2[a], b], name="out")
    wl = te.Workload(
        "gather_rows", [data, rows1, rows2], [out],
        lambda d, r1, r2: [2.0 * d[r1.astype(np.int64)] + 2.0 * d[r2.astype(np.int64)]],
        input_ranges=[(-1.0, 1.0), (0, n), (0, n)],
    )
    check_kernel(wl, [])  # root placement works
    check_kernel(wl, [ComputeAtStep("twice", "out", "a")])


# --- guards of split tails -------------------------------------------------------------------------------
def guards(func) -> list[IfThen]:  # noqa: ANN001
    return [s for s in stmts(func.body) if isinstance(s, IfThen)]


@pytest.mark.parametrize("steps", [
    [SplitStep("matmul", "i", 8)],
    [SplitStep("matmul", "j", nparts=4)],
    [SplitStep("matmul", "i", 4), SplitStep("matmul", "j", 8), FuseStep("matmul", ("i.1", "j.0"))],
    [TileStep("matmul", "i", "j", 16, 8), FuseStep("matmul", ("i.0", "j.0")), parallel("matmul", "i.0@j.0")],
], ids=["factor", "nparts", "fused", "tile"])
def test_exact_split_has_no_guard(host_target, steps) -> None:  # noqa: ANN001
    wl = te.make_workload("matmul", [32, 32, 16])
    prog = build_program(wl, steps, host_target)
    assert guards(lowered(wl, steps)) == [] and guards(prog.func) == []
    assert "if (" not in prog.source


@pytest.mark.parametrize("loop,n_guards", [("i", 2), ("j", 2), ("k", 1)])
def test_tail_split_has_guard(check_kernel, loop: str, n_guards: int) -> None:  # noqa: ANN001
    wl = te.make_workload("matmul", [37, 29, 19])
    steps = [SplitStep("matmul", loop, 8)]
    func = lowered(wl, steps)
    gs = guards(func)
    # spatial tail: the init and the update are guarded; reduction tail: only the update
    assert len(gs) == n_guards
    extent = {"i": 37, "j": 29, "k": 19}[loop]
    for g in gs:
        assert f"< {extent})" in repr(g.cond)
        body = g.body
        assert isinstance(body, Store)
        if loop == "k":
            assert isinstance(body.value, Binary)  # the accumulating update, not the init
            assert any(isinstance(n, Load) for n in (body.value.a, body.value.b))
    prog = check_kernel(wl, steps)
    assert prog.source.count("if (") == n_guards
