"""Worker process: loads kernel libraries, checks outputs and times kernels.

Runs in a separate (spawned) process so that a crashing or hanging kernel only
takes this process down. Protocol: the parent sends one request tuple at a
time and waits for exactly one reply tuple.

Requests:
    ("set_task", task_id, inputs, reference_outputs, output_specs)
    ("run", lib_path, kernel_name, task_id, options_dict)
    ("close",)
Replies:
    ("ready", pid)        once, after start-up
    ("ok", payload)       payload: None for set_task, list of costs for run
    ("wrong", message)    outputs do not match the reference
    ("error", message)    a Python exception was raised
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..aligned import aligned, aligned_empty
from ..prepack import prepack_array
from .harness import COLD_TIMER_SYMBOL, TIMER_SYMBOL

# Libraries stay loaded (fast reruns) but a long tuning session must not run
# into the mmap limit, so the least recently used ones are unloaded.
_MAX_LOADED_LIBS = 128
_INT_POISON_BYTE = 0xA5


@dataclass
class _Task:
    inputs: list[np.ndarray]
    refs: list[np.ndarray]
    specs: list[tuple[tuple[int, ...], str]]


@dataclass
class _Lib:
    cdll: ctypes.CDLL
    timer: Any
    kernels: dict[str, Any]


def _die_with_parent() -> None:
    # daemon=True only covers a clean parent exit; PDEATHSIG also covers the
    # parent being SIGKILLed while the kernel spins.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Output buffer pre-filled so that unwritten elements fail the check."""
    arr = aligned_empty(shape, dtype)
    if arr.dtype.kind in "fc":
        arr.fill(np.nan)
    else:
        arr.view(np.uint8).fill(_INT_POISON_BYTE)
    return arr


def compare(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str | None:
    """None if `out` matches `ref`, else a description of the mismatch."""
    if out.shape != ref.shape:
        return f"shape {out.shape} != reference {ref.shape}"
    if out.dtype == np.bool_:
        # Raw bytes, so a poisoned (non 0/1) byte counts as a mismatch.
        out = out.view(np.uint8)
    if ref.dtype == np.bool_:
        ref = ref.view(np.uint8)
    wide = np.complex128 if out.dtype.kind == "c" or ref.dtype.kind == "c" else np.float64
    o = out.astype(wide)
    r = ref.astype(wide)
    if np.allclose(o, r, rtol=rtol, atol=atol):
        return None
    n_nan = int(np.count_nonzero(np.isnan(o)))
    diff = np.abs(o - r)
    finite = diff[np.isfinite(diff)]
    max_err = float(finite.max()) if finite.size else float("nan")
    bad = int(np.count_nonzero(~np.isclose(o, r, rtol=rtol, atol=atol)))
    msg = f"max abs error {max_err:.6g}, {bad}/{o.size} elements mismatch"
    if n_nan:
        msg += f", {n_nan} NaN (unwritten or invalid)"
    return msg


class _State:
    def __init__(self) -> None:
        self.tasks: dict[str, _Task] = {}
        self.libs: OrderedDict[str, _Lib] = OrderedDict()

    def set_task(self, task_id: str, inputs: list, refs: list, specs: list) -> None:
        self.tasks[task_id] = _Task(
            [aligned(a) for a in inputs],
            [np.asarray(r) for r in refs],
            [(tuple(s), str(d)) for s, d in specs],
        )

    def _load(self, lib_path: str, kernel_name: str) -> tuple[Any, Any]:
        lib = self.libs.get(lib_path)
        if lib is None:
            # RTLD_LOCAL: every library exports autotune_time and often the same
            # kernel name; local binding keeps them from resolving to each other.
            cdll = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            timer = getattr(cdll, TIMER_SYMBOL)
            timer.argtypes = [
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_int,
                ctypes.c_double,
                ctypes.POINTER(ctypes.c_double),
            ]
            timer.restype = ctypes.c_int
            lib = _Lib(cdll, timer, {})
            self.libs[lib_path] = lib
            self._evict()
        else:
            self.libs.move_to_end(lib_path)
        fn = lib.kernels.get(kernel_name)
        if fn is None:
            fn = getattr(lib.cdll, kernel_name)
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = None
            lib.kernels[kernel_name] = fn
        return fn, lib.timer

    def _evict(self) -> None:
        import _ctypes

        while len(self.libs) > _MAX_LOADED_LIBS:
            _, old = self.libs.popitem(last=False)
            try:
                _ctypes.dlclose(old.cdll._handle)
            except OSError:
                pass

    def run(self, lib_path: str, kernel_name: str, task_id: str, opts: dict) -> tuple[str, Any]:
        task = self.tasks.get(task_id)
        if task is None:
            raise KeyError(f"unknown task {task_id!r}")
        fn, timer = self._load(lib_path, kernel_name)
        # Fresh input copies: a kernel that scribbles on its inputs must not
        # poison the correctness check of later candidates.
        inputs = [aligned(a.copy()) for a in task.inputs]
        for i, spec in opts.get("prepack", ()):
            inputs[i] = prepack_array(inputs[i], spec)
        outputs = [poisoned(s, d) for s, d in task.specs]
        arrays = inputs + outputs
        args = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        fn(args)
        for i, (out, ref) in enumerate(zip(outputs, task.refs)):
            err = compare(out, ref, opts["rtol"], opts["atol"])
            if err is not None:
                return "wrong", f"output {i}: {err}"
        repeat = int(opts["repeat"])
        costs = (ctypes.c_double * repeat)()
        cold = opts.get("cold_inputs", ())
        if cold:
            sizes = [arrays[i].nbytes if i in cold else 0 for i in range(len(arrays))]
            cold_timer = self._cold_timer(lib_path)
            cold_timer(args, (ctypes.c_longlong * len(sizes))(*sizes), len(sizes), repeat, costs)
        else:
            timer(args, int(opts["number"]), repeat, float(opts["min_repeat_ms"]), costs)
        return "ok", list(costs)

    def _cold_timer(self, lib_path: str) -> Any:
        lib = self.libs[lib_path]
        fn = lib.kernels.get(COLD_TIMER_SYMBOL)
        if fn is None:
            fn = getattr(lib.cdll, COLD_TIMER_SYMBOL)
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_double)]
            fn.restype = ctypes.c_int
            lib.kernels[COLD_TIMER_SYMBOL] = fn
        return fn


def worker_main(conn: Connection) -> None:
    """Serve requests from `conn` until "close" or until the parent goes away."""
    _die_with_parent()
    # Ctrl-C is for the tuner to handle; the worker is stopped through the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    state = _State()
    conn.send(("ready", os.getpid()))
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
            elif op == "run":
                reply = state.run(*msg[1:])
            else:
                reply = ("error", f"unknown request {op!r}")
        except Exception as e:  # noqa: BLE001 - any failure is reported, never fatal
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
