"""End to end: compiled zoo models (reduced sizes) match onnxruntime; the module is one library
with one entry point; tune --model / compile.py / bench.py --model, and their bad-input errors."""

from __future__ import annotations

import ctypes
import json
import os
import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from autotune.graph import compile_model, zoo  # noqa: E402
from autotune.measure.cuda_device import has_cuda_device  # noqa: E402

MLP = "zoo:mlp?batch=2,inputs=16,hidden=32,classes=8"
RESNET = "zoo:resnet18?image=32,width=8"
BERT = "zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("modules"))


def onnxruntime_outputs(spec: str, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(zoo.make_model(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize(
    "spec,layout", [(MLP, "NHWC"), (RESNET, "NHWC"), (BERT, "NHWC")], ids=["mlp", "resnet", "bert"]
)  # NCHW kernels: test_every_listed_operator_compiles_and_matches_onnxruntime
def test_compiled_zoo_models_match_onnxruntime(spec: str, layout: str, cache: str) -> None:
    module = compile_model(spec, layout=layout, cache_dir=cache, verbose=False)
    feeds = module.random_inputs(np.random.default_rng(3))
    ours = module.run(feeds)
    ref = onnxruntime_outputs(spec, feeds)
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))
    assert module.summary.tuned_calls == 0 and len(module.summary.fallback) == module.summary.tasks


def test_one_library_one_entry_point_and_the_run_api(cache: str) -> None:
    module = compile_model(BERT, cache_dir=cache, verbose=False)
    lib = ctypes.CDLL(module.lib_path)
    kernels = [c.program.kernel_name for c in module.choices]
    for name in set(kernels) | {module.executable.entry.__name__, "autotune_time"}:
        assert hasattr(lib, name), name
    entry = module.entry_source
    positions = [entry.index(f"{kernels[call.task]}(p)") for call in module.prepared.calls[:1]]
    assert positions and entry.count("(p); }") == len(module.prepared.calls)
    feeds = module.random_inputs()
    by_name = module.run(feeds)
    by_position = module.run([feeds[n] for n in module.input_names])
    np.testing.assert_array_equal(by_name[0], by_position[0])
    with pytest.raises(ValueError, match="missing input 'mask'"):
        module.run({"hidden": feeds["hidden"]})
    with pytest.raises(ValueError, match="expected shape"):
        module.run({"hidden": feeds["hidden"][:, :3], "mask": feeds["mask"]})
    assert module.summary.arena_bytes < module.summary.naive_bytes
    assert min(module.time(feeds, repeat=1, min_repeat_ms=0)) > 0


def _misaligned(a: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def test_inputs_are_read_where_they_lie_or_converted_once(cache: str) -> None:
    """A module reads a C-contiguous input of its type where it lies, on any alignment; a strided
    one or one of another float type is converted into a buffer the module keeps for the next
    call. Every way gives the same outputs, bit for bit."""
    module = compile_model(MLP, cache_dir=cache, verbose=False)
    ((name, x),) = module.random_inputs(np.random.default_rng(5)).items()
    (want,) = module.run([x])
    assert module._inputs([x])[0] is x and module._inputs({name: x})[0] is x  # taken as they are
    for offset in (4, 16, 32):
        shifted = _misaligned(x, offset)
        assert shifted.ctypes.data % 64 == offset
        np.testing.assert_array_equal(module.run([shifted])[0], want)
    assert not module._staging, "nothing copied for a contiguous float32 input"
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(module.run([strided])[0], want)
    kept = module._staging[0]
    np.testing.assert_array_equal(module.run([x.astype(np.float64)])[0], want)
    assert module._staging[0] is kept and kept.ctypes.data % 64 == 0


def test_weights_and_arena_lie_in_one_buffer_on_a_huge_page_boundary(cache: str) -> None:
    """From 2 MiB on, a module copies its weights and places its arena in one buffer that starts on
    a 2 MiB boundary (huge pages asked for); it computes what the same library computes with
    ordinary pages, bit for bit, and what onnxruntime computes. Each run returns new output arrays."""
    from autotune.aligned import HUGE_PAGE, address
    from autotune.graph.runtime import CpuExecutable

    spec = "zoo:mlp?batch=2,inputs=1024,hidden=1024,classes=8"  # a 4 MiB weight
    module = compile_model(spec, cache_dir=cache, verbose=False)
    ex = module.executable
    assert ex.huge_pages and address(ex._memory) % HUGE_PAGE == 0
    start, end = address(ex._memory), address(ex._memory) + ex._memory.nbytes
    for a in [*ex._consts, ex._arena]:
        assert address(a) % 64 == 0 and start <= address(a) and address(a) + a.nbytes <= end
    plain = CpuExecutable(ex.lib_path, ex.entry_name, ex.graph, ex.plan, huge_pages=False)
    assert not plain.huge_pages
    feeds = module.random_inputs(np.random.default_rng(8))
    first, second = module.run(feeds), module.run(feeds)
    assert first[0] is not second[0] and not np.shares_memory(first[0], second[0])
    np.testing.assert_array_equal(first[0], second[0])
    out = [np.empty_like(first[0])]
    plain.run(module._inputs(feeds), out)
    np.testing.assert_array_equal(out[0], first[0])
    (ref,) = onnxruntime_outputs(spec, feeds)
    np.testing.assert_allclose(first[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_rerank_picks_among_each_tasks_best_records_by_their_time_in_the_module(tmp_path, cache: str) -> None:  # noqa: ANN001
    from autotune.graph.compiler import prepare
    from autotune.search.tune import register
    from autotune.target import cpu_target
    from records import MeasurementRecord, TuningDatabase, config_key
    from schedules import make_space

    target, prepared = cpu_target(), prepare(MLP, "NHWC")
    rng = np.random.default_rng(11)
    with TuningDatabase(tmp_path / "r.db") as db:
        for t in prepared.tasks:
            space = make_space(t.workload, target)
            register(db, t.workload, target)
            for i in range(4):  # four configs per task, recorded as if tuned (made-up times)
                cfg = space.sample(rng)
                steps = [st.to_dict() for st in space.steps(cfg)]
                db.add_measurement(MeasurementRecord(t.key, target.key, cfg, steps, ((i + 1) * 1e-5,), None,
                                                     verified=True))
        top = {t.key: [r.config for r in db.top(t.workload.key, target.key, 3)] for t in prepared.tasks}
        assert all(len({config_key(c) for c in cs}) == len(cs) for cs in top.values())
        plain = compile_model(prepared, target, db, cache_dir=cache, verbose=False)
        module = compile_model(prepared, target, db, cache_dir=cache, verbose=False, rerank=3)
    for c, p in zip(module.choices, plain.choices):
        assert p.config == top[p.task.key][0]  # without rerank: the fastest record
        assert c.config in top[c.task.key]  # with it: one of the three fastest
    assert module.summary.reranked == sorted({c.task.label for c, p in zip(module.choices, plain.choices)
                                              if c.config != p.config})
    feeds = module.random_inputs(np.random.default_rng(3))
    for o, r in zip(module.run(feeds), onnxruntime_outputs(MLP, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))


def test_outputs_that_are_inputs_or_aliases_are_copied(cache: str) -> None:
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [4, 2])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["r2"]),
        helper.make_node("Identity", ["x"], ["xi"]),
    ]
    graph = helper.make_graph(
        nodes,
        "aliases",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in (("r", [2, 4]), ("r2", [4, 2]), ("xi", [2, 4]))
        ],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    module = compile_model(model, cache_dir=cache, verbose=False)
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    r, r2, xi = module.run({"x": x})
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    np.testing.assert_array_equal(r2, np.maximum(x, 0).reshape(4, 2))
    np.testing.assert_array_equal(xi, x)


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_tune_compile_bench_cli_on_a_small_mlp(tmp_path, capsys) -> None:  # noqa: ANN001
    from autotune.cli import bench, tune
    from autotune.cli import compile as compile_cli

    db = str(tmp_path / "t.db")
    base = ["--model", MLP, "--db", db, "--batch-size", "2", "--json", "--no-progress"]
    assert tune.main(base + ["--trials", "8"]) == 0
    first = _last_json(capsys.readouterr().out)
    assert first["model"] == "mlp" and first["trials"] == 8 and first["new_trials"] == 8
    tasks = first["tasks"]
    # warm-up: every task gets measured
    assert len(tasks) == 4 and all(t["trials"] >= 1 and t["weight"] == 1 for t in tasks)
    assert sum(t["trials"] for t in tasks) == 8
    # where the tuning time went: every stage took some, and they add up to the wall time
    secs = first["seconds"]
    assert set(secs) == {"render", "build", "run", "search_and_db"} and all(v > 0 for v in secs.values())
    assert sum(secs.values()) <= first["elapsed_s"] + 0.05 and 0 < first["runner_busy"] < 1
    assert tune.main(base + ["--trials", "10"]) == 0  # resumes: tops up to 10
    again = _last_json(capsys.readouterr().out)
    assert again["trials"] == 10 and again["new_trials"] == 2

    assert (
        compile_cli.main(["--model", MLP, "--db", db, "--check", "--json", "-o", str(tmp_path / "m.so"),
                          "--profile", "2"]) == 0
    )
    captured = capsys.readouterr()  # --json: the JSON alone on stdout, the human lines on stderr
    out = captured.err
    assert "4/4 fused subgraphs use tuned schedules" in out
    assert len(captured.out.strip().splitlines()) == 1
    summary = _last_json(captured.out)
    assert summary["ok"] and summary["tuned_subgraphs"] == 4 and os.path.isfile(summary["library"])
    # the per-kernel profile: every call once, in order, timed, next to its task's tuning record
    prof = summary["profile"]
    assert [r["call"] for r in prof] == [0, 1, 2, 3]
    assert all(r["seconds"] > 0 and r["tuned_s"] > 0 for r in prof)
    assert {r["label"] for r in prof} == {t["workload"] for t in tasks}
    assert "sum of calls" in out

    assert bench.main(["--model", MLP, "--db", db, "--json", "--repeat", "1", "--min-repeat-ms", "1"]) == 0
    result = _last_json(capsys.readouterr().out)
    for key in (
        "model",
        "target",
        "latency_s",
        "baseline",
        "baseline_latency_s",
        "speedup",
        "tuned_subgraphs",
        "fallback_subgraphs",
        "peak_arena_bytes",
        "max_abs_err",
    ):
        assert key in result, key
    assert (
        result["baseline"] == "onnxruntime"
        and result["max_abs_err"] < 1e-4
        and result["fallback_subgraphs"] == 0
    )


def _bad_models(tmp_path) -> dict[str, str]:  # noqa: ANN001
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage" * 50)
    dyn = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "dyn",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    missing = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "b"], ["y"], name="add_b")],
            "missing",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    paths = {"not an ONNX model": str(junk)}
    for name, m in (("dynamic dims", dyn), ("missing input", missing)):
        m.ir_version = 8
        path = tmp_path / f"{name.replace(' ', '_')}.onnx"
        onnx.save(m, str(path))
        paths[name] = str(path)
    return paths


