"""The CUDA module of a compiled model: every kernel in one ``.cu``, one host launch sequence
captured once as a CUDA graph, weights and the arena resident in device memory.

The generated file holds, after the kernels (each task's ``build_cuda_program`` source, the shared
prelude once), a small host runtime with C entry points (``<entry>_init``, ``_run``, ``_time``,
``_error``, ``_free``). ``nvcc -shared -cudart static`` makes it one self-contained library that
ctypes loads; no pycuda on this path. ``_init`` uploads the weights, allocates the arena, a
workspace for multi-kernel tasks and the input/output buffers, then captures the whole launch
sequence into a CUDA graph; ``_run`` copies inputs in, replays the graph and copies outputs out;
``_time`` replays the graph between CUDA events on device-resident inputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from autotune.codegen import CudaRenderer
from autotune.codegen.c_base import C_TYPES
from autotune.measure.cuda_worker import OPT_IN_SHARED_BYTES
from autotune.program import CudaSource
from autotune.target import Target

from .ir import Graph, GraphError
from .memory import MemoryPlan, storage_of
from .runtime import arg_expr
from .tasks import KernelCall

WORK_ALIGN = 256


class CudaModuleError(RuntimeError):
    """The CUDA module failed to build, load or run (the message says which and why)."""


def _workspace(prog: CudaSource) -> list[int]:
    """Byte offsets of a program's workspace buffers in the shared workspace, and its total."""
    offsets, total = [], 0
    for b in prog.buffers[prog.n_args :]:
        offsets.append(total)
        total += -(-b.size * np.dtype(b.dtype).itemsize // WORK_ALIGN) * WORK_ALIGN
    return offsets + [total]


def shared_memory_lines(programs: Sequence[CudaSource]) -> list[str]:
    """Host code opting each kernel that needs more than 48 KiB of dynamic shared memory in."""
    kernels = [k for p in programs for k in p.kernels]
    need = {k.name: k.shared_bytes for k in kernels if k.shared_bytes > OPT_IN_SHARED_BYTES}
    return [f"  AT_CHECK(cudaFuncSetAttribute({name}, cudaFuncAttributeMaxDynamicSharedMemorySize, {b}));"
            for name, b in sorted(need.items())]


def launch_lines(calls: Sequence[KernelCall], programs: Sequence[CudaSource], graph: Graph,
                 plan: MemoryPlan) -> list[str]:
    """The host code that launches every kernel of every call, in order, on stream ``s``, with the
    model's inputs and outputs at the addresses ``io``."""
    n_in = len(graph.inputs)
    lines = []
    for i, (call, prog) in enumerate(zip(calls, programs)):
        ptrs = [arg_expr(storage_of(graph, plan, v), n_in, "io", "M.consts", "M.arena") for v in call.args]
        ptrs += [f"(void*)(M.work + {off})" for off in _workspace(prog)[:-1]]
        lines.append(f"  {{ /* call {i}: {call.group.nodes[0].op if call.group.nodes else ''} */")
        lines.append(f"    void* p[{len(ptrs)}] = {{{', '.join(ptrs)}}};")
        index = {b.name: j for j, b in enumerate(prog.buffers)}
        types = {b.name: C_TYPES[b.dtype] for b in prog.buffers}
        for k in prog.kernels:
            args = ", ".join(f"({types[p]}*)p[{index[p]}]" for p in k.params)
            grid = ", ".join(map(str, k.grid))
            block = ", ".join(map(str, k.block))
            lines.append(f"    {k.name}<<<dim3({grid}), dim3({block}), {k.shared_bytes}, s>>>({args});")
        lines.append("  }")
    return lines


_RUNTIME = r"""
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

/* the graphs of run_device: one per set of device addresses seen twice (a caller that passes the
   same tensors, or tensors from PyTorch's caching allocator, which hands the same blocks back),
   captured on those addresses so a run copies nothing; the least recently used one replaced */
#define AT_DIRECT 4
#define AT_DIRECT_ALIGN 256 /* the alignment of cudaMalloc, which the kernels' vector accesses assume */
struct AtDirect { void* io[NIO]; cudaGraphExec_t exec; int seen; unsigned long long used; };

struct AtModule {
  void** consts; int n_consts; char* arena; char* work; void* io[NIO]; long long io_bytes[NIO];
  cudaStream_t stream; cudaGraphExec_t exec; int ready; char err[512];
  AtDirect direct[AT_DIRECT]; unsigned long long clock; long long runs_direct, runs_copied;
};
static AtModule M;

static int at_fail(cudaError_t e, const char* what) {
  snprintf(M.err, sizeof(M.err), "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return (int)e;
}
#define AT_CHECK(call) do { cudaError_t at_e = (call); \
  if (at_e != cudaSuccess) return at_fail(at_e, #call); } while (0)

static void at_launch_all(cudaStream_t s, void* const* io) {
LAUNCHES
}

/* a graph of every launch on the addresses io, captured (not run) on the module's stream */
static int at_capture(void* const* io, cudaGraphExec_t* exec) {
  cudaGraph_t g;
  AT_CHECK(cudaStreamBeginCapture(M.stream, cudaStreamCaptureModeThreadLocal));
  at_launch_all(M.stream, io);
  cudaError_t launch = cudaGetLastError();  /* a bad launch shape shows here */
  AT_CHECK(cudaStreamEndCapture(M.stream, &g));
  AT_CHECK(launch);
  cudaError_t made = cudaGraphInstantiate(exec, g, 0);
  cudaGraphDestroy(g);
  AT_CHECK(made);
  return 0;
}

/* the slot of a set of addresses: found, or the least recently used one taken for it */
static AtDirect* at_direct(void* const* io) {
  AtDirect* victim = &M.direct[0];
  for (int k = 0; k < AT_DIRECT; ++k) {
    AtDirect* d = &M.direct[k];
    if (d->used && memcmp(d->io, io, sizeof(d->io)) == 0) return d;
    if (d->used < victim->used) victim = d;
  }
  if (victim->exec) cudaGraphExecDestroy(victim->exec);
  memcpy(victim->io, io, sizeof(victim->io));
  victim->exec = NULL; victim->seen = 0; victim->used = ++M.clock;
  return victim;
}

extern "C" const char* ENTRY_error(void) { return M.err; }

extern "C" void ENTRY_free(void) {
  if (M.ready) cudaGraphExecDestroy(M.exec);
  for (int k = 0; k < AT_DIRECT; ++k)
    if (M.direct[k].exec) cudaGraphExecDestroy(M.direct[k].exec);
  for (int i = 0; i < M.n_consts; ++i) cudaFree(M.consts[i]);
  free(M.consts);
  for (int i = 0; i < NIO; ++i) cudaFree(M.io[i]);
  cudaFree(M.arena); cudaFree(M.work);
  if (M.stream) cudaStreamDestroy(M.stream);
  memset(&M, 0, sizeof(M));
}

extern "C" int ENTRY_init(void** host_consts, const long long* const_bytes, int n_consts,
                          long long arena_bytes, long long work_bytes, const long long* io_bytes) {
  memset(&M, 0, sizeof(M));
  int count = 0;
  AT_CHECK(cudaGetDeviceCount(&count));
  M.consts = (void**)calloc(n_consts > 0 ? n_consts : 1, sizeof(void*));
  M.n_consts = n_consts;
  for (int i = 0; i < n_consts; ++i) {
    AT_CHECK(cudaMalloc(&M.consts[i], const_bytes[i] > 0 ? const_bytes[i] : 1));
    AT_CHECK(cudaMemcpy(M.consts[i], host_consts[i], const_bytes[i], cudaMemcpyHostToDevice));
  }
  AT_CHECK(cudaMalloc((void**)&M.arena, arena_bytes > 0 ? arena_bytes : 1));
  AT_CHECK(cudaMalloc((void**)&M.work, work_bytes > 0 ? work_bytes : 1));
  for (int i = 0; i < NIO; ++i) {
    M.io_bytes[i] = io_bytes[i];
    AT_CHECK(cudaMalloc(&M.io[i], io_bytes[i] > 0 ? io_bytes[i] : 1));
  }
  AT_CHECK(cudaStreamCreateWithFlags(&M.stream, cudaStreamNonBlocking));
SHARED_MEMORY
  int captured = at_capture(M.io, &M.exec);
  if (captured) return captured;
  M.ready = 1;
  return 0;
}

extern "C" int ENTRY_run(void** host_io) {
  for (int i = 0; i < NIN; ++i)
    AT_CHECK(cudaMemcpyAsync(M.io[i], host_io[i], M.io_bytes[i], cudaMemcpyHostToDevice, M.stream));
  AT_CHECK(cudaGraphLaunch(M.exec, M.stream));
  for (int i = NIN; i < NIO; ++i)
    AT_CHECK(cudaMemcpyAsync(host_io[i], M.io[i], M.io_bytes[i], cudaMemcpyDeviceToHost, M.stream));
  AT_CHECK(cudaStreamSynchronize(M.stream));
  return 0;
}

/* one run on device memory (PyTorch's CUDA tensors), ordered on the caller's stream; nothing waits
   on the host. Addresses seen before (and aligned as cudaMalloc's) replay their own graph, which
   reads the inputs and writes the outputs where they are; others are copied into the module's
   buffers, its graph replayed, the outputs copied out */
extern "C" int ENTRY_run_device(void** dev_io, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  int aligned = 1;
  for (int i = 0; i < NIO; ++i) aligned &= ((unsigned long long)dev_io[i] % AT_DIRECT_ALIGN) == 0;
  if (aligned) {
    AtDirect* d = at_direct(dev_io);
    d->used = ++M.clock;
    if (!d->exec && d->seen) {
      int captured = at_capture(dev_io, &d->exec);
      if (captured) { d->exec = NULL; return captured; }
    }
    d->seen = 1;
    if (d->exec) {
      AT_CHECK(cudaGraphLaunch(d->exec, s));
      ++M.runs_direct;
      return 0;
    }
  }
  ++M.runs_copied;
  for (int i = 0; i < NIN; ++i)
    AT_CHECK(cudaMemcpyAsync(M.io[i], dev_io[i], M.io_bytes[i], cudaMemcpyDeviceToDevice, s));
  AT_CHECK(cudaGraphLaunch(M.exec, s));
  for (int i = NIN; i < NIO; ++i)
    AT_CHECK(cudaMemcpyAsync(dev_io[i], M.io[i], M.io_bytes[i], cudaMemcpyDeviceToDevice, s));
  return 0;
}

/* how many run_device calls replayed a graph on the caller's addresses, and how many copied */
extern "C" void ENTRY_device_runs(long long* direct_and_copied) {
  direct_and_copied[0] = M.runs_direct; direct_and_copied[1] = M.runs_copied;
}

/* seconds per model run (graph replays between events; inputs already on the device) */
extern "C" int ENTRY_time(int repeat, double min_repeat_ms, double* costs) {
  cudaEvent_t a, b;
  AT_CHECK(cudaEventCreate(&a)); AT_CHECK(cudaEventCreate(&b));
  AT_CHECK(cudaGraphLaunch(M.exec, M.stream));
  AT_CHECK(cudaStreamSynchronize(M.stream));
  int number = 1;
  float ms = 0.f;
  for (;;) {
    AT_CHECK(cudaEventRecord(a, M.stream));
    for (int i = 0; i < number; ++i) AT_CHECK(cudaGraphLaunch(M.exec, M.stream));
    AT_CHECK(cudaEventRecord(b, M.stream));
    AT_CHECK(cudaEventSynchronize(b));
    AT_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (ms >= min_repeat_ms || number >= (1 << 20)) break;
    number *= 2;
  }
  for (int r = 0; r < repeat; ++r) {
    AT_CHECK(cudaEventRecord(a, M.stream));
    for (int i = 0; i < number; ++i) AT_CHECK(cudaGraphLaunch(M.exec, M.stream));
    AT_CHECK(cudaEventRecord(b, M.stream));
    AT_CHECK(cudaEventSynchronize(b));
    AT_CHECK(cudaEventElapsedTime(&ms, a, b));
    costs[r] = ms * 1e-3 / number;
  }
  cudaEventDestroy(a); cudaEventDestroy(b);
  return 0;
}
"""


def module_source(entry: str, calls: Sequence[KernelCall], programs: Sequence[CudaSource],
                  graph: Graph, plan: MemoryPlan) -> str:
    """The whole ``.cu`` of a model: prelude, each distinct program's kernels, the host runtime."""
    prelude = CudaRenderer().prelude()
    bodies: dict[str, str] = {}
    for prog in programs:
        key = prog.kernels[0].name
        bodies.setdefault(key, prog.source.removeprefix(prelude))
    n_io = len(graph.inputs) + len(graph.outputs)
    runtime = (
        _RUNTIME.replace("LAUNCHES", "\n".join(launch_lines(calls, programs, graph, plan)))
        .replace("SHARED_MEMORY", "\n".join(shared_memory_lines(programs)))
        .replace("ENTRY_", f"{entry}_")
        .replace("NIO", str(max(1, n_io)))
        .replace("NIN", str(len(graph.inputs)))
    )
    head = f"/* {len(calls)} calls, {len(bodies)} distinct programs; arena {plan.arena_bytes} bytes */\n"
    return head + prelude + "\n" + "\n\n".join(bodies.values()) + "\n" + runtime


def workspace_bytes(programs: Sequence[CudaSource]) -> int:
    """Workspace for the largest multi-kernel task (calls run one after another)."""
    return max([_workspace(p)[-1] for p in programs] + [0])


def build_module(source: str, target: Target, cache_dir: Path, timeout_s: float = 900.0) -> str:
    """nvcc the module into a self-contained shared library (cached by source and flags)."""
    arch = str(target.fingerprint.get("arch") or "")
    if not arch.startswith("sm_"):
        raise CudaModuleError(f"target {target.key} has no sm_XX arch to compile for")
    flags = ["-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static"]
    digest = hashlib.sha256((source + " ".join(flags)).encode()).hexdigest()[:32]
    cache_dir.mkdir(parents=True, exist_ok=True)
    lib = cache_dir / f"cuda_module_{digest}.so"
    if lib.is_file():
        return str(lib)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".tmp-") as tmp:
        cu = Path(tmp) / "module.cu"
        cu.write_text(source)
        out = Path(tmp) / "module.so"
        try:
            proc = subprocess.run(["nvcc", *flags, "-o", str(out), str(cu)], capture_output=True,
                                  text=True, timeout=timeout_s)
        except FileNotFoundError:
            raise CudaModuleError("nvcc not found: building a CUDA module needs the CUDA toolkit") from None
        except subprocess.TimeoutExpired:
            raise CudaModuleError(f"nvcc timed out after {timeout_s:g} s") from None
        if proc.returncode != 0:
            err = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            raise CudaModuleError(f"nvcc failed on the module: {err}")
        os.replace(out, lib)
    return str(lib)


