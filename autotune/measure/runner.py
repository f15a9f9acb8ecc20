"""Run built kernels in an isolated worker process: check outputs, then time."""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Self

import numpy as np

from ..prepack import PrepackSpec
from .errors import ErrorKind
from .worker import worker_main


@dataclass(frozen=True)
class RunOptions:
    """Timing and checking parameters for one run."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 50.0
    timeout_s: float = 20.0
    rtol: float = 1e-4
    atol: float = 1e-4
    # (input index, layout): inputs the kernel reads pre-tiled, re-laid out before the run (untimed)
    prepack: tuple[tuple[int, PrepackSpec], ...] = ()
    # inputs flushed from the caches before each timed call (one call per repeat; ``number`` and
    # ``min_repeat_ms`` unused): a model's weights, cold when their kernel runs
    cold_inputs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.number < 1 or self.repeat < 1:
            raise ValueError("number and repeat must be >= 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")


@dataclass(frozen=True)
class RunResult:
    """Per-repeat seconds per call, or an error."""

    costs: tuple[float, ...]
    error_kind: ErrorKind | None
    error_msg: str
    run_s: float

    @property
    def mean_s(self) -> float:
        """Mean cost in seconds, or inf if the run failed."""
        if self.error_kind is not None or not self.costs:
            return math.inf
        return sum(self.costs) / len(self.costs)


class _WorkerCrashed(Exception):
    pass


class _WorkerTimeout(Exception):
    pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker closed its pipe but did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by {name}"
    return f"worker exited with code {code}"


class CpuRunner:
    """Owns one worker process; restarts it after crashes and timeouts.

    The worker is started with the "spawn" method, so a script that creates a
    runner at top level needs the usual `if __name__ == "__main__":` guard.
    """

    def __init__(self, start_timeout_s: float = 120.0) -> None:
        self._ctx = mp.get_context("spawn")
        self._start_timeout_s = start_timeout_s
        self._proc: Any = None
        self._conn: Connection | None = None
        self._ready = False
        self._tasks: dict[str, tuple[Any, ...]] = {}
        self._sent: set[str] = set()  # task ids the current worker holds
        self._lock = threading.Lock()
        self._closed = False
        self._last_exit = ""  # how the previous worker ended, for crash messages

    # -- public API -----------------------------------------------------------

    def set_task(
        self,
        task_id: str,
        inputs: list[np.ndarray],
        reference_outputs: list[np.ndarray],
        output_shapes_dtypes: list[tuple[tuple[int, ...], str]],
    ) -> None:
        """Register inputs/references; shipped to the worker once, on first use."""
        if len(reference_outputs) != len(output_shapes_dtypes):
            raise ValueError("one reference per output is required")
        from ..te.expr import SUB_BYTE_DTYPES
        from ..te.workload import numpy_dtype

        dts = [numpy_dtype(t) if isinstance(t, str) else np.dtype(t) for _, t in output_shapes_dtypes]
        # ml_dtypes' sub-byte integers travel as dtypes (unpickling imports ml_dtypes; their .str is void)
        specs = [(tuple(int(d) for d in s), dt if dt.name in SUB_BYTE_DTYPES else dt.str)
                 for (s, _), dt in zip(output_shapes_dtypes, dts)]
        refs = [np.asarray(r) for r in reference_outputs]
        for i, (ref, (shape, _)) in enumerate(zip(refs, specs)):
            if ref.shape != shape:
                raise ValueError(f"reference {i} has shape {ref.shape}, output spec {shape}")
        ins = [np.ascontiguousarray(a) for a in inputs]
        with self._lock:
            self._tasks[task_id] = (ins, refs, specs)
            self._sent.discard(task_id)

    def remove_task(self, task_id: str) -> None:
        """Forget a task (frees its arrays here; the worker copy goes on restart)."""
        with self._lock:
            self._tasks.pop(task_id, None)

    def run(
        self,
        lib_path: str,
        kernel_name: str,
        task_id: str,
        options: RunOptions = RunOptions(),
    ) -> RunResult:
        """Check the kernel against the task's references, then time it."""
        start = time.perf_counter()

        def result(kind: ErrorKind | None, msg: str, costs: tuple[float, ...] = ()) -> RunResult:
            return RunResult(costs, kind, msg, time.perf_counter() - start)

        with self._lock:
            if self._closed:
                raise RuntimeError("CpuRunner is closed")
            task = self._tasks.get(task_id)
            if task is None:
                return result(ErrorKind.RUNTIME_ERROR, f"unknown task {task_id!r}")
            try:
                self._ensure_ready()
                if task_id not in self._sent:
                    timeout = max(options.timeout_s, self._start_timeout_s)
                    reply = self._request(("set_task", task_id, *task), timeout)
                    if reply[0] != "ok":
                        return result(ErrorKind.RUNTIME_ERROR, str(reply[1]))
                    self._sent.add(task_id)
                opts = {
                    "number": options.number,
                    "repeat": options.repeat,
                    "min_repeat_ms": options.min_repeat_ms,
                    "rtol": options.rtol,
                    "atol": options.atol,
                    "prepack": options.prepack,
                    "cold_inputs": options.cold_inputs,
                }
                reply = self._request(("run", lib_path, kernel_name, task_id, opts), options.timeout_s)
            except _WorkerCrashed as e:
                return result(ErrorKind.RUNTIME_CRASH, str(e))
            except _WorkerTimeout:
                return result(
                    ErrorKind.RUN_TIMEOUT,
                    f"no result within {options.timeout_s:g}s; worker killed",
                )
        status, payload = reply
        if status == "ok":
            return result(None, "", tuple(float(c) for c in payload))
        if status == "wrong":
            return result(ErrorKind.WRONG_ANSWER, str(payload))
        return result(ErrorKind.RUNTIME_ERROR, str(payload))

    def close(self) -> None:
        """Stop the worker process."""
        with self._lock:
            self._closed = True
            self._stop_worker(graceful=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Best effort only: at interpreter shutdown modules may already be gone.
        with contextlib.suppress(Exception):
            self._kill()
            self._stop_worker(graceful=False)

    # -- worker management ----------------------------------------------------

    worker_label = "worker"  # in error messages

    def _worker_process(self, conn: Any) -> Any:
        """The (unstarted) worker process, talking over ``conn``."""
        return self._ctx.Process(target=worker_main, args=(conn,), daemon=True, name="autotune-runner")

    def _spawn(self) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._worker_process(child_conn)
        proc.start()
        # Drop our copy of the child's end so a dead worker reads as EOF here.
        child_conn.close()
        self._proc, self._conn, self._ready = proc, parent_conn, False
        self._sent.clear()

    def _ensure_ready(self) -> None:
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self._stop_worker(graceful=False)
            self._spawn()
        if self._ready:
            return
        try:
            reply = self._recv(self._start_timeout_s)
        except _WorkerTimeout:
            raise _WorkerCrashed(
                f"{self.worker_label} did not start within {self._start_timeout_s:g}s"
            ) from None
        if reply[0] == "fatal":  # the worker cannot work at all (e.g. no usable device)
            self._stop_worker(graceful=False)
            raise RuntimeError(str(reply[1]))
        if reply[0] != "ready":
            self._stop_worker(graceful=False)
            raise _WorkerCrashed(f"unexpected worker greeting {reply!r}")
        self._ready = True

    def _request(self, msg: tuple[Any, ...], timeout: float) -> tuple[Any, ...]:
        assert self._conn is not None
        try:
            self._conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._after_failure()
            raise _WorkerCrashed(self._last_exit) from None
        return self._recv(timeout)

    def _recv(self, timeout: float) -> tuple[Any, ...]:
        assert self._conn is not None
        try:
            if not self._conn.poll(timeout):
                self._kill()
                self._after_failure()
                raise _WorkerTimeout()
            return self._conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            self._after_failure()
            raise _WorkerCrashed(self._last_exit) from None

    def _after_failure(self) -> None:
        self._stop_worker(graceful=False)
        # Start the replacement now so that its start-up overlaps whatever the
        # tuner does next (typically compiling the next batch).
        if not self._closed:
            self._spawn()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()

    def _stop_worker(self, graceful: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc, self._conn, self._ready = None, None, False
        self._sent.clear()
        if proc is None:
            return
        if graceful and conn is not None and proc.is_alive():
            try:
                conn.send(("close",))
            except (OSError, EOFError):
                pass
        proc.join(2.0 if graceful else 0.5)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        self._last_exit = _describe_exit(proc.exitcode)
        if conn is not None:
            conn.close()
        proc.close()