@pytest.mark.parametrize("tool", ["tune", "compile", "bench"])
def test_bad_models_give_one_line_and_exit_2_without_touching_the_db(tool: str, tmp_path, capsys) -> None:  # noqa: ANN001
    from autotune.cli import bench, tune
    from autotune.cli import compile as compile_cli

    main = {"tune": tune.main, "compile": compile_cli.main, "bench": bench.main}[tool]
    db = tmp_path / "never.db"
    for expected, path in _bad_models(tmp_path).items():
        with pytest.raises(SystemExit) as info:
            main(["--model", path, "--db", str(db)])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and len(err.splitlines()) == 1 and expected in err, err
        assert not db.exists()


def test_tune_with_no_arguments_tunes_the_embedded_default_model(monkeypatch) -> None:  # noqa: ANN001
    from autotune.cli import model as graph_cli
    from autotune.cli import tune

    seen = {}
    monkeypatch.setattr(graph_cli, "run_model_tuning", lambda args: seen.update(vars(args)) or 0)
    assert tune.main([]) == 0
    assert seen["model"] == tune.DEFAULT_MODEL == "zoo:mlp" and seen["trials"] == tune.DEFAULT_MODEL_TRIALS
    seen.clear()
    assert tune.main(["--trials", "7"]) == 0 and seen["trials"] == 7
    assert zoo.make_model(tune.DEFAULT_MODEL).graph.node  # the default model builds