class CudaExecutable:
    """A loaded CUDA module: weights and arena on the device, one CUDA graph per model run."""

    def __init__(self, lib_path: str, entry: str, graph: Graph, plan: MemoryPlan, work_bytes: int) -> None:
        self.lib_path = lib_path
        self.graph = graph
        self.plan = plan
        self.lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        names = ("init", "run", "run_device", "time", "error", "free", "device_runs")
        fn = {n: getattr(self.lib, f"{entry}_{n}") for n in names}
        fn["error"].restype = ctypes.c_char_p
        fn["free"].restype = fn["device_runs"].restype = None
        for n in ("init", "run", "run_device", "time"):
            fn[n].restype = ctypes.c_int
        self._fn = fn
        consts = [np.ascontiguousarray(graph.consts[v]) for v in plan.consts]
        ptrs = (ctypes.c_void_p * max(1, len(consts)))(*[a.ctypes.data for a in consts])
        sizes = (ctypes.c_longlong * max(1, len(consts)))(*[a.nbytes for a in consts])
        io = [graph.types[v] for v in list(graph.inputs) + list(graph.outputs)]
        io_bytes = [int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize for t in io]
        io_arr = (ctypes.c_longlong * max(1, len(io_bytes)))(*io_bytes)
        self._check(fn["init"](ptrs, sizes, len(consts), ctypes.c_longlong(plan.arena_bytes),
                               ctypes.c_longlong(work_bytes), io_arr), "loading the module")

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            msg = (self._fn["error"]() or b"").decode(errors="replace")
            raise CudaModuleError(f"CUDA module, {what}: {msg or f'error {code}'}")

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        arrays = list(inputs) + list(outputs)
        ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        self._check(self._fn["run"](ptrs), "run")

    def run_device(self, pointers: Sequence[int], stream: int) -> None:
        """One run on device buffers (inputs then outputs, by address), queued on ``stream`` (a
        ``cudaStream_t`` handle, e.g. PyTorch's current stream); returns without waiting."""
        ptrs = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        self._check(self._fn["run_device"](ptrs, ctypes.c_void_p(stream)), "run on device memory")

    def device_runs(self) -> tuple[int, int]:
        """(runs on the caller's own addresses, runs that copied in and out) of ``run_device``."""
        out = (ctypes.c_longlong * 2)()
        self._fn["device_runs"](out)
        return int(out[0]), int(out[1])

    def time(self, inputs: list[np.ndarray], outputs: list[np.ndarray], repeat: int,
             min_repeat_ms: float) -> list[float]:
        self.run(inputs, outputs)  # inputs on the device
        costs = (ctypes.c_double * repeat)()
        self._check(self._fn["time"](repeat, ctypes.c_double(min_repeat_ms), costs), "timing")
        return list(costs)

    def __del__(self) -> None:
        fn = getattr(self, "_fn", None)
        if fn is not None:
            fn["free"]()


def check_programs(programs: Sequence[object]) -> list[CudaSource]:
    bad = [p for p in programs if not isinstance(p, CudaSource)]
    if bad:
        raise GraphError("a CUDA module needs CUDA programs (build_cuda_program) for every task")
    return list(programs)  # type: ignore[arg-type]
