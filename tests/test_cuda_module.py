"""The CUDA module of a compiled model: one .cu with every kernel and a host launch sequence
captured as a CUDA graph. Without a GPU: the module source has that shape and nvcc builds it into
one self-contained library whose load fails with one clear error. With a GPU: outputs match
onnxruntime."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from autotune.graph import compile_model, zoo  # noqa: E402
from autotune.graph.compiler import choose_schedule, load_model, prepare  # noqa: E402
from autotune.graph.cuda_module import CudaModuleError, module_source  # noqa: E402
from autotune.graph.memory import plan_memory  # noqa: E402
from autotune.measure.cuda_device import has_cuda_device  # noqa: E402
from autotune.target import offline_cuda_target  # noqa: E402

MLP = "zoo:mlp?batch=2,inputs=16,hidden=32,classes=8"
BERT = "zoo:bert_layer?seq=16,hidden=32,heads=2,ffn=64"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def _source(spec: str) -> tuple[str, int, int]:
    target = offline_cuda_target("sm_90")
    prepared = prepare(spec)
    choices = [choose_schedule(t, target, None) for t in prepared.tasks]
    programs = [choices[c.task].program for c in prepared.calls]
    plan = plan_memory(prepared.graph, prepared.calls)
    return module_source("model_x", prepared.calls, programs, prepared.graph, plan), len(prepared.calls), len(
        prepared.tasks
    )


def test_module_source_launches_every_call_from_one_captured_sequence() -> None:
    src, calls, tasks = _source(BERT)
    assert src.count("<<<dim3(") >= calls  # a task may take more than one kernel
    assert src.count("#define AT_INF") == 1, "the prelude appears once"
    assert src.count('extern "C" __global__') >= tasks
    for needle in ("cudaStreamBeginCapture", "cudaGraphInstantiate", "cudaGraphLaunch",
                   'extern "C" int model_x_init(', 'extern "C" int model_x_run(',
                   'extern "C" int model_x_time(', 'extern "C" void model_x_device_runs(', "M.arena +",
                   "M.consts[", "io[0]"):
        assert needle in src, needle


@needs_nvcc
@pytest.mark.skipif(has_cuda_device(), reason="covered by the GPU test")
def test_module_builds_with_nvcc_and_fails_to_load_clearly_without_a_gpu(tmp_path: Path) -> None:
    with pytest.raises(CudaModuleError, match="loading the module"):
        compile_model(MLP, offline_cuda_target("sm_90"), cache_dir=str(tmp_path), verbose=False)
    libs = list((tmp_path / "cuda").glob("cuda_module_*.so"))
    assert len(libs) == 1
    lib = ctypes.CDLL(str(libs[0]))  # self-contained: the CUDA runtime is linked in statically
    entry = "model_" + "".join(ch if ch.isalnum() else "_" for ch in zoo.make_model(MLP).graph.name)[:40]
    for fn in ("init", "run", "run_device", "device_runs", "time", "error", "free"):
        assert hasattr(lib, f"{entry}_{fn}")


@pytest.mark.skipif(not has_cuda_device(), reason="no CUDA device")
@pytest.mark.parametrize(
    "spec,precision",
    [(MLP, "fp32"), (BERT, "fp32"), (MLP, "fp16"), (BERT, "fp16"), ("zoo:resnet18?image=32,width=8", "fp16"),
     (BERT, "bf16")],
    ids=["mlp", "bert", "mlp_fp16", "bert_fp16", "resnet_fp16", "bert_bf16"],
)
def test_cuda_module_matches_onnxruntime(spec: str, precision: str, tmp_path: Path) -> None:
    """The module on the GPU against onnxruntime's float32: within 1e-4 in fp32, within the
    precision's stated tolerance (graph.precision.OUTPUT_TOLERANCE) with tensor-core products."""
    from autotune.graph.precision import output_tolerance
    from autotune.measure.cuda_device import query_device
    from autotune.target import cuda_target

    graph = load_model(spec)
    graph.precision = precision
    module = compile_model(graph, cuda_target(query_device()), cache_dir=str(tmp_path), verbose=False)
    feeds = module.random_inputs(np.random.default_rng(5))
    ours = module.run(feeds)
    sess = ort.InferenceSession(zoo.make_model(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    tol = 1e-4 if precision == "fp32" else output_tolerance(precision)
    for o, r in zip(ours, sess.run(None, feeds)):
        np.testing.assert_allclose(o, r, rtol=tol, atol=tol * max(1.0, float(np.abs(r).max())))
    costs = module.time(feeds, repeat=3, min_repeat_ms=5)
    assert len(costs) == 3 and all(c > 0 for c in costs)


@pytest.mark.parametrize(
    "spec,winograd,precision",
    [(MLP, 0, "fp32"), ("zoo:resnet18?image=32,width=8", 0, "fp32"), (BERT, 0, "fp32"),
     ("zoo:resnet18?image=32,width=8", 4, "fp32"), ("zoo:resnet18?image=32,width=8", 0, "fp16"),
     (BERT, 0, "fp16")],
    ids=["mlp", "resnet", "bert", "resnet_winograd4", "resnet_fp16", "bert_fp16"],
)
def test_every_task_of_a_model_computes_right_on_the_gpu_path(
    spec: str, winograd: int, precision: str, tmp_path: Path
) -> None:
    """The kernels a CUDA module would launch (each task's default GPU schedule), run through the
    OpenMP emulation of the GPU lowering and checked against the task's float64 reference (with
    Winograd: the transform kernels and their batched GEMMs too; in fp16: the products' default
    tensor-core kernels)."""
    from autotune.measure import Builder, BuildOptions, CpuRunner, RunOptions
    from autotune.program import build_cuda_emulation
    from autotune.search.measure_batch import tolerances

    target = offline_cuda_target("sm_90")
    graph = load_model(spec)
    graph.precision = precision
    prepared = prepare(graph, forms=f"winograd{winograd}" if winograd else None)
    rng = np.random.default_rng(2)
    with Builder(BuildOptions(cache_dir=tmp_path)) as builder, CpuRunner() as runner:
        for task in prepared.tasks:
            wl = task.workload
            choice = choose_schedule(task, target, None)
            prog = build_cuda_emulation(wl, choice.steps, target)
            built = builder.build(prog.kernel_name, prog.source)
            assert built.error_kind is None, (task.label, built.error_msg)
            inputs = wl.random_inputs(rng)
            ref = wl.run_reference(inputs)
            rtol, atol = tolerances(ref)
            runner.set_task(wl.key, inputs, ref, [(o.shape, o.dtype) for o in wl.outputs])
            r = runner.run(built.lib_path, prog.kernel_name, wl.key,
                           RunOptions(rtol=rtol, atol=atol, repeat=1, min_repeat_ms=0, timeout_s=120))
            assert r.error_kind is None, (task.label, choice.config, r.error_msg)


@needs_nvcc
@pytest.mark.skipif(has_cuda_device(), reason="covered by the GPU test")
def test_fp16_module_builds_with_tensor_core_kernels(tmp_path: Path) -> None:
    """--precision fp16: the module's products are mma.sync kernels with their dynamic shared
    memory passed at launch (opted in above 48 KiB); nvcc builds the whole module."""
    graph = load_model("zoo:resnet18?image=32,width=8")
    graph.precision = "fp16"
    prepared = prepare(graph)
    target = offline_cuda_target("sm_90")
    choices = [choose_schedule(t, target, None) for t in prepared.tasks]
    programs = [choices[c.task].program for c in prepared.calls]
    src = module_source("model_x", prepared.calls, programs, prepared.graph, plan_memory(prepared.graph,
                                                                                          prepared.calls))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    smem = [k.shared_bytes for p in programs for k in p.kernels if k.shared_bytes]
    assert smem and all(f", {b}, s>>>" in src for b in smem)
    with pytest.raises(CudaModuleError, match="loading the module"):
        compile_model(graph, target, cache_dir=str(tmp_path), verbose=False)
