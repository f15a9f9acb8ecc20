"""Worker process owning one CUDA context: loads cubins, checks outputs, times with events.

pycuda is imported only here, inside the spawned worker. The protocol is that of
worker.py (one request tuple, one reply tuple), with these differences:

Requests:
    ("set_task", task_id, inputs, reference_outputs, output_specs)
    ("remove_task", task_id)
    ("run", cubin_path, program, task_id, options_dict)   program: CudaProgram
    ("close",)
Replies:
    ("ready", pid) or ("fatal", message)   once, after start-up (fatal: no context)
    ("ok", payload)       payload: None, or the list of per-run seconds for run
    ("wrong", message)    outputs do not match the reference
    ("error", message)    the request failed but the context is still usable
    ("crash", message)    the context is unusable; the worker exits right after
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .cuda_builder import CudaProgram
from .worker import _die_with_parent, compare

_MAX_MODULES = 64  # loaded cubins kept (LRU)
_MAX_RESIDENT_TASKS = 2  # tasks whose buffers stay on the device (LRU)
_POISON_BYTE = 0xFF  # all-ones: NaN for float32/float64, -1 for ints
OPT_IN_SHARED_BYTES = 48 * 1024  # above this a kernel must opt in to dynamic shared memory
_MAX_NUMBER = 1 << 20  # cap on launches of the sequence per timed repeat
_MAX_FLUSHED_NUMBER = 4096  # same, when the L2 is flushed before every run
_MIN_FLUSH_BYTES = 8 << 20


def _one_line(text: str, limit: int = 500) -> str:
    return " ".join(text.split())[:limit]


@dataclass
class _Task:
    inputs: list[np.ndarray]
    refs: list[np.ndarray]
    specs: list[tuple[tuple[int, ...], str]]


@dataclass
class _Buffers:
    """Device memory of one task: pristine inputs, working inputs, outputs."""

    master: list[Any]
    inputs: list[Any]
    in_nbytes: list[int]
    outputs: list[Any]
    out_nbytes: list[int]

    def free(self) -> None:
        for alloc in (*self.master, *self.inputs, *self.outputs):
            with contextlib.suppress(Exception):
                alloc.free()


@dataclass
class _Kernel:
    func: Any  # attribute queries and set_attribute
    static_smem: int
    max_threads: int
    regs: int
    dyn_limit: int  # largest dynamic shared size allowed right now
    prepared: dict[int, Any] = field(default_factory=dict)  # n_args -> prepared Function


@dataclass
class _Module:
    module: Any
    kernels: dict[str, _Kernel] = field(default_factory=dict)


class _CudaState:
    def __init__(self, device_id: int) -> None:
        import pycuda.driver as cuda  # only ever imported in this process

        self.cuda = cuda
        cuda.init()
        dev = cuda.Device(device_id)
        self.ctx = self._make_context(dev)
        a = cuda.device_attribute

        def attr(name: str, default: int) -> int:
            try:
                return int(dev.get_attribute(getattr(a, name)))
            except Exception:  # noqa: BLE001 - old pycuda/driver: use the default
                return default

        self.max_threads = attr("MAX_THREADS_PER_BLOCK", 1024)
        self.max_block = tuple(attr(f"MAX_BLOCK_DIM_{c}", d) for c, d in zip("XYZ", (1024, 1024, 64)))
        self.max_grid = tuple(attr(f"MAX_GRID_DIM_{c}", d) for c, d in zip("XYZ", (2**31 - 1, 65535, 65535)))
        self.smem_optin = max(
            attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 0),
            attr("MAX_SHARED_MEMORY_PER_BLOCK", OPT_IN_SHARED_BYTES),
        )
        self.flush_bytes = max(2 * attr("L2_CACHE_SIZE", 0), _MIN_FLUSH_BYTES)
        self.tasks: dict[str, _Task] = {}
        self.resident: OrderedDict[str, _Buffers] = OrderedDict()
        self.modules: OrderedDict[tuple[str, int, int], _Module] = OrderedDict()
        self.flush_buf: Any = None
        self.events: list[Any] = []
        self.probe = cuda.mem_alloc(16)

    def _make_context(self, dev: Any) -> Any:
        # A worker killed a moment ago may still be tearing its context down.
        for attempt in range(4):
            try:
                return dev.make_context()
            except self.cuda.Error:
                if attempt == 3:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    # -- tasks ------------------------------------------------------------------

    def set_task(self, task_id: str, inputs: list, refs: list, specs: list) -> None:
        self.remove_task(task_id)
        self.tasks[task_id] = _Task(
            [np.ascontiguousarray(x) for x in inputs],
            [np.asarray(r) for r in refs],
            [(tuple(int(d) for d in s), str(t)) for s, t in specs],
        )

    def remove_task(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)
        bufs = self.resident.pop(task_id, None)
        if bufs is not None:
            bufs.free()

    def _alloc(self, nbytes: int) -> Any:
        return self.cuda.mem_alloc(max(int(nbytes), 1))

    def _buffers(self, task_id: str, task: _Task) -> _Buffers:
        bufs = self.resident.get(task_id)
        if bufs is not None:
            self.resident.move_to_end(task_id)
            return bufs
        while len(self.resident) >= _MAX_RESIDENT_TASKS:
            _, old = self.resident.popitem(last=False)
            old.free()
        cuda = self.cuda
        in_nbytes = [int(x.nbytes) for x in task.inputs]
        out_nbytes = [int(np.prod(s, dtype=np.int64)) * np.dtype(t).itemsize for s, t in task.specs]
        bufs = _Buffers([], [], in_nbytes, [], out_nbytes)
        try:
            for x in task.inputs:
                alloc = self._alloc(x.nbytes)
                bufs.master.append(alloc)
                if x.nbytes:
                    cuda.memcpy_htod(alloc, x)
                bufs.inputs.append(self._alloc(x.nbytes))
            bufs.outputs.extend(self._alloc(n) for n in out_nbytes)
        except BaseException:
            bufs.free()
            raise
        self.resident[task_id] = bufs
        return bufs

    # -- modules and launch plans -------------------------------------------------

    def _module(self, path: str) -> _Module:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
        mod = self.modules.get(key)
        if mod is not None:
            self.modules.move_to_end(key)
            return mod
        with open(path, "rb") as f:
            image = f.read()
        mod = _Module(self.cuda.module_from_buffer(image))
        self.modules[key] = mod
        while len(self.modules) > _MAX_MODULES:
            self.modules.popitem(last=False)  # unloaded once its functions are gone
        return mod

    def _kernel(self, mod: _Module, name: str) -> _Kernel:
        k = mod.kernels.get(name)
        if k is None:
            fa = self.cuda.function_attribute
            func = mod.module.get_function(name)
            static = int(func.get_attribute(fa.SHARED_SIZE_BYTES))
            k = _Kernel(
                func,
                static,
                int(func.get_attribute(fa.MAX_THREADS_PER_BLOCK)),
                int(func.get_attribute(fa.NUM_REGS)),
                max(OPT_IN_SHARED_BYTES - static, 0),
            )
            mod.kernels[name] = k
        return k

    def _plan(self, mod: _Module, program: CudaProgram, ptrs: list[int]) -> list[tuple] | str:
        """Per launch (function, grid, block, shared, pointers), or why it cannot launch."""
        plan = []
        for i, ln in enumerate(program.launches):
            where = f"launch {i} ({ln.kernel})"
            try:
                k = self._kernel(mod, ln.kernel)
            except self.cuda.Error as e:
                return f"{where}: kernel not found in cubin ({_one_line(str(e))})"
            grid = tuple(int(g) for g in ln.grid)
            block = tuple(int(b) for b in ln.block)
            shared = int(ln.shared_bytes)
            threads = block[0] * block[1] * block[2]
            if threads > self.max_threads or any(b > m for b, m in zip(block, self.max_block)):
                return (
                    f"{where}: invalid launch config: block {block} exceeds the device limit "
                    f"({self.max_threads} threads, dims {self.max_block})"
                )
            if any(g > m for g, m in zip(grid, self.max_grid)):
                return f"{where}: invalid launch config: grid {grid} exceeds the device limit {self.max_grid}"
            if threads > k.max_threads:
                return (
                    f"{where}: too many resources requested for launch: block of {threads} threads, "
                    f"kernel allows {k.max_threads} ({k.regs} registers/thread)"
                )
            total = k.static_smem + shared
            if total > self.smem_optin:
                return (
                    f"{where}: too much shared memory: {k.static_smem} static + {shared} dynamic bytes "
                    f"> {self.smem_optin} per block"
                )
            n_args = len(ln.args)
            fn = k.prepared.get(n_args)
            if fn is None:
                fn = mod.module.get_function(ln.kernel)
                fn.prepare("P" * n_args)
                k.prepared[n_args] = fn
                if k.dyn_limit > max(OPT_IN_SHARED_BYTES - k.static_smem, 0):
                    fn.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, k.dyn_limit)
            if shared > k.dyn_limit:
                # Opt in to more than 48 KiB (set on every handle, to be safe).
                for f in (k.func, *k.prepared.values()):
                    f.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
                k.dyn_limit = shared
            plan.append((fn, grid, block, shared, tuple(ptrs[a] for a in ln.args)))
        return plan

    @staticmethod
    def _launch_all(plan: list[tuple]) -> None:
        for fn, grid, block, shared, args in plan:
            fn.prepared_call(grid, block, *args, shared_size=shared)

    # -- run ----------------------------------------------------------------------

    def run(self, cubin_path: str, program: CudaProgram, task_id: str, opts: dict) -> tuple[str, Any]:
        task = self.tasks.get(task_id)
        if task is None:
            raise KeyError(f"unknown task {task_id!r}")
        cuda = self.cuda
        mod = self._module(cubin_path)
        bufs = self._buffers(task_id, task)
        work: list[Any] = []
        try:
            for size in program.workspace:
                work.append(self._alloc(size))
            ptrs = [int(x) for x in (*bufs.inputs, *bufs.outputs, *work)]
            plan = self._plan(mod, program, ptrs)
            if isinstance(plan, str):
                return "error", plan
            # Fresh inputs (a kernel may scribble on them), poisoned outputs/workspace.
            for dst, src, n in zip(bufs.inputs, bufs.master, bufs.in_nbytes):
                if n:
                    cuda.memcpy_dtod(int(dst), int(src), n)
            for alloc, n in zip((*bufs.outputs, *work), (*bufs.out_nbytes, *program.workspace)):
                if n:
                    cuda.memset_d8(int(alloc), _POISON_BYTE, n)
            self._launch_all(plan)
            cuda.Context.synchronize()
            for i, ((shape, dtype), ref, alloc, n) in enumerate(
                zip(task.specs, task.refs, bufs.outputs, bufs.out_nbytes)
            ):
                out = np.empty(shape, dtype=np.dtype(dtype))
                if n:
                    cuda.memcpy_dtoh(out, int(alloc))
                err = compare(out, ref, opts["rtol"], opts["atol"])
                if err is not None:
                    return "wrong", f"output {i}: {err}"
            return "ok", self._time(plan, opts)
        finally:
            for alloc in work:
                with contextlib.suppress(Exception):
                    alloc.free()

    def _time(self, plan: list[tuple], opts: dict) -> list[float]:
        cuda = self.cuda
        flush = bool(opts.get("flush_l2", False))
        for _ in range(max(0, int(opts.get("warmup", 3)))):
            self._launch_all(plan)
        cuda.Context.synchronize()
        number = max(1, int(opts["number"]))
        repeat = max(1, int(opts["repeat"]))
        min_ms = float(opts["min_repeat_ms"])
        cap = _MAX_FLUSHED_NUMBER if flush else _MAX_NUMBER
        number = min(number, cap)
        costs: list[float] = []
        while len(costs) < repeat:
            ms = self._time_flushed(plan, number) if flush else self._time_plain(plan, number)
            if ms < min_ms and number < cap:
                # Same growth rule as the CPU harness: aim 10% past the target.
                scale = min(1.1 * min_ms / ms, 1000.0) if ms > 0 else 1000.0
                number = min(cap, max(number + 1, int(number * scale) + 1))
                continue  # redo this repeat with the larger number
            costs.append(ms * 1e-3 / number)
        return costs

    def _get_events(self, n: int) -> list[Any]:
        while len(self.events) < n:
            self.events.append(self.cuda.Event())
        return self.events[:n]

    def _time_plain(self, plan: list[tuple], number: int) -> float:
        start, end = self._get_events(2)
        start.record()
        for _ in range(number):
            self._launch_all(plan)
        end.record()
        end.synchronize()
        return float(start.time_till(end))

    def _time_flushed(self, plan: list[tuple], number: int) -> float:
        cuda = self.cuda
        if self.flush_buf is None:
            self.flush_buf = self._alloc(self.flush_bytes)
        evs = self._get_events(2 * number)
        for k in range(number):
            # Overwrite a buffer twice the L2 size so each run starts with a cold cache.
            cuda.memset_d8(int(self.flush_buf), k & 0xFF, self.flush_bytes)
            evs[2 * k].record()
            self._launch_all(plan)
            evs[2 * k + 1].record()
        evs[2 * number - 1].synchronize()
        return float(sum(evs[2 * k].time_till(evs[2 * k + 1]) for k in range(number)))

    # -- health and shutdown --------------------------------------------------------

    def healthy(self) -> bool:
        """False once the context is poisoned (illegal address, launch failure...)."""
        try:
            self.cuda.Context.synchronize()
            self.cuda.memset_d8(int(self.probe), 0, 16)
            self.cuda.Context.synchronize()
        except Exception:  # noqa: BLE001 - any failure here means the context is gone
            return False
        return True

    def close(self) -> None:
        """Free device memory and pop the context."""
        for bufs in self.resident.values():
            bufs.free()
        self.resident.clear()
        for alloc in (self.flush_buf, self.probe):
            if alloc is not None:
                with contextlib.suppress(Exception):
                    alloc.free()
        self.flush_buf = None
        self.events.clear()
        self.modules.clear()
        with contextlib.suppress(Exception):
            self.ctx.pop()


def worker_main(conn: Connection, device_id: int = 0) -> None:
    """Serve requests from `conn` on CUDA device `device_id` until "close" or EOF."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        state = _CudaState(device_id)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises
        with contextlib.suppress(Exception):
            conn.send(("fatal", _one_line(f"no CUDA device: {type(e).__name__}: {e}")))
        return
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            op = msg[0]
            if op == "close":
                return
            try:
                if op == "set_task":
                    state.set_task(*msg[1:])
                    reply: tuple[str, Any] = ("ok", None)
                elif op == "remove_task":
                    state.remove_task(msg[1])
                    reply = ("ok", None)
                elif op == "run":
                    reply = state.run(*msg[1:])
                else:
                    reply = ("error", f"unknown request {op!r}")
            except Exception as e:  # noqa: BLE001 - reported, never fatal unless the context died
                text = _one_line(f"{type(e).__name__}: {e}")
                if not state.healthy():
                    with contextlib.suppress(Exception):
                        conn.send(("crash", text))
                    # Skip all clean-up: every CUDA call would fail on this context.
                    os._exit(3)
                reply = ("error", text)
            try:
                conn.send(reply)
            except (EOFError, OSError):
                return
    finally:
        state.close()
