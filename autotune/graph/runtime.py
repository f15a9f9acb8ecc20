"""Compiled-module runtime. A module backend turns the chosen kernels of a model and its execution
plan into something runnable; the CPU backend builds ONE shared library:

- every kernel is its own translation unit (compiled in parallel, cached by content), linked with
- one generated entry point ``void ENTRY(void** args)`` with ``args = {consts, arena, inputs...,
  outputs...}`` that calls every kernel in order with pointers into the constant table, the arena
  and the caller's arrays (no per-kernel Python), plus the timing harness on that entry point.

Weights are bound once at load (a pointer table kept alive by the module); a call passes only the
input and output arrays. The CUDA backend (``cuda_module``) puts every kernel in one ``.cu`` with a
host launch sequence captured once as a CUDA graph; weights and the arena stay in device memory.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from autotune.aligned import ALIGN, HUGE_PAGE, address, aligned, aligned_empty, huge_page_buffer, is_aligned
from autotune.measure import TIMER_SYMBOL, Builder, BuildOptions
from autotune.measure.harness import harness_source
from autotune.target import Target
from autotune.te.workload import numpy_dtype

from .ir import Graph, GraphError
from .memory import MemoryPlan, Storage
from .tasks import KernelCall

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "autotune" / "modules"  # built objects and libraries


class ModuleBuildError(RuntimeError):
    """The generated module did not compile or link."""


@dataclass(frozen=True)
class KernelSource:
    """One kernel of the module: its function name, its source (a translation unit) and, on
    CUDA, the rendered program (kernels, launch shapes, workspace)."""

    name: str
    source: str
    program: Any = None


class ModuleBackend:
    """Builds the runnable form of a planned model on one kind of target."""

    kind = ""

    def build(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        """Path of the built (or cached) library."""
        raise NotImplementedError

    def load(self, lib_path: str, entry: str, graph: Graph, plan: MemoryPlan) -> Any:
        """The runnable executable of a built library."""
        raise NotImplementedError

    def entry_text(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        """The generated call sequence, for people to read (``compile.py --show-entry``)."""
        raise NotImplementedError


def arg_expr(s: Storage, n_inputs: int, io: str = "io", consts: str = "c", arena: str = "a") -> str:
    """The C pointer expression of one kernel argument, given the names of the caller's arrays
    (inputs then outputs), the constant table and the arena in the generated entry point."""
    if s.kind == "input":
        return f"{io}[{s.index}]"
    if s.kind == "output":
        return f"{io}[{n_inputs + s.index}]"
    if s.kind == "const":
        return f"{consts}[{s.index}]"
    return f"(void*)({arena} + {s.index})"


def entry_source(
    entry: str,
    calls: Sequence[KernelCall],
    call_kernels: Sequence[str],
    graph: Graph,
    plan: MemoryPlan,
    with_harness: bool = True,
) -> str:
    """C source of the entry point: one call per fused group, in order."""
    from .memory import storage_of

    prologue = [
        "  void** c = (void**)args[0];",
        "  char* a = (char*)args[1];",
        "  void** io = args + 2;",
        "  (void)c; (void)a; (void)io;",
    ]
    lines = [f"void {k}(void** args);" for k in dict.fromkeys(call_kernels)]
    lines += ["", f"/* {len(calls)} kernel calls; arena {plan.arena_bytes} bytes */",
              f"void {entry}(void** args) {{", *prologue]
    n_in = len(graph.inputs)
    ptrs = [", ".join(arg_expr(storage_of(graph, plan, v), n_in) for v in call.args) for call in calls]
    for call, kname, p in zip(calls, call_kernels, ptrs):
        lines.append(f"  {{ void* p[{len(call.args)}] = {{{p}}}; {kname}(p); }}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if not with_harness:
        return text
    # the same calls, each timed: seconds[i] += time of call i (a per-kernel profile in sequence)
    prof = [
        "",
        "#include <time.h>",
        "static double autotune_profile_now_s(void) {",
        "  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);",
        "  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;",
        "}",
        f"void {entry}{PROFILE_SUFFIX}(void** args, double* seconds) {{",
        *prologue,
        "  double t0 = autotune_profile_now_s(), t1;",
    ]
    for i, (call, kname, p) in enumerate(zip(calls, call_kernels, ptrs)):
        prof.append(f"  {{ void* p[{len(call.args)}] = {{{p}}}; {kname}(p); }}")
        prof.append(f"  t1 = autotune_profile_now_s(); seconds[{i}] += t1 - t0; t0 = t1;")
    prof.append("}")
    return text + "\n".join(prof) + "\n" + harness_source(entry)


PROFILE_SUFFIX = "_profile"


class CpuModuleBackend(ModuleBackend):
    """gcc: kernels -> objects (parallel, cached) -> one shared library, the entry point compiled
    in the link."""

    kind = "cpu"

    def __init__(
        self,
        target: Target,
        workers: int | None = None,
        cache_dir: Path | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.target = target
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.options = BuildOptions()
        self.cache_dir = Path(cache_dir or DEFAULT_CACHE_DIR)
        self.timeout_s = timeout_s
        self._keyer = Builder(self.options, workers=1)

    def _flags(self, compile_only: bool) -> list[str]:
        flags = [f for f in self.options.flags if f != "-shared"]
        return flags + (["-c"] if compile_only else ["-shared"])

    def _run(self, cmd: list[str], cwd: str) -> None:
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise ModuleBuildError(
                f"compiler timed out after {self.timeout_s:g} s: {' '.join(cmd[:3])}"
            ) from None
        if proc.returncode != 0:
            err = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            raise ModuleBuildError(f"{' '.join(cmd[:2])} failed: {err}")

    def _object(self, text: str) -> Path:
        key = self._keyer.cache_key(text)
        obj = self.cache_dir / "objects" / f"{key}.o"
        if obj.is_file():
            return obj
        obj.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=obj.parent, prefix=".tmp-") as tmp:
            src = Path(tmp) / "unit.c"
            src.write_text(text)
            out = Path(tmp) / "unit.o"
            self._run([self.options.compiler, *self._flags(True), "-o", str(out), str(src)], tmp)
            os.replace(out, obj)
        return obj

    def build(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        """Path of the built (or cached) shared library: each kernel an object of its own (cached
        by its source, so a model compiled again rebuilds only the kernels that changed), the
        entry point compiled in the same gcc call that links them (it is the module's own)."""
        text = entry_source(entry, calls, call_kernels, graph, plan)
        with ThreadPoolExecutor(self.workers) as pool:
            objects = list(pool.map(self._object, [k.source for k in kernels]))
        names = [o.name for o in objects] + [self._keyer.cache_key(text)]
        digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:32]
        lib = self.cache_dir / f"{entry}_{digest}.so"
        if not lib.is_file():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self.cache_dir, prefix=".tmp-") as tmp:
                src, out = Path(tmp) / "entry.c", Path(tmp) / "module.so"
                src.write_text(text)
                self._run([self.options.compiler, *self._flags(False), "-o", str(out), str(src),
                           *map(str, objects), "-lm"], tmp)
                os.replace(out, lib)
        return str(lib)

    def load(self, lib_path: str, entry: str, graph: Graph, plan: MemoryPlan) -> CpuExecutable:
        return CpuExecutable(lib_path, entry, graph, plan)

    def entry_text(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        return entry_source(entry, calls, call_kernels, graph, plan, with_harness=False)


class CudaModuleBackend(ModuleBackend):
    """nvcc: every kernel and the host launch sequence in one ``.cu`` -> one shared library."""

    kind = "cuda"

    def __init__(self, target: Target, cache_dir: Path | None = None, **_: Any) -> None:
        self.target = target
        self.cache_dir = Path(cache_dir or DEFAULT_CACHE_DIR) / "cuda"
        self._work_bytes: dict[str, int] = {}  # library -> workspace its calls need

    def build(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        from .cuda_module import build_module, check_programs, module_source, workspace_bytes

        by_name = {k.name: k.program for k in kernels}
        programs = check_programs([by_name[n] for n in call_kernels])
        lib = build_module(module_source(entry, calls, programs, graph, plan), self.target, self.cache_dir)
        self._work_bytes[lib] = workspace_bytes(programs)
        return lib

    def load(self, lib_path: str, entry: str, graph: Graph, plan: MemoryPlan) -> Any:
        from .cuda_module import CudaExecutable

        return CudaExecutable(lib_path, entry, graph, plan, self._work_bytes.get(lib_path, 0))

    def entry_text(
        self,
        entry: str,
        kernels: Sequence[KernelSource],
        calls: Sequence[KernelCall],
        call_kernels: Sequence[str],
        graph: Graph,
        plan: MemoryPlan,
    ) -> str:
        from .cuda_module import launch_lines

        by_name = {k.name: k.program for k in kernels}
        return "\n".join(launch_lines(calls, [by_name[n] for n in call_kernels], graph, plan)) + "\n"


def make_backend(target: Target, **kwargs: Any) -> ModuleBackend:
    """The module backend of the target's kind (autotune.backends)."""
    from autotune.backends import UnknownTargetKind

    try:
        return target.backend.module_backend(target, **kwargs)
    except (UnknownTargetKind, NotImplementedError):
        raise GraphError(f"no module backend for target {target.kind!r}") from None


class CpuExecutable:
    """A loaded module library: bound weights, the arena, and the entry point."""

    def __init__(
        self, lib_path: str, entry: str, graph: Graph, plan: MemoryPlan, huge_pages: bool = True
    ) -> None:
        self.lib_path = lib_path
        self.graph = graph
        self.plan = plan
        self.lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.entry_name = entry
        self.entry = getattr(self.lib, entry)
        self.entry.argtypes = [ctypes.c_void_p]
        self.entry.restype = None
        self._timer = getattr(self.lib, TIMER_SYMBOL)
        self._timer.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_double,
            ctypes.POINTER(ctypes.c_double),
        ]
        self._timer.restype = ctypes.c_int
        # weights bound once, copied 64-byte aligned into one buffer with the arena after them; from
        # 2 MiB on, that buffer asks for huge pages (autotune.aligned.huge_page_buffer)
        arrays = [np.ascontiguousarray(graph.consts[v]) for v in plan.consts]
        offsets, end = [], 0
        for a in arrays:
            offsets.append(end)
            end += -(-a.nbytes // ALIGN) * ALIGN
        total = end + plan.arena_bytes
        self.huge_pages = huge_pages and total >= HUGE_PAGE
        self._memory = huge_page_buffer(total) if self.huge_pages else aligned_empty((total,), np.uint8)
        self._memory.fill(0)
        self._consts = []
        for a, off in zip(arrays, offsets):
            view = self._memory[off : off + a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(view, a)
            self._consts.append(view)
        self._const_table = (ctypes.c_void_p * max(1, len(self._consts)))(
            *[a.ctypes.data for a in self._consts]
        )
        self._arena = self._memory[end:]
        self._arena_ptr = self._arena.ctypes.data
        n_io = len(graph.inputs) + len(graph.outputs)
        self._io_table = (ctypes.c_void_p * (2 + n_io))(ctypes.addressof(self._const_table), self._arena_ptr)

    def _args(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> Any:
        ptrs = [ctypes.addressof(self._const_table), self._arena_ptr]
        ptrs += [a.ctypes.data for a in inputs] + [o.ctypes.data for o in outputs]
        return (ctypes.c_void_p * len(ptrs))(*ptrs)

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.run_pointers([address(a) for a in (*inputs, *outputs)])

    def run_pointers(self, pointers: Sequence[int]) -> None:
        """The entry point on raw addresses of the inputs then the outputs (C-contiguous, of the
        graph's types; a framework's tensors), with a pointer table built once."""
        self._io_table[2:] = pointers
        self.entry(self._io_table)

    def time(
        self, inputs: list[np.ndarray], outputs: list[np.ndarray], repeat: int, min_repeat_ms: float
    ) -> list[float]:
        costs = (ctypes.c_double * repeat)()
        self._timer(self._args(inputs, outputs), 1, repeat, float(min_repeat_ms), costs)
        return list(costs)

    def profile(
        self, inputs: list[np.ndarray], outputs: list[np.ndarray], repeat: int, n_calls: int
    ) -> np.ndarray:
        """Seconds of each kernel call, ``[repeat, calls]``: whole model runs (after one warm-up
        run), every call timed where it runs in the sequence."""
        fn = getattr(self.lib, self.entry_name + PROFILE_SUFFIX)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = None
        args = self._args(inputs, outputs)
        self.entry(args)
        out = np.zeros((repeat, n_calls), dtype=np.float64)
        for r in range(repeat):
            fn(args, out[r].ctypes.data)
        return out


def check_inputs(
    graph: Graph, inputs: Mapping[str, Any] | Sequence[Any], staging: dict[int, np.ndarray] | None = None
) -> list[np.ndarray]:
    """The model's inputs as C-contiguous arrays of the graph's types in graph order (by name or by
    position). With ``staging`` (a compiled module's, kept from call to call) such an array is
    read where it lies, aligned or not (the kernels load vectors unaligned), and any other is
    converted into ``staging[i]``, made on its first need; without, each comes back as an aligned
    array, copied where it is not one. Between model runs the caches are cold: copying
    MobileNet-V2's 600 KB image into a new array took 0.32-0.39 ms a call, into a kept one
    0.17-0.23 ms, and reading it where it lies 0.02-0.03 ms (a run: 4 ms)."""
    names = graph.inputs
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(
                f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                f"(the model takes {', '.join(names)})"
            )
        extra = [n for n in inputs if n not in names]
        if extra:
            raise ValueError(f"unknown input {extra[0]!r} (the model takes {', '.join(names)})")
        values = [inputs[n] for n in names]
    else:
        values = list(inputs)
        if len(values) != len(names):
            raise ValueError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(values)}")
    arrays = []
    for i, (n, v) in enumerate(zip(names, values)):
        t = graph.types[n]
        arr = np.asarray(v)
        if arr.shape != t.shape:
            raise ValueError(f"input {n!r}: expected shape {t.shape}, got {arr.shape}")
        want = numpy_dtype(t.dtype)
        if arr.dtype == want and (is_aligned(arr) or (staging is not None and arr.flags.c_contiguous)):
            arrays.append(arr)
            continue
        # (bfloat16: ml_dtypes' type, numpy kind "V", as a bfloat16 model's inputs come)
        convertible = (arr.dtype.kind in "fiub" or arr.dtype.name == "bfloat16") and np.can_cast(
            arr.dtype, want, "same_kind")
        if arr.dtype != want and not convertible:
            raise ValueError(f"input {n!r}: expected {t.dtype}, got {arr.dtype}")
        if staging is None:
            arrays.append(aligned(np.asarray(arr, dtype=want)))
            continue
        if i not in staging:
            staging[i] = aligned_empty(t.shape, want)
        np.copyto(staging[i], arr, casting="same_kind")
        arrays.append(staging[i])
    return arrays


def check_outputs(graph: Graph, outputs: Sequence[np.ndarray]) -> None:
    """ValueError unless ``outputs`` are C-contiguous arrays of the graph's output shapes and types."""
    if len(outputs) != len(graph.outputs):
        raise ValueError(f"the model has {len(graph.outputs)} outputs, got {len(outputs)} arrays")
    for n, arr in zip(graph.outputs, outputs):
        t = graph.types[n]
        if not isinstance(arr, np.ndarray) or arr.shape != t.shape or arr.dtype != np.dtype(t.dtype):
            got = f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise ValueError(f"output {n!r}: expected {t}, got {got}")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise ValueError(f"output {n!r}: the array must be C-contiguous and writeable")
