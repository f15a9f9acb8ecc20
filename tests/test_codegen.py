"""C code generation: pinned constructs of the CPU renderer (not whole sources), real SIMD code from
gcc, and the CPU schedule space end to end (sampled configs compile and compute the right thing)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import numpy as np
import pytest

from autotune import te
from autotune.program import build_program
from autotune.schedule import (
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
    apply_steps,
    parallel,
    unroll,
    vectorize,
)
from autotune.target import make_target
from schedules import make_space

LOCAL = "matmul_local"


def matmul_steps(tile_i: int = 16, tile_j: int = 32, tile_k: int = 16, reg_i: int = 4,
                 reg_j: int = 16) -> list:
    """A hand-written GEMM schedule: local accumulator per (i, j) tile, B packed per k tile,
    register tile reg_i x reg_j (rows unrolled, columns vectorized), outer tiles fused + parallel."""
    return [
        CacheWriteStep("matmul"), CacheReadStep("B", (LOCAL,)),
        SplitStep("matmul", "i", tile_i), SplitStep("matmul", "j", tile_j),
        ReorderStep("matmul", ("i.0", "j.0", "i.1", "j.1")), ComputeAtStep(LOCAL, "matmul", "j.0"),
        SplitStep(LOCAL, "k", tile_k), SplitStep(LOCAL, "i", reg_i), SplitStep(LOCAL, "j", reg_j),
        ReorderStep(LOCAL, ("k.0", "j.0", "i.0", "k.1", "i.1", "j.1")),
        ComputeAtStep("B_local", LOCAL, "j.0"),
        unroll(LOCAL, "i.1"), vectorize(LOCAL, "j.1"), vectorize("matmul", "j.1"), vectorize("B_local", "a1"),
        FuseStep("matmul", ("i.0", "j.0")), parallel("matmul", "i.0@j.0"),
    ]


def kernel_body(prog) -> str:  # noqa: ANN001
    """The kernel function's text, without the prelude of helpers."""
    head = f"void {prog.kernel_name}(void** args) {{"
    assert prog.source.count(head) == 1
    return prog.source.split(head, 1)[1]


