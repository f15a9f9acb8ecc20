"""Run CUDA programs in an isolated worker that owns the GPU context: check, then time."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from .cuda_builder import CudaProgram
from .cuda_worker import worker_main as cuda_worker_main
from .errors import ErrorKind
from .runner import CpuRunner, RunOptions, RunResult, _WorkerCrashed, _WorkerTimeout


@dataclass(frozen=True)
class CudaRunOptions(RunOptions):
    """RunOptions plus GPU specifics: warm-up launches and L2 flushing between runs."""

    flush_l2: bool = False  # overwrite 2x the L2 before every timed run (cold cache)
    warmup: int = 3  # untimed runs of the launch sequence before timing

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")


class CudaRunner(CpuRunner):
    """One worker process per GPU holding a pycuda context; restarts it after crashes.

    Like CpuRunner (same set_task/remove_task/close), but `run` takes a cubin and
    a CudaProgram. A kernel that poisons the context (illegal address, launch
    failure) gives RUNTIME_CRASH, a rejected launch (bad config, too many
    resources) RUNTIME_ERROR, a hang RUN_TIMEOUT; the runner stays usable. If
    the worker cannot create a context at all, `run` raises
    RuntimeError("no CUDA device: ..."). Needs the `if __name__ == "__main__":`
    guard in scripts, as the worker is spawned.
    """

    def __init__(self, device_id: int = 0, start_timeout_s: float = 120.0) -> None:
        super().__init__(start_timeout_s)
        self.device_id = int(device_id)

    # -- public API -------------------------------------------------------------

    def remove_task(self, task_id: str) -> None:
        """Forget a task here and free its device buffers in the worker."""
        super().remove_task(task_id)
        with self._lock:
            if task_id not in self._sent:
                return
            self._sent.discard(task_id)
            if self._ready and self._proc is not None and self._proc.is_alive():
                try:
                    self._request(("remove_task", task_id), self._start_timeout_s)
                except (_WorkerCrashed, _WorkerTimeout):
                    pass

    def run(  # type: ignore[override]
        self,
        cubin_path: str,
        program: CudaProgram,
        task_id: str,
        options: RunOptions = CudaRunOptions(),
    ) -> RunResult:
        """Check `program` (kernels from `cubin_path`) against the task's references, then time it.

        Costs are seconds per run of the whole launch sequence, one per repeat.
        """
        start = time.perf_counter()

        def result(kind: ErrorKind | None, msg: str, costs: tuple[float, ...] = ()) -> RunResult:
            return RunResult(costs, kind, msg, time.perf_counter() - start)

        with self._lock:
            if self._closed:
                raise RuntimeError("CudaRunner is closed")
            task = self._tasks.get(task_id)
            if task is None:
                return result(ErrorKind.RUNTIME_ERROR, f"unknown task {task_id!r}")
            ins, refs, _ = task
            problem = program.check(len(ins) + len(refs))
            if problem is not None:
                return result(ErrorKind.RUNTIME_ERROR, problem)
            opts = {
                "number": options.number,
                "repeat": options.repeat,
                "min_repeat_ms": options.min_repeat_ms,
                "rtol": options.rtol,
                "atol": options.atol,
                "flush_l2": bool(getattr(options, "flush_l2", False)),
                "warmup": int(getattr(options, "warmup", 3)),
            }
            # The worker needs the launch plan only, not the source text.
            plan = dataclasses.replace(program, source="")
            try:
                self._ensure_ready()
                if task_id not in self._sent:
                    timeout = max(options.timeout_s, self._start_timeout_s)
                    reply = self._request(("set_task", task_id, *task), timeout)
                    if reply[0] != "ok":
                        return result(ErrorKind.RUNTIME_ERROR, str(reply[1]))
                    self._sent.add(task_id)
                reply = self._request(("run", cubin_path, plan, task_id, opts), options.timeout_s)
            except _WorkerCrashed as e:
                return result(ErrorKind.RUNTIME_CRASH, str(e))
            except _WorkerTimeout:
                return result(
                    ErrorKind.RUN_TIMEOUT, f"no result within {options.timeout_s:g}s; worker killed"
                )
            status, payload = reply
            if status == "crash":
                # The worker exits by itself; reap it and start a fresh context.
                self._after_failure()
                return result(ErrorKind.RUNTIME_CRASH, f"{payload} (worker restarted)")
        if status == "ok":
            return result(None, "", tuple(float(c) for c in payload))
        if status == "wrong":
            return result(ErrorKind.WRONG_ANSWER, str(payload))
        return result(ErrorKind.RUNTIME_ERROR, str(payload))

    # -- worker management --------------------------------------------------------

    worker_label = "CUDA worker"

    def _worker_process(self, conn: Any) -> Any:
        return self._ctx.Process(
            target=cuda_worker_main,
            args=(conn, self.device_id),
            daemon=True,
            name=f"autotune-cuda{self.device_id}",
        )

    def _stop_worker(self, graceful: bool) -> None:
        try:
            super()._stop_worker(graceful)
        except ValueError:
            # Process.close() refuses while a killed worker is still tearing its
            # CUDA context down; the state is already reset, it is reaped later.
            pass
