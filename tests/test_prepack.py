"""Pre-tiled constant operands (``autotune.prepack``): the layout transform, kernels that read a
weight's tiles in place (checked against numpy through the real runner), and compiled models whose
tuned schedules use them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune.backends.cpu import COLD_REPEAT
from autotune.ir.nodes import Allocate, For, IfThen, Load, Prefetch, Seq, Store, VLoad, VStore
from autotune.ir.passes import _walk_deep
from autotune.measure import Builder, CpuRunner, RunOptions
from autotune.prepack import PrepackSpec, prepack_array
from autotune.program import build_program
from autotune.schedule import ScheduleError
from autotune.search.measure_batch import WorkloadMeasurer
from autotune.target import cpu_target
from autotune.te import library
from autotune.te.expr import Binary, Compare, IntImm, Select, Var
from schedules import make_space


def test_prepack_array_is_the_tiled_transpose() -> None:
    rng = np.random.default_rng(0)
    src = rng.standard_normal((5, 7, 3)).astype(np.float32)
    spec = PrepackSpec(perm=(2, 0, 1), tile=(3, 2, 4), counts=(1, 3, 2))  # 5 -> 3 x 2 tiles, padded
    out = prepack_array(src, spec)
    assert out.shape == (1, 3, 2, 3, 2, 4) and out.flags.c_contiguous
    perm = src.transpose(2, 0, 1)
    for t in np.ndindex(*spec.counts):
        for e in np.ndindex(*spec.tile):
            idx = tuple(ti * ts + ei for ti, ts, ei in zip(t, spec.tile, e))
            want = perm[idx] if all(i < s for i, s in zip(idx, perm.shape)) else 0.0
            assert out[t + e] == want
    ordered = prepack_array(src, dataclasses.replace(spec, order=(2, 0, 1)))
    assert ordered.shape == (2, 1, 3, 3, 2, 4)
    np.testing.assert_array_equal(ordered, out.transpose(2, 0, 1, 3, 4, 5))
    with pytest.raises(ValueError, match="do not cover"):
        prepack_array(src, PrepackSpec((0, 1, 2), (2, 2, 3), (2, 4, 1)))


def test_prepack_array_gathers_the_shifted_last_block() -> None:
    """Along an axis split with overlap (blocks of 4 over 10 elements: 0-3, 4-7, then 6-9 shifted
    back) the tiles of 2 are those the kernel's loops read: 0, 2 | 4, 6 | 6, 8."""
    rng = np.random.default_rng(0)
    src = rng.standard_normal((3, 10)).astype(np.float32)
    spec = PrepackSpec(perm=(0, 1), tile=(3, 2), counts=(1, 6), blocks=(0, 2))
    out = prepack_array(src, spec)
    assert out.shape == (1, 6, 3, 2)
    for t, start in enumerate((0, 2, 4, 6, 6, 8)):
        np.testing.assert_array_equal(out[0, t], src[:, start:start + 2])
    with pytest.raises(ValueError, match="do not fit"):
        prepack_array(src[:, :3], dataclasses.replace(spec, counts=(1, 2)))


def _const_matmul(n: int = 64):  # noqa: ANN202
    wl = library.dense_bias_relu(24, n, 40)  # x[24,40] @ w -> 24xn, + bias, relu
    return dataclasses.replace(wl, const_inputs=(1,))


def test_constness_is_part_of_the_key_and_opens_the_prepacked_choice() -> None:
    wl = _const_matmul()
    plain = library.dense_bias_relu(24, 64, 40)
    assert wl.key != plain.key
    target = cpu_target()
    choices = next(k.choices for k in make_space(wl, target).knobs if k.name == "pack")
    plain_choices = next(k.choices for k in make_space(plain, target).knobs if k.name == "pack")
    weight = wl.inputs[1].name
    assert f"{weight}@pre" in choices and not any(c.endswith("@pre") for c in plain_choices)


def _prepacked_configs(wl, n: int) -> list[dict]:  # noqa: ANN001
    space = make_space(wl, cpu_target())
    rng = np.random.default_rng(1)
    out: list[dict] = []
    while len(out) < n:
        c = space.sample(rng)
        if c["pack"].endswith("@pre"):
            out.append(c)
    return out


def _measured(wl, target, configs: list[dict], steps: list) -> tuple:  # noqa: ANN001
    """(the measurer, its trials) of ``configs`` run through the real runner: the worker re-lays
    pre-tiled inputs out and checks every output against the float64 reference."""
    runner = CpuRunner()
    try:
        m = WorkloadMeasurer(wl, target, Builder(workers=2), runner, RunOptions(repeat=1, min_repeat_ms=1))
        return m, list(m.measure(configs, steps))
    finally:
        runner.close()