# --- pinned constructs -------------------------------------------------------------------------------------
def test_matmul_kernel_constructs(check_kernel, host_target) -> None:  # noqa: ANN001
    lanes = host_target.vector_lanes
    wl = te.make_workload("matmul", [64, 64, 64])
    prog = check_kernel(wl, matmul_steps())
    assert prog.source.startswith("#include <math.h>")
    assert f"typedef float at_f32x{lanes} __attribute__((vector_size({4 * lanes})));" in prog.source
    src = kernel_body(prog)
    assert "float* __restrict__ A = (float*)args[0];" in src
    assert "float* __restrict__ matmul = (float*)args[2];" in src
    # one parallel region, over the fused outer tiles (4 x 2)
    assert src.count("#pragma omp parallel for") == 1
    lines = src.splitlines()
    pragma = next(i for i, ln in enumerate(lines) if "#pragma omp parallel for" in ln)
    assert "for (int matmul_i_0_j_0 = 0; matmul_i_0_j_0 < 8; ++matmul_i_0_j_0)" in lines[pragma + 1]
    # stack buffers, 64-byte aligned: the 16 x 32 accumulator and the 16 x 16 packed B tile
    assert f"float {LOCAL}[512] __attribute__((aligned(64)));" in src
    assert "float B_local[256] __attribute__((aligned(64)));" in src
    assert "malloc" not in src
    # vector code: loads of the packed tile, broadcasts of A, vector stores of the accumulator
    assert "at_vload(B_local + " in src and "at_bcast(A[" in src
    assert "at_vstore(matmul + " in src and "at_vload(matmul_local + " in src
    # the unrolled register rows: no loop and no variable left, 4 copies of the update
    assert "matmul_local_i_1" not in src
    update = [ln for ln in lines if ln.strip().startswith(f"at_vstore({LOCAL} + ") and "at_bcast(A[" in ln]
    assert len(update) == 4 * (16 // lanes)
    assert "#pragma omp simd" not in src  # every vectorized loop divides into whole vectors


def elementwise_program(host_target, n: int, inner: int):  # noqa: ANN001, ANN201
    wl = te.make_workload("bias_add_relu", [6, n])
    steps = [ComputeInlineStep("bias_add"), SplitStep("relu", "i1", inner), vectorize("relu", "i1.1"),
             FuseStep("relu", ("i0", "i1.0")), parallel("relu", "i0@i1.0")]
    return wl, steps, build_program(wl, steps, host_target)


def test_elementwise_vector_constructs(check_kernel, host_target) -> None:  # noqa: ANN001
    wl, steps, prog = elementwise_program(host_target, 48 * 32, 16)
    src = kernel_body(prog)
    check_kernel(wl, steps)
    assert "#pragma omp parallel for" in src
    assert "at_vmax(" in src and "at_bcast(0.0f)" in src  # relu as a lane-wise max
    assert "at_vload(x + " in src and "at_vload(bias + " in src and "at_vstore(relu + " in src
    assert "#pragma omp simd" not in src and "relu_i1_1" not in src


def test_a_parallel_loop_of_little_work_runs_on_the_calling_thread(check_kernel, host_target) -> None:  # noqa: ANN001
    """Below SERIAL_BELOW_ELEMENTS stored elements a parallel loop has no OpenMP pragma (waking the
    team would cost more than the loop); at and above, it has one. Both compute right."""
    from autotune.codegen.cpu import SERIAL_BELOW_ELEMENTS

    for n, parallel_ in ((48, False), (-(-SERIAL_BELOW_ELEMENTS // 96) * 16, True)):  # 6 rows
        wl, steps, prog = elementwise_program(host_target, n, 16)
        check_kernel(wl, steps)
        assert ("#pragma omp parallel for" in kernel_body(prog)) is parallel_, n


@pytest.mark.parametrize("n,inner", [(21, 7), (35, 5)])
def test_simd_fallback_for_partial_vectors(check_kernel, host_target, n: int, inner: int) -> None:  # noqa: ANN001
    wl, steps, prog = elementwise_program(host_target, n, inner)
    src = kernel_body(prog)
    check_kernel(wl, steps)
    lines = src.splitlines()
    at = next(i for i, ln in enumerate(lines) if "#pragma omp simd" in ln)
    assert f"for (int relu_i1_1 = 0; relu_i1_1 < {inner}; ++relu_i1_1)" in lines[at + 1]
    assert "at_vstore(" not in src and "at_vload(" not in src


@pytest.mark.parametrize("halves", [1, 3, 5])
def test_an_odd_number_of_half_vectors_is_whole_vectors_and_a_half_one(
    check_kernel, host_target, halves: int  # noqa: ANN001
) -> None:
    """A vectorized loop of 8, 24 or 40 lanes on a 16-lane target: its whole vectors, then one
    half-width vector with the half-width helpers (no ``omp simd`` loop left to gcc)."""
    lanes = host_target.vector_lanes
    half = lanes // 2
    if half < 4:
        pytest.skip("no half vectors below 8 lanes")
    inner = halves * half
    wl, steps, prog = elementwise_program(host_target, inner * 8, inner)
    check_kernel(wl, steps)
    src = kernel_body(prog)
    assert "#pragma omp simd" not in src
    assert src.count("at_vstore(relu + ") == halves // 2
    assert src.count(f"at_vstore_{half}(relu + ") == 1
    assert f"at_vmax_{half}(" in src and f"at_vload_{half}(bias + " in src


@pytest.mark.parametrize("op,shape", [("conv2d_nhwc", [1, 9, 9, 32, 24, 1, 1, 1, 0]),
                                      ("dense_bias_gelu", [12, 40, 64])])
def test_schedules_of_half_vector_channels_compute_right(check_kernel, host_target, op, shape) -> None:  # noqa: ANN001
    """24 or 40 output channels (MobileNet's and EfficientNet's narrow layers), register tiles one
    and a half or two and a half vectors wide, with and without the accumulators kept in
    registers, a GELU epilogue (tanh on half vectors): every sampled kernel matches numpy."""
    lanes = host_target.vector_lanes
    wl = te.make_workload(op, shape)
    space = make_space(wl, host_target)
    axis = next(k.name for k in space.knobs if k.name.startswith("tile_") and k.name[5:] in ("ff", "j", "n")
                and math.prod(space.default_config()[k.name]) == shape[-2 if op == "dense_bias_gelu" else 4])
    rng = np.random.default_rng()
    seen = set()
    for _ in range(400):
        cfg = space.sample(rng)
        t3 = cfg[axis][3]
        if t3 % lanes == 0 or t3 % (lanes // 2) or (t3, cfg["registers"]) in seen:
            continue
        seen.add((t3, cfg["registers"]))
        src = kernel_body(check_kernel(wl, space.steps(cfg)))
        assert f"at_vstore_{lanes // 2}(" in src, cfg
    assert len(seen) >= 2


def test_unroll_constructs(check_kernel, host_target) -> None:  # noqa: ANN001
    wl = te.make_workload("add_relu_mul", [4, 100])
    steps = [ComputeInlineStep("add"), ComputeInlineStep("relu"), SplitStep("add_relu_mul", "i1", 5),
             unroll("add_relu_mul", "i1.1"), unroll("add_relu_mul", "i0")]
    src = kernel_body(check_kernel(wl, steps))
    assert "add_relu_mul_i1_1" not in src and "add_relu_mul_i0" not in src  # fully unrolled: copies
    assert src.count("add_relu_mul[") == 4 * 5
    # an unroll annotation on a loop too long to copy stays a loop with a compiler hint
    wl = te.make_workload("add_relu_mul", [3, 100])
    steps = [ComputeInlineStep("add"), ComputeInlineStep("relu"), unroll("add_relu_mul", "i1")]
    src = kernel_body(check_kernel(wl, steps))
    assert "#pragma GCC unroll 64" in src
    assert "for (int add_relu_mul_i1 = 0; add_relu_mul_i1 < 100; ++add_relu_mul_i1)" in src


def test_heap_buffer_for_root_intermediate(check_kernel) -> None:  # noqa: ANN001
    wl = te.make_workload("dense_bias_relu", [5, 9, 7])
    src = kernel_body(check_kernel(wl, []))
    for name, size in (("dense", 45), ("bias_add", 45)):
        m = re.search(rf"float\* __restrict__ {name} = \(float\*\)aligned_alloc\(64, (\d+)\);", src)
        assert m, src
        nbytes = int(m.group(1))
        assert nbytes >= 4 * size and nbytes % 64 == 0
        assert f"free({name});" in src


def f64_workload(n: int, m: int, with_intermediate: bool):  # noqa: ANN201
    x = te.placeholder((n, m), "float64", "x")
    src = te.compute((n, m), lambda a, b: x[a, b] * 2.0, name="twice") if with_intermediate else x
    out = te.compute((n, m), lambda a, b: src[a, b] + 1.0, name="out")
    scale = 2.0 if with_intermediate else 1.0
    return te.Workload("f64", [x], [out], lambda x: [scale * x + 1.0])


def test_float64_scalar_kernel(check_kernel) -> None:  # noqa: ANN001
    prog = check_kernel(f64_workload(5, 16, False), [])
    assert "double* __restrict__ x = (double*)args[0];" in prog.source


def test_float64_heap_buffer_is_large_enough(host_target) -> None:  # noqa: ANN001
    prog = build_program(f64_workload(5, 16, True), [], host_target)
    m = re.search(r"double\* __restrict__ twice = \(double\*\)aligned_alloc\(64, (\d+)\);", prog.source)
    assert m and int(m.group(1)) >= 8 * 5 * 16


def test_float64_vectorized_loop(check_kernel) -> None:  # noqa: ANN001
    check_kernel(f64_workload(5, 16, False), [SplitStep("out", "b", 16), vectorize("out", "b.1")])


# --- real SIMD from gcc -------------------------------------------------------------------------------------
def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.parametrize(
    ("isa", "lanes", "register"),
    [(("avx", "avx2", "fma"), 8, "%ymm"), (("avx", "avx2", "fma", "avx512f"), 16, "%zmm")],
    ids=["avx2", "avx512"],
)
def test_vectorized_matmul_compiles_to_fma_on_vector_registers(tmp_path, isa, lanes, register) -> None:  # noqa: ANN001
    if not set(isa) <= _cpu_flags() or shutil.which("gcc") is None:
        pytest.skip(f"needs gcc and a CPU with {'+'.join(isa)}")
    fingerprint = {"model": "isa-test", "arch": "x86_64", "isa": list(isa), "cores": 2}
    target = make_target("cpu", fingerprint)
    assert target.vector_lanes == lanes  # 256-bit vectors: ymm registers; 512-bit: zmm
    prog = build_program(te.make_workload("matmul", [64, 64, 64]), matmul_steps(reg_j=lanes), target)
    src = tmp_path / "kernel.c"
    src.write_text(prog.source)
    asm = tmp_path / "kernel.s"
    proc = subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-S", "-o", str(asm), str(src)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fma = [ln for ln in asm.read_text().splitlines() if "vfmadd" in ln]
    assert fma, "no FMA instruction in the vectorized kernel"
    assert any(register in ln for ln in fma), fma[:5]


# --- the CPU schedule space --------------------------------------------------------------------------------
SPACES = {"matmul": [64, 64, 64], "conv2d": [1, 8, 10, 10, 8, 3, 3, 1, 1]}


@pytest.mark.parametrize("op", sorted(SPACES))
def test_sampled_configs_build_and_verify(check_kernel, host_target, op: str) -> None:  # noqa: ANN001
    wl = te.make_workload(op, SPACES[op])
    space = make_space(wl, host_target)
    assert space.raw_size > 1
    rng = np.random.default_rng()
    widths = set()
    for _ in range(5):
        cfg = space.sample(rng)
        assert space.is_valid(cfg) and space.violated(cfg) == []
        assert json.loads(json.dumps(cfg)) == cfg  # stores as JSON
        widths.add(len(space.encode(cfg)))
        prog = check_kernel(wl, space.steps(cfg))
        assert "#pragma omp parallel for" in prog.source, cfg
    assert widths == {len(space.encode(space.sample(rng)))}


def tiny_space(host_target):  # noqa: ANN001, ANN201
    wl = te.make_workload("matmul", [8, 8, 8])
    return wl, make_space(wl, host_target)


def test_grid_iteration_yields_only_valid_configs(host_target) -> None:  # noqa: ANN001
    wl, space = tiny_space(host_target)
    configs = list(space)
    assert space.size() == len(configs) > 1
    assert len(configs) < space.raw_size  # the constraints removed something
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    names = {k.name for k in space.knobs}
    for cfg in configs:
        assert set(cfg) == names
        assert space.is_valid(cfg) and not space.violated(cfg)
    for cfg in configs[::7]:
        apply_steps(wl.outputs, space.steps(cfg))  # every config is a legal schedule
    for cfg in configs[:: max(1, len(configs) // 6)]:
        build_program(wl, space.steps(cfg), host_target)


def test_neighbours_differ_in_one_knob(host_target) -> None:  # noqa: ANN001
    _, space = tiny_space(host_target)
    cfg = space.sample(np.random.default_rng())
    near = space.neighbours(cfg)
    assert near
    for other in near:
        assert space.is_valid(other)
        assert sum(other[k] != cfg[k] for k in cfg) == 1


def register_vectors(cfg: dict, lanes: int) -> int:
    t3 = [cfg[f"tile_{a}"][3] for a in ("i", "j")]
    return t3[0] * max(1, t3[1] // lanes)


def test_constraints_exclude_oversized_register_tiles(host_target) -> None:  # noqa: ANN001
    lanes = host_target.vector_lanes
    space = make_space(te.make_workload("matmul", [64, 64, 64]), host_target)
    rng = np.random.default_rng()
    cfg = dict(space.sample(rng))
    cfg.update(tile_i=[2, 1, 1, 32], tile_j=[1, 1, 1, 64])  # 32 rows x 64 columns of registers
    assert register_vectors(cfg, lanes) > 16
    assert "register_tile" in space.violated(cfg)
    assert not space.is_valid(cfg)
    for _ in range(200):
        assert register_vectors(space.sample(rng), lanes) <= 16
    # a config whose vector tile does not cover whole vectors is excluded too
    partial = 8 if lanes > 8 else 2
    cfg.update(tile_i=[8, 2, 1, 4], tile_j=[64 // partial, 1, 1, partial])
    assert "vector_width" in space.violated(cfg)
    assert math.prod(cfg["tile_j"]) == 64 == math.prod(cfg["tile_i"])


def test_lane_invariant_select_vectorizes(check_kernel, host_target) -> None:  # noqa: ANN001
    """A padded max-pool over NHWC: the padding test depends on the spatial position only, so the
    channel vector becomes ``cond ? vload : broadcast`` instead of a scalar ``omp simd`` loop."""
    pytest.importorskip("onnx")
    from autotune.graph.compiler import prepare

    prepared = prepare(f"zoo:resnet18?image=32,width={host_target.vector_lanes}")
    task = next(t for t in prepared.tasks if t.workload.name.startswith("max_pool"))
    space = make_space(task.workload, host_target)
    cfg = next(c for c in space if all(v == 1 for k, v in c.items() if k.startswith("inline_")))
    prog = check_kernel(task.workload, space.steps(cfg))
    assert "? at_vload(" in prog.source and "at_bcast(" in prog.source
    assert "#pragma omp simd" not in prog.source


def test_a_short_innermost_axis_is_unrolled_not_divided_for(check_kernel, host_target) -> None:  # noqa: ANN001
    """A channel shuffle in NHWC ([P, 2, C] -> [P, C, 2]): the pair axis unrolled under a loop of
    channels, the pixels parallel; no division or remainder per element; checked against numpy."""
    x = te.placeholder((3, 4, 2, 7), name="x")
    y = te.compute((3, 4, 7, 2), lambda a, b, c, d: x[a, b, d, c], name="shuffle")
    wl = te.Workload("shuffle", [x], [y], lambda v: [np.ascontiguousarray(v.transpose(0, 1, 3, 2))])
    space = make_space(wl, host_target)
    prog = check_kernel(wl, space.steps(next(iter(space.default_configs()))))
    body = prog.source[prog.source.index(f"void {prog.kernel_name}(") :]
    assert "%" not in body and " / " not in body, body


def test_lane_wise_select_vectorizes_with_masks(check_kernel, host_target) -> None:  # noqa: ANN001
    """Where(IsNaN(softmax), 0, softmax) (Hugging Face exports) and a condition of comparisons
    joined by Or / Not: the condition varies across the lanes, so it becomes a mask
    (``at_vblend``), not a scalar ``omp simd`` loop; checked against numpy."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from autotune.graph.compiler import prepare

    lanes = host_target.vector_lanes
    shape = [2, 3, 2 * lanes]
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        helper.make_node("IsNaN", ["s"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "s"], ["y"]),
        helper.make_node("Less", ["x", "zero"], ["neg"]),
        helper.make_node("Not", ["neg"], ["pos"]),
        helper.make_node("IsNaN", ["x"], ["nan2"]),
        helper.make_node("Or", ["pos", "nan2"], ["keep"]),
        helper.make_node("Where", ["keep", "x", "y"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "masks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
        initializer=[helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    tasks = prepare(model).tasks
    assert len(tasks) == 1
    wl = tasks[0].workload
    space = make_space(wl, host_target)
    for vector_reduce in (1, 2):
        prog = check_kernel(wl, space.steps({"vector_reduce": vector_reduce}))
        body = prog.source[prog.source.index(f"void {prog.kernel_name}(") :]
        assert "at_vblend(" in body and "#pragma omp simd" not in body, body


@pytest.mark.parametrize("pieces", [(2, 1, 3), (1, 2, 1)])
def test_concat_on_channels_vectorizes_where_its_pieces_are_whole_vectors(
    check_kernel, host_target, pieces: tuple[int, ...]  # noqa: ANN001
) -> None:
    """A DenseNet layer's input in NHWC: a Concat of feature maps on channels, then a per-channel
    scale and shift and a ReLU, one kernel. Pieces of whole vectors: the piece a channel vector reads
    from is the same for every lane, so it is chosen once per vector (a scalar test around vector
    loads), not per channel in an ``omp simd`` loop. Pieces that split vectors still compute right
    (lane-wise). Checked against numpy."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from autotune.graph.compiler import prepare

    lanes = host_target.vector_lanes
    whole = pieces == (2, 1, 3)
    sizes = [p * lanes if whole else p * lanes + 1 for p in pieces]
    names = [f"x{i}" for i in range(len(sizes))]
    c = sum(sizes)
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Concat", names, ["cat"], axis=-1), helper.make_node("Mul", ["cat", "s"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "dense_input",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 5, k]) for n, k in zip(names, sizes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, c])],
        initializer=[helper.make_tensor(n, TensorProto.FLOAT, [c], rng.standard_normal(c).tolist())
                     for n in ("s", "b")],
    )
    tasks = prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).tasks
    assert len(tasks) == 1
    wl = tasks[0].workload
    space = make_space(wl, host_target)
    for cfg in space.default_configs():
        body = kernel_body(check_kernel(wl, space.steps(cfg)))
        if whole:
            assert "#pragma omp simd" not in body and body.count("? at_vload(") == len(sizes) - 1, body


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("isa", [["-march=native"], ["-march=x86-64-v3"]])  # (v3: AVX2, no AVX-512)
def test_lane_wise_math_is_accurate(tmp_path, lanes: int, isa: list[str]) -> None:  # noqa: ANN001
    """exp, sigmoid and tanh on every lane against float64, with the AVX-512 rounding and scaling
    where the host has them and with the portable forms (an AVX2 build)."""
    import ctypes

    from autotune.codegen import CpuRenderer

    src = tmp_path / "vmath.c"
    src.write_text(CpuRenderer(lanes).prelude() + "".join(f"""
void v{f}(const float* x, float* y, int n) {{
  for (int i = 0; i < n; i += {lanes}) at_vstore(y + i, at_v{f}(at_vload(x + i)));
}}
""" for f in ("exp", "sigmoid", "tanh")))
    lib = tmp_path / "vmath.so"
    subprocess.run(["gcc", "-O3", *isa, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                   timeout=120)
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng()

    def run(f: str, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float32)
        y = np.empty_like(x)
        getattr(so, f"v{f}")(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
                             ctypes.c_int(x.size))
        return y

    x = np.concatenate([np.linspace(-87.3, 88.7, 4096 * lanes),
                        np.clip(rng.standard_normal(1024 * lanes) * 20, -87.3, 88.7), np.zeros(lanes)])
    ref = np.exp(x.astype(np.float32).astype(np.float64))
    assert np.max(np.abs(run("exp", x) - ref) / ref) < 3e-7  # about 2 float32 ulp over the whole normal range
    x = np.concatenate([np.linspace(-30, 30, 4096 * lanes), rng.standard_normal(1024 * lanes) * 3,
                        rng.standard_normal(1024 * lanes) * 1e-3, np.zeros(lanes)]).astype(np.float32)
    x64 = x.astype(np.float64)
    sig = 1.0 / (1.0 + np.exp(-x64))
    assert np.max(np.abs(run("sigmoid", x) - sig) / sig) < 1e-6
    th = np.tanh(x64)
    assert np.max(np.abs(run("tanh", x) - th) / np.maximum(np.abs(th), 1e-30)) < 1e-6  # relative, near 0 too
    # far outside exp's float range (AVX-512 scales to inf or 0 there, the portable forms clamp)
    far = np.repeat(np.array([-1e4, -200.0, -100.0, 100.0, 200.0, 1e4], np.float32), lanes)
    assert np.max(np.abs(run("sigmoid", far) - (far > 0))) < 1e-37
    assert np.array_equal(run("tanh", far), np.sign(far))
    assert np.all(run("exp", far[far < 0]) < 1.2e-38) and np.all(run("exp", far[far > 0]) > 3.4e38)


def test_vectorized_row_reductions_are_correct(check_kernel, host_target) -> None:  # noqa: ANN001
    lanes = host_target.vector_lanes
    for op, shape in (("softmax", f"{2 * lanes},{4 * lanes}"), ("layernorm", f"{2 * lanes},{3 * lanes}")):
        wl = te.make_workload(op, shape)
        space = make_space(wl, host_target)
        prog = check_kernel(wl, space.steps({"vector_reduce": 1}))
        body = prog.source[prog.source.index(f"void {prog.kernel_name}(") :]
        # every stage stores whole vectors: the row reductions (lanes across rows) and the output
        assert body.count("at_vstore(") >= 3 and "#pragma omp simd" not in body, body
        if op == "softmax":
            assert "at_vexp(" in body and "expf(" not in body
        # lanes along the row: a vector accumulator per row, its lanes combined once at the end
        prog = check_kernel(wl, space.steps({"vector_reduce": 2}))
        body = prog.source[prog.source.index(f"void {prog.kernel_name}(") :]
        assert ("at_hmax(" in body) == (op == "softmax") and "at_hadd(" in body, body
        assert "#pragma omp simd" not in body and "_lanes[" in body


def test_vectorized_reduction_loop_without_vector_form_runs_in_order(check_kernel, host_target) -> None:  # noqa: ANN001
    """A reduction loop marked vectorize whose body has no lane-wise form (log) must not become an
    ``omp simd`` loop (its accumulator is carried from lane to lane): it stays a serial loop."""
    lanes = host_target.vector_lanes
    x = te.placeholder((3, 4 * lanes), "float32", "x")
    r = te.reduce_axis(4 * lanes, "r")
    out = te.compute((3,), lambda i: te.sum(te.log(x[i, r] * x[i, r] + 1.0), r), name="out")
    wl = te.Workload("sum_log", [x], [out], lambda x: [np.log(x.astype(np.float64) ** 2 + 1).sum(axis=1)])
    prog = check_kernel(wl, [SplitStep("out", "r", lanes), vectorize("out", "r.1")])
    assert "#pragma omp simd" not in prog.source and "at_hadd(" not in kernel_body(prog)
