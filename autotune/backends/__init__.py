"""One backend per target kind: everything that differs between kinds of target, in one place.

A backend bundles what the rest of the compiler asks of a target kind: this machine's target
(``resolve``), the schedule space, the rendered program of a schedule, the builder and runner that
measure it, the module backend of a compiled model, and default options. ``Target.backend`` reaches
the backend of a target; adding a kind of target is one module here plus its ``register`` call.
Backends import their toolchains lazily, so that looking one up costs nothing (and the CUDA backend
imports pycuda only where a GPU run starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..measure import RunOptions, RunResult
    from ..schedule import Step
    from ..target import Target
    from ..te import Workload


class UnknownTargetKind(ValueError):
    """No backend is registered for a target kind."""


class TargetBackend:
    """What one kind of target does; subclasses override what differs."""

    kind = ""
    version_fields: tuple[str, ...] = ()  # fingerprint fields that name software versions
    profiles_modules = False  # compiled modules can be profiled call by call (compile --profile, rerank)
    # kernels run on a device of their own: bench times them against PyTorch on that device, not
    # against numpy / onnxruntime in this process
    benched_against_torch = False
    # a kernel is timed with the whole machine to itself (a CPU): runners of one host take turns
    runs_own_host = False
    # its builds are for the building host's own hardware (gcc -march=native): on a cluster they are
    # made only on workers whose host is of the target's kind of machine
    builds_for_own_host = False
    # its programs can write their output through a view of a larger buffer (render_into), so
    # a model's concatenations are written in place by their inputs' producers (graph.inplace)
    concat_in_place = False

    def resolve(self) -> Target:
        """The target of this kind on this machine; raises RuntimeError where there is none."""
        raise NotImplementedError

    def vector_lanes(self, fingerprint: dict) -> int:
        """float32 lanes of the widest vector load the target has."""
        raise NotImplementedError

    def describe(self, fingerprint: dict) -> str:
        return f"{self.kind} {fingerprint.get('name', '?')}"

    def make_space(self, workload: Workload, target: Target) -> Any:
        """The schedule space (a schedules.SearchSpace) of ``workload`` on ``target``."""
        raise NotImplementedError

    def render(self, workload: Workload, steps: Sequence[Step], target: Target) -> Any:
        """The program of one schedule (raises ScheduleError for an illegal one)."""
        raise NotImplementedError

    def render_into(self, workload: Workload, steps: Sequence[Step], target: Target, view: Any) -> Any:
        """The program of one schedule writing its output through ``view`` (a graph.inplace.View):
        for a backend with ``concat_in_place``."""
        raise NotImplementedError(f"{self.kind} programs write whole outputs only")

    def measured_kernel(self, workload: Workload, steps: Sequence[Step],
                        target: Target) -> tuple[str, str, Any]:
        """(kernel name, source, run payload) of one schedule to measure."""
        raise NotImplementedError

    def make_builder(self, target: Target, workers: int | None = None) -> Any:
        raise NotImplementedError

    def make_runner(self, target: Target) -> Any:
        raise NotImplementedError

    def run(self, runner: Any, lib_path: str, name: str, payload: Any, task_id: str,
            options: RunOptions) -> RunResult:
        raise NotImplementedError

    def run_options(self, workload: Workload, options: RunOptions) -> RunOptions:
        """The options a workload's kernels are measured with (default: ``options`` as given)."""
        del workload
        return options

    def runner_envs(self) -> list[dict[str, str]] | None:
        """The environment of each runner this host holds (one measuring worker each on a
        cluster), or None: any number, that take turns (runs_own_host)."""
        return None

    def module_backend(self, target: Target, **kwargs: Any) -> Any:
        """The graph runtime's ModuleBackend: builds a compiled model for the target."""
        raise NotImplementedError

    def entry_note(self, entry: str) -> str:
        """How a compiled module's entry points are called (compile.py's summary)."""
        return f"entry point {entry}(void** args)"


_BACKENDS: dict[str, TargetBackend] = {}


def register(backend: TargetBackend) -> TargetBackend:
    """Make ``backend`` the one of its kind."""
    _BACKENDS[backend.kind] = backend
    return backend


def backend_for(kind: str) -> TargetBackend:
    """The backend of a target kind; UnknownTargetKind (one line) if there is none."""
    _load_builtin()
    try:
        return _BACKENDS[kind]
    except KeyError:
        raise UnknownTargetKind(f"unknown target {kind!r}; valid targets: {', '.join(kinds())}") from None


def kinds() -> tuple[str, ...]:
    """The registered target kinds."""
    _load_builtin()
    return tuple(_BACKENDS)


def _load_builtin() -> None:
    from . import cpu, cuda  # noqa: F401  (each registers itself on first import)


__all__ = ["TargetBackend", "UnknownTargetKind", "backend_for", "kinds", "register"]