def test_prepacked_kernels_read_tiles_in_place_and_are_correct() -> None:
    wl, target = _const_matmul(), cpu_target()
    space = make_space(wl, target)
    configs = _prepacked_configs(wl, 4)
    steps = [space.steps(c) for c in configs]
    for st in steps:
        prog = build_program(wl, st, target)
        ((i, spec),) = prog.prepack
        assert i == 1 and prog.func.args[1].shape == spec.counts + spec.tile
        local = [n for n in _walk_deep(prog.func.body) if isinstance(n, Allocate)]
        assert not any(a.buffer.name.startswith(wl.inputs[1].name) for a in local)  # no copy in the kernel
    m, trials = _measured(wl, target, configs, steps)
    # the worker re-lays the weight out and checks the output against the float64 reference
    assert [t.error_kind for t in trials] == [None] * len(configs), [t.error_msg for t in trials]
    # a model's weight is cold when its kernel runs: one call per repeat, the weight flushed first
    assert m.options.cold_inputs == (1,)
    assert all(len(t.costs) == COLD_REPEAT and min(t.costs) > 0 for t in trials)


def test_a_weight_along_an_overlapping_axis_is_prepacked_by_blocks() -> None:
    """100 outputs on 16 lanes: the output axis is tiled over 112 with its last block shifted back
    (``overlap``); a pre-tiled weight then stores that block's tiles from the shifted start, and
    the kernels that read it so compute right (checked against the float64 reference)."""
    wl, target = _const_matmul(100), cpu_target()
    space = make_space(wl, target)
    configs = _prepacked_configs(wl, 6)
    steps = [space.steps(c) for c in configs]
    blocked = 0
    for st in steps:
        ((i, spec),) = build_program(wl, st, target).prepack
        blocked += spec.blocks is not None
    assert blocked >= 3, "most sampled tilings of 100 overlap"
    m, trials = _measured(wl, target, configs, steps)
    assert [t.error_kind for t in trials] == [None] * len(configs), [t.error_msg for t in trials]


def test_only_an_input_can_be_prepacked() -> None:
    from autotune.schedule import CacheReadStep, apply_steps

    wl = _const_matmul()
    out = apply_steps(wl.outputs, []).stages[-1]
    computed = next(t for t in out.reads() if not t.is_placeholder)
    with pytest.raises(ScheduleError, match="only an input"):
        apply_steps(wl.outputs, [CacheReadStep(computed.name, (out.name,), None, "prepacked")])


