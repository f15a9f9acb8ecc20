"""The ``registers`` knob and pass: accumulators kept in registers over the innermost reduction loop."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from autotune import te
from autotune.ir.nodes import Allocate, Buffer, For, Load, Seq, Store, VLoad, VStore
from autotune.ir.passes import _walk_deep
from autotune.ir.registers import promote_accumulators
from autotune.program import build_program, lower_program
from autotune.search.replay import ReplayDB
from autotune.target import cpu_target, make_target
from autotune.te.expr import Binary, FloatImm, IntImm, Var
from schedules import make_space

DATA = Path(__file__).parent / "data"


def _walk(s):  # noqa: ANN001, ANN202 - every statement
    yield s
    if isinstance(s, Seq):
        for c in s.stmts:
            yield from _walk(c)
    elif isinstance(s, (For, Allocate)):
        yield from _walk(s.body)


def _registers(body) -> list[Buffer]:  # noqa: ANN001
    return [s.buffer for s in _walk(body) if isinstance(s, Allocate) and s.buffer.scope == "register"]


def _matmul_config(registers: int) -> dict:
    # 32x64 output; a 4 x 16 register tile (4 x 2 vectors) under a 16-step inner reduction loop
    return {"tile_i": [2, 1, 4, 4], "tile_j": [2, 1, 2, 16], "tile_k": [4, 16], "parallel_depth": 1,
            "pack": "none", "unroll": 1, "registers": registers}


def test_registers_knob_keeps_the_register_tile_in_registers_and_stays_correct(check_kernel) -> None:  # noqa: ANN001
    wl, target = te.make_workload("matmul", [32, 64, 64]), cpu_target()
    space = make_space(wl, target)
    assert "registers" in [k.name for k in space.knobs]
    configs = [_matmul_config(r) for r in (0, 1)]
    assert all(space.is_valid(c) for c in configs), [space.violated(c) for c in configs]
    # nothing to keep in registers without the unrolled register tile: not a separate config
    assert space.violated(dict(configs[1], unroll=0)) == ["registers"]
    plain, promoted = (build_program(wl, space.steps(c), target).func for c in configs)
    assert not _registers(plain.body)
    regs = _registers(promoted.body)
    lanes = target.vector_lanes  # 8 with AVX2, 16 with AVX-512
    assert len(regs) == 4 * (16 // lanes) and all(b.shape == (lanes,) for b in regs)  # 4 rows x 16
    # the k loop inside them reads and writes registers only: no accumulator traffic in memory
    k_loop = next(s for s in _walk(promoted.body) if isinstance(s, For) and s.extent == 16)
    body = k_loop.body.stmts
    assert len(body) == len(regs) and all(isinstance(s, VStore) and s.buffer in regs for s in body)
    for s in body:
        accs = [n for n in _walk_deep(s.value) if isinstance(n, VLoad) and n.buffer.scope != "arg"]
        assert [n.buffer for n in accs] == [s.buffer]
    assert f"at_f32x{lanes} {regs[0].name};" in build_program(wl, space.steps(configs[1]), target).source
    for c in configs:  # built and run on fresh random inputs, checked against the float64 reference
        check_kernel(wl, space.steps(c))


def test_a_convolution_keeps_its_tile_in_registers_over_the_whole_reduction_nest(check_kernel) -> None:  # noqa: ANN001
    # channel and window loops nested inside the marked loop: one load before, one store after
    wl, target = te.make_workload("conv2d", [1, 16, 18, 18, 16, 3, 3, 1, 0]), cpu_target()
    space = make_space(wl, target)
    rng = np.random.default_rng(7)
    nested = []
    for _ in range(2000):
        c = space.sample(rng)
        deep = [r for r in ("rc", "ry", "rx") if c[f"tile_{r}"][1] > 1]
        if c["registers"] == 1 and len(deep) >= 2:
            nested.append(c)
        if len(nested) == 3:
            break
    assert len(nested) == 3
    for c in nested:
        func = build_program(wl, space.steps(c), target).func
        regs = _registers(func.body)
        assert regs, c
        # at least two reduction loops, one inside the other, update registers and nothing else
        assert len(_register_only_loops(func.body, regs)) >= 2, c
        check_kernel(wl, space.steps(c))


def _register_only_loops(body, regs: list[Buffer]) -> list[For]:  # noqa: ANN001
    """Loops whose every store, however deep, goes to a register."""
    out = []
    for f in (s for s in _walk(body) if isinstance(s, For)):
        stores = [s for s in _walk(f) if isinstance(s, (Store, VStore))]
        if stores and all(s.buffer in regs for s in stores):
            out.append(f)
    return out


def test_promotion_declines_what_it_cannot_prove_and_leaves_a_plain_loop() -> None:
    acc = Buffer("acc", "float32", (64,), "local")
    a = Buffer("a", "float32", (64,), "arg")
    i, j = Var("i"), Var("j")
    k = Var("k")

    def update(index, extra=None):  # noqa: ANN001, ANN202 - acc[index] += a[k] (+ extra)
        value = Binary("add", Load(acc, index), Load(a, k))
        return Store(acc, index, value if extra is None else Binary("add", value, extra))

    def loop(*stores) -> For:  # noqa: ANN002
        return For(k, 8, Seq(list(stores)), "registers")

    ok = promote_accumulators(loop(update(i * IntImm(4)), update(i * IntImm(4) + IntImm(1))))
    assert isinstance(ok, Allocate) and ok.buffer.scope == "register"
    declined = [
        loop(update(i), update(j)),  # two bases: acc[i] and acc[j] may be one element
        loop(update(k)),  # the address moves with the loop
        loop(update(i, Load(acc, i + IntImm(1)))),  # reads an element that is not kept
        For(k, 8, Seq([update(i), Store(a, i, FloatImm(0.0, "float32"))]), "registers"),  # not local
    ]
    for s in declined:
        out = promote_accumulators(s)
        assert isinstance(out, For) and out.kind == "serial"
        assert not [x for x in _walk(out) if isinstance(x, Allocate)]


def test_replay_space_leaves_out_knobs_its_records_predate() -> None:
    replay = ReplayDB(DATA / "replay_cpu.jsonl.gz")
    task = next(t for t in replay.tasks()
                if "registers" in [k.name for k in make_space(t.workload, t.target).knobs])
    assert "registers" not in [k.name for k in task.space.knobs]
    with gzip.open(DATA / "replay_cpu.jsonl.gz", "rt") as fh:
        assert '"registers"' not in fh.read()


def test_the_register_tile_budget_follows_the_vector_register_file() -> None:
    # AVX2 has 16 ymm registers, AVX-512 32 zmm: a 6 x 4-vector tile (24 accumulators) fits only there
    host = cpu_target()
    avx2 = make_target("cpu", dict(host.fingerprint, isa=["sse4_2", "avx", "avx2", "fma"]))
    avx512 = make_target("cpu", dict(host.fingerprint, isa=["avx", "avx2", "fma", "avx512f"]))
    wl = te.make_workload("matmul", [48, 128, 32])
    for target, budget in ((avx2, 16), (avx512, 24)):
        lanes = target.vector_lanes
        space = make_space(wl, target)
        tile = {"tile_i": [2, 1, 4, 6], "tile_j": [2, 1, 64 // (4 * lanes), 4 * lanes], "tile_k": [2, 16],
                "parallel_depth": 1, "pack": "none", "unroll": 1, "registers": 1}
        assert target.accumulator_registers == budget
        assert space.is_valid(tile) == (budget >= 24), space.violated(tile)
        if space.is_valid(tile):
            func = lower_program(wl, space.steps(tile), target)
            assert len(_registers(func.body)) == 24