def test_every_listed_operator_compiles_and_matches_onnxruntime(cache: str) -> None:
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(np.float32(0.25), "k")),
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Concat", ["s", "t"], ["cat"], axis=1),
        helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["ap"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sub", ["mp", "k"], ["sub"]),
        helper.make_node("Div", ["sub", "two"], ["div"]),
        helper.make_node("Mul", ["div", "div"], ["sq"]),
        helper.make_node("GlobalAveragePool", ["sq"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["fc"], transB=1, alpha=0.5),
        helper.make_node("Gelu", ["fc"], ["g"]),
        helper.make_node("Unsqueeze", ["g", "axes"], ["u"]),
        helper.make_node("Transpose", ["u"], ["tr"], perm=[1, 0, 2]),
        helper.make_node("LayerNormalization", ["tr", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("Softmax", ["ln"], ["y"], axis=-1),
    ]
    inits = [
        init("w", 3, 4, 3, 3),
        init("cb", 3),
        init("fw", 6, 7),
        init("fb", 6),
        init("gamma", 6),
        init("beta", 6),
        onnx.numpy_helper.from_array(np.float32(2.0), "two"),
        onnx.numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
    ]
    graph = helper.make_graph(
        nodes,
        "allops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 6])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    for layout in ("NHWC", "NCHW"):
        (y,) = compile_model(model, layout=layout, cache_dir=cache, verbose=False).run({"x": x})
        np.testing.assert_allclose(y, ref[0], rtol=1e-4, atol=1e-5)


def test_a_model_with_an_infinite_constant_tunes_and_its_tasks_keep_their_keys(tmp_path, capsys) -> None:  # noqa: ANN001
    """An attention mask written as Where(mask, scores, -inf) (Hugging Face's legacy exports): the
    folded -inf is stored by name in the task's description (strict JSON), the description rebuilds
    the same workload key, and tuning then compiling the model works."""
    import onnx

    from autotune.cli import tune
    from autotune.graph.compiler import prepare
    from autotune.graph.subgraph import build_workload
    from records.record import canonical_json

    ninf = helper.make_tensor("ninf", TensorProto.FLOAT, [], [float("-inf")])
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Where", ["mask", "s", "ninf"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])],
            "masked",
            [helper.make_tensor_value_info("q", TensorProto.FLOAT, [8, 16]),
             helper.make_tensor_value_info("k", TensorProto.FLOAT, [16, 8]),
             helper.make_tensor_value_info("mask", TensorProto.BOOL, [8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])],
            [ninf],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    path = str(tmp_path / "masked.onnx")
    onnx.save(model, path)
    tasks = prepare(path).tasks
    texts = [canonical_json(t.workload.description()) for t in tasks]
    assert any('"-inf"' in t for t in texts)
    assert all(build_workload(t.workload.description()).key == t.workload.key for t in tasks)
    db = str(tmp_path / "t.db")
    args = ["--model", path, "--db", db, "--trials", "4", "--batch-size", "2", "--json", "--no-progress"]
    assert tune.main(args) == 0
    out = _last_json(capsys.readouterr().out)
    assert out["trials"] == 4 and out["errors"] == 0  # (the mask's select inlined into the epilogue)


def test_records_whose_steps_name_axes_by_position_still_replay(tmp_path) -> None:  # noqa: ANN001
    """Graph operators once named a stage's spatial axes i0, i1, ... by position; a MatMul's are
    z.., i, j today. A record of that time (same workload key) compiles with its own schedule."""
    from autotune.graph.compiler import choose_schedule, positional_axes_renamed, prepare
    from autotune.graph.zoo import make_model
    from autotune.search.tune import register
    from autotune.target import cpu_target
    from records import MeasurementRecord, TuningDatabase
    from schedules import make_space

    target = cpu_target()
    task = next(t for t in prepare(make_model("zoo:mlp")).tasks if t.workload.name.startswith("matmul"))
    wl = task.workload
    space = make_space(wl, target)
    config = space.default_config()
    steps = json.loads(json.dumps([s.to_dict() for s in space.steps(config)]))  # as stored
    anchor = next(t for t in wl.tensors if not t.is_placeholder and t.name.startswith("matmul"))
    today = [a.name for a in anchor.axes]
    assert today[-2:] == ["i", "j"]
    old = {name: f"i{d}" for d, name in enumerate(today)}

    def positional(loop: str) -> str:
        return "@".join(old.get(p.partition(".")[0], p.partition(".")[0]) + "".join(p.partition(".")[1:])
                        for p in loop.split("@"))

    recorded = []
    for d in steps:
        d = dict(d)
        at = d.get("target") if d["step"] == "compute_at" else d.get("stage")
        if at == anchor.name or (at or "").removesuffix("_local") == anchor.name:
            if "loop" in d:
                d["loop"] = positional(d["loop"])
            if "loops" in d:
                d["loops"] = [positional(x) for x in d["loops"]]
        recorded.append(d)
    assert recorded != steps  # the anchor's loops did carry positional names
    assert positional_axes_renamed(wl, recorded) == steps
    db_path = tmp_path / "old.db"
    with TuningDatabase(db_path) as db:
        register(db, wl, target)
        old_record = MeasurementRecord(wl.key, target.key, config, recorded, (1e-5,), None, verified=True)
        db.add_measurements([old_record])
    with TuningDatabase(db_path, readonly=True) as db:
        choice = choose_schedule(task, target, db)
    assert choice.tuned and json.loads(json.dumps([s.to_dict() for s in choice.steps])) == steps


def squeeze_excite_model(batch: int, rng: np.random.Generator) -> onnx.ModelProto:
    """conv -> SiLU -> global pool -> two 1x1 convs -> sigmoid gate -> conv(x * gate)."""

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).ravel().tolist())

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["y"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["y"], ["ys"]),
        helper.make_node("Mul", ["y", "ys"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["p"]),
        helper.make_node("Conv", ["p", "w2"], ["q"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["q"], ["r"]),
        helper.make_node("Conv", ["r", "w3"], ["t"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("Mul", ["s", "a"], ["m"]),
        helper.make_node("Conv", ["m", "w4", "b4"], ["z"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "se",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 16, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 6, 16, 16])],
        initializer=[const("w1", 24, 8, 1, 1), const("w2", 4, 24, 1, 1), const("w3", 24, 4, 1, 1),
                     const("w4", 6, 24, 1, 1), const("b4", 6)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("batch", [1, 2])
def test_a_squeeze_excite_block_matches_onnxruntime(batch: int, cache: str) -> None:
    """Both layouts against onnxruntime."""
    rng = np.random.default_rng()
    model = squeeze_excite_model(batch, rng)
    x = rng.standard_normal((batch, 8, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    for layout in ("NHWC", "NCHW"):
        (z,) = compile_model(model, layout=layout, cache_dir=cache, verbose=False).run({"x": x})
        np.testing.assert_allclose(z, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.skipif(shutil.which("nvcc") is None or has_cuda_device(), reason="nvcc without a GPU")
def test_a_squeeze_excite_block_builds_with_nvcc(cache: str) -> None:
    """Without a GPU the CUDA module still compiles (every lane-wise function the vectorizer emits,
    sigmoid included, has its float4 form) and only loading it fails."""
    from autotune.graph.cuda_module import CudaModuleError
    from autotune.target import offline_cuda_target

    with pytest.raises(CudaModuleError, match="loading the module"):
        compile_model(squeeze_excite_model(1, np.random.default_rng()), offline_cuda_target("sm_90"),
                      cache_dir=cache, verbose=False)


@pytest.mark.skipif(not has_cuda_device(), reason="no CUDA device")
def test_a_squeeze_excite_block_runs_right_on_the_gpu(cache: str) -> None:
    from autotune.measure.cuda_device import query_device
    from autotune.target import cuda_target

    rng = np.random.default_rng()
    model = squeeze_excite_model(1, rng)
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    (z,) = compile_model(model, cuda_target(query_device()), cache_dir=cache, verbose=False).run({"x": x})
    np.testing.assert_allclose(z, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