def test_compiled_model_binds_tiled_weights_and_matches_onnxruntime(tmp_path) -> None:  # noqa: ANN001
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from autotune.graph import compile_model, zoo
    from autotune.graph.compiler import prepare
    from autotune.search.tune import register
    from records import MeasurementRecord, TuningDatabase

    spec = "zoo:mlp?batch=2,inputs=16,hidden=32,classes=20"  # 20 classes: an overlapping axis
    target = cpu_target()
    prepared = prepare(spec, "NHWC")
    with TuningDatabase(tmp_path / "t.db") as db:
        tiled = 0
        for t in prepared.tasks:
            wl = t.workload
            pack = next((k.choices for k in make_space(wl, target).knobs if k.name == "pack"), ())
            if not any(c.endswith("@pre") for c in pack):
                continue
            cfg = _prepacked_configs(wl, 1)[0]
            steps = [s.to_dict() for s in make_space(wl, target).steps(cfg)]
            register(db, wl, target)
            db.add_measurement(MeasurementRecord(t.key, target.key, cfg, steps, (1e-6,), None, verified=True))
            tiled += 1
        assert tiled >= 2  # the MLP's three dense layers have constant weights
        module = compile_model(prepared, target, db, cache_dir=str(tmp_path / "m"), verbose=False)
    assert module.summary.tuned_tasks == tiled
    bound = [v for v in module.plan.consts if "@tiles" in v]
    assert len(bound) == tiled
    feeds = module.random_inputs(np.random.default_rng(5))
    sess = ort.InferenceSession(zoo.make_model(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    for o, r in zip(module.run(feeds), sess.run(None, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))


def _index_value(e, env: dict) -> int:  # noqa: ANN001 - the index arithmetic of lowered IR
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Select):
        return _index_value(e.t if _index_value(e.cond, env) else e.f, env)
    a, b = _index_value(e.a, env), _index_value(e.b, env)
    if isinstance(e, Binary):
        ops = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}
        if e.op in ("floordiv", "mod"):
            return a // b if e.op == "floordiv" else a % b
        return ops[e.op]
    assert isinstance(e, Compare)
    return {"lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b, "and": a and b, "or": a or b}[e.op]


def _trace_weight(stmt, weight: str, env: dict, log: list) -> None:  # noqa: ANN001
    """Run the loop nest's index arithmetic: ("prefetch", element) and ("read", element) events
    on the prepacked weight, in program order; each iteration of a parallel loop is its own
    thread."""
    if isinstance(stmt, Seq):
        for s in stmt.stmts:
            _trace_weight(s, weight, env, log)
    elif isinstance(stmt, For):
        for i in range(stmt.extent):
            if stmt.kind == "parallel":
                log.append(("thread", i))
            _trace_weight(stmt.body, weight, {**env, stmt.var: i}, log)
    elif isinstance(stmt, (IfThen, Allocate)):
        if not isinstance(stmt, IfThen) or _index_value(stmt.cond, env):
            _trace_weight(stmt.body, weight, env, log)
    elif isinstance(stmt, Prefetch):
        assert stmt.buffer.name == weight
        log.append(("prefetch", _index_value(stmt.index, env)))
    elif isinstance(stmt, (Store, VStore)):
        for n in _walk_deep(stmt.value):
            if isinstance(n, Load) and n.buffer.name == weight:
                log.append(("read", _index_value(n.index, env)))
            elif isinstance(n, VLoad) and n.buffer.name == weight:
                log.append(("read", _index_value(n.base, env)))


def test_prepacked_tiles_are_prefetched_before_the_thread_reads_them() -> None:
    wl, target = _const_matmul(), cpu_target()
    space = make_space(wl, target)
    checked = 0
    for c in _prepacked_configs(wl, 6):
        prog = build_program(wl, space.steps(c), target)
        weight = prog.func.args[1].name
        log: list = []
        _trace_weight(prog.func.body, weight, {}, log)
        if not any(kind == "prefetch" for kind, _ in log):
            continue  # one tile per thread: nothing comes next
        checked += 1
        ((_, spec),) = prog.prepack
        tile_elems = int(np.prod(spec.tile))
        prefetched: set[int] = set()  # 16-float lines
        seen: set[int] = set()
        first_tile = None
        for kind, e in log:
            if kind == "thread":
                prefetched, seen, first_tile = set(), set(), None
            elif kind == "prefetch":
                prefetched.add(e // 16)
            else:
                first_tile = e // tile_elems if first_tile is None else first_tile
                # every line of a later tile was requested before the thread first needs it
                assert e // tile_elems == first_tile or e // 16 in prefetched | seen, (c, e)
                seen.add(e // 16)
    assert checked >= 2


def _weight_reads_per_half(prog, weight_arg: int = 1) -> tuple[set[int], set[int]]:  # noqa: ANN001
    """Weight elements read by the first and the second half of the parallel loop's iterations
    (the two threads of a static OpenMP schedule on two cores)."""
    log: list = []
    _trace_weight(prog.func.body, prog.func.args[weight_arg].name, {}, log)
    per_thread: list[set[int]] = []
    for kind, e in log:
        if kind == "thread":
            per_thread.append(set())
        elif kind == "read":
            per_thread[-1].add(e)
    half = len(per_thread) // 2
    return set().union(*per_thread[:half]), set().union(*per_thread[half:])


def test_outer_order_gives_each_thread_its_own_weight_panels() -> None:
    wl, target = _const_matmul(), cpu_target()
    space = make_space(wl, target)
    plain_knobs = [k.name for k in make_space(library.dense_bias_relu(24, 64, 40), target).knobs]
    assert "outer_order" in [k.name for k in space.knobs] and "outer_order" not in plain_knobs
    # 2 row tiles x 2 column tiles of the output in the parallel loop, the weight pre-tiled
    base = {"tile_i": [2, 1, 6, 2], "tile_j": [2, 1, 1, 32], "tile_k": [10, 4], "parallel_depth": 1,
            "pack": "W@pre", "unroll": 0, "registers": 0}
    configs = [dict(base, outer_order=o) for o in (0, 1)]
    assert all(space.is_valid(c) for c in configs)
    progs = [build_program(wl, space.steps(c), target) for c in configs]
    rows_first, cols_first = (_weight_reads_per_half(p) for p in progs)
    # rows outermost: both halves read the whole weight; columns outermost: disjoint panels
    assert rows_first[0] == rows_first[1] and rows_first[0]
    assert cols_first[0] and cols_first[1] and not cols_first[0] & cols_first[1]
    runner = CpuRunner()
    try:
        m = WorkloadMeasurer(wl, target, Builder(workers=2), runner, RunOptions(repeat=1, min_repeat_ms=1))
        trials = list(m.measure(configs, [space.steps(c) for c in configs]))
    finally:
        runner.close()
    # both orders checked against the float64 reference on fresh random inputs by the worker
    assert [t.error_kind for t in trials] == [None, None], [t.error_msg for t in trials]


def test_records_from_before_the_order_and_register_knobs_read_as_their_former_code() -> None:
    """A config recorded before ``outer_order`` and ``registers`` existed (a task whose weight
    became prepackable later) is completed with 0, what the code did then, so the model-guided
    tuner can learn from it (it failed with a KeyError on ViT's classifier before)."""
    space = make_space(_const_matmul(), cpu_target())
    old = {k: v for k, v in space.default_config().items() if k not in ("outer_order", "registers")}
    done = space.completed(old)
    assert done["outer_order"] == 0 and done["registers"] == 0
    assert len(space.encode(old)) == len(space.encode(space.default_config()))
