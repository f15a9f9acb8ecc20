"""What runs on the workers: render + build a few candidates (any worker), run one built candidate
(a worker that declares the target's resource). A worker keeps one builder and one runner per
target in this module's state, so a runner process (and its device context) lives as long as the
worker; libraries travel as bytes with the build result, so a run may happen on another host."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..measure import ErrorKind, RunResult
from ..schedule import ScheduleError, Step
from ..search.measure_batch import MeasureTask
from ..target import Target
from ..te import Workload


@dataclass(frozen=True)
class Session:
    """One tuning session's workload, target and measurement task, shipped to workers once."""

    workload: Workload
    target: Target
    task: MeasureTask


@dataclass(frozen=True)
class Built:
    """A built candidate (or why it is not): the library travels as bytes under its cache name."""

    name: str
    payload: Any
    lib_name: str | None
    lib_bytes: bytes | None = field(repr=False)
    error_kind: str | None
    error_msg: str
    render_s: float
    build_s: float


@dataclass(frozen=True)
class Ran:
    """The outcome of one candidate: its build (without the library), the run's result (None where
    the build failed) and the pid of the worker that ran it."""

    built: Built
    result: RunResult | None
    worker_pid: int


_lock = threading.Lock()
_builders: dict[str, Any] = {}
_runners: dict[str, Any] = {}
_tasks_set: dict[str, set[str]] = {}  # runner key -> task ids registered with it


def _builder(target: Target) -> Any:
    with _lock:
        if target.key not in _builders:
            _builders[target.key] = target.backend.make_builder(target, workers=1)
        return _builders[target.key]


def _runner(target: Target) -> Any:
    with _lock:
        if target.key not in _runners:
            _runners[target.key] = target.backend.make_runner(target)
            _tasks_set[target.key] = set()
        return _runners[target.key]


def build_candidate(session: Session, steps: list[Step]) -> Built:
    """Render and build one schedule on this worker."""
    t0 = time.perf_counter()
    wl, target = session.workload, session.target
    try:
        name, source, payload = target.backend.measured_kernel(wl, steps, target)
    except ScheduleError as err:
        return Built("", None, None, None, ErrorKind.INVALID_SCHEDULE.value, str(err),
                     time.perf_counter() - t0, 0.0)
    t1 = time.perf_counter()
    b = _builder(target).build(name, source)
    if b.error_kind is not None:
        return Built(name, payload, None, None, b.error_kind.value, b.error_msg, t1 - t0, b.build_s)
    return Built(name, payload, os.path.basename(b.lib_path), Path(b.lib_path).read_bytes(), None, "",
                 t1 - t0, b.build_s)


def build_candidates(session: Session, steps: list[list[Step]]) -> list[Built]:
    """Render and build several schedules on this worker, in turn (one task where there would be
    several: fewer round trips through the scheduler)."""
    return [build_candidate(session, st) for st in steps]


def run_candidate(session: Session, chunk: list[Built], index: int) -> Ran:
    """Run ``chunk[index]`` (one candidate of a build task's) on this worker's runner of the
    session's target."""
    built = chunk[index]
    pid = os.getpid()
    if built.error_kind is not None:
        return Ran(built, None, pid)
    target, task = session.target, session.task
    runner = _runner(target)
    with _lock:
        if task.task_id not in _tasks_set[target.key]:
            runner.set_task(task.task_id, task.inputs, task.reference, task.output_specs)
            _tasks_set[target.key].add(task.task_id)
    lib = _local_library(built)
    with _host_lock(target) if target.backend.runs_own_host else contextlib.nullcontext():
        result = target.backend.run(runner, lib, built.name, built.payload, task.task_id, task.options)
    return Ran(dataclasses.replace(built, lib_bytes=None), result, pid)


def _host_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"autotune-dask-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    return folder


@contextlib.contextmanager
def _host_lock(target: Target) -> Iterator[None]:
    """Held while a kernel of ``target`` runs: the runners of one host time one kernel at a time
    (the lock is the kernel's whole machine, whatever the number of workers on it)."""
    with open(_host_folder() / f"run-{target.kind}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _local_library(built: Built) -> str:
    """The built library as a file on this host (named by its content hash, written once)."""
    assert built.lib_name is not None and built.lib_bytes is not None
    folder = _host_folder()
    path = folder / built.lib_name
    if not path.is_file():
        tmp = folder / f".{built.lib_name}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_bytes(built.lib_bytes)
        os.replace(tmp, path)
    return str(path)
