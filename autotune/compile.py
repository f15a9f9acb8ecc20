"""Use tuning results at compile time: build a workload with its best recorded schedule and call
the kernel in-process on numpy arrays."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Sequence

import numpy as np

from records import TuningDatabase
from schedules import make_space

from .aligned import aligned, aligned_empty
from .measure import TIMER_SYMBOL, Builder
from .prepack import prepack_array
from .program import Program, build_program
from .schedule import ScheduleError, Step, step_from_dict
from .search.tune import workload_label
from .target import Target
from .te import Workload


class CompileError(RuntimeError):
    """A workload could not be compiled, not even with its default schedule."""


class CompiledKernel:
    """A built kernel of one workload, callable on numpy arrays (inputs in, new outputs back)."""

    def __init__(self, workload: Workload, target: Target, steps: Sequence[Step], config: dict | None,
                 program: Program, lib_path: str, tuned: bool) -> None:
        self.workload = workload
        self.target = target
        self.steps = list(steps)
        self.config = config
        self.program = program
        self.lib_path = lib_path
        self.tuned = tuned
        # RTLD_LOCAL: every kernel library exports autotune_time, often the same kernel name too
        self.lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.func = getattr(self.lib, program.kernel_name)
        self.func.argtypes = [ctypes.c_void_p]
        self.func.restype = None
        self._timer = getattr(self.lib, TIMER_SYMBOL)
        self._timer.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                ctypes.POINTER(ctypes.c_double)]
        self._timer.restype = ctypes.c_int

    @property
    def kernel_name(self) -> str:
        return self.program.kernel_name

    @property
    def source(self) -> str:
        """The generated C source of the kernel (without the timing harness)."""
        return self.program.source

    @property
    def lowered(self) -> str:
        """The lowered loop-nest IR, as text."""
        return str(self.program.func)

    def _prepare(self, inputs: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
        tensors = self.workload.inputs
        if len(inputs) != len(tensors):
            names = ", ".join(t.name for t in tensors)
            raise ValueError(f"{self.workload.name} takes {len(tensors)} inputs ({names}), got {len(inputs)}")
        arrays = []
        for t, a in zip(tensors, inputs):
            arr = np.asarray(a)
            want = np.dtype(t.dtype)
            if arr.shape != tuple(t.shape):
                raise ValueError(f"input {t.name!r}: expected shape {tuple(t.shape)}, got {arr.shape}")
            castable = arr.dtype.kind in "biuf" and np.can_cast(arr.dtype, want, "same_kind")
            if arr.dtype != want and not castable:
                raise ValueError(f"input {t.name!r}: expected dtype {want}, got {arr.dtype}")
            # copies only when the layout, the alignment or the dtype is not what the kernel reads
            arrays.append(aligned(np.asarray(arr, dtype=want)))
        for i, spec in self.program.prepack:  # constant operands the kernel reads pre-tiled
            arrays[i] = prepack_array(arrays[i], spec)
        outputs = [aligned_empty(tuple(t.shape), t.dtype) for t in self.workload.outputs]
        buffers = arrays + outputs
        args = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
        return arrays, outputs, args

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Run the kernel once on ``inputs`` (in workload order); returns freshly allocated outputs."""
        arrays, outputs, args = self._prepare(inputs)
        self.func(args)
        del arrays  # kept alive until the kernel returned
        return outputs

    def time(self, *inputs: np.ndarray, number: int = 1, repeat: int = 5,
             min_repeat_ms: float = 100.0) -> list[float]:
        """Seconds per call, one value per repeat, from the C timing harness (after a warm-up call;
        ``number`` grows until one repeat lasts ``min_repeat_ms``)."""
        if repeat < 1:
            raise ValueError("repeat must be >= 1")
        arrays, outputs, args = self._prepare(inputs)
        costs = (ctypes.c_double * repeat)()
        self._timer(args, max(1, int(number)), int(repeat), float(min_repeat_ms), costs)
        del arrays, outputs
        return list(costs)

    def __repr__(self) -> str:
        state = "tuned" if self.tuned else "default schedule"
        return f"CompiledKernel({workload_label(self.workload)}, {self.target.kind}, {state})"


def _warn(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


def _first_line(text: str) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return lines[0].strip() if lines else "unknown error"


def _compile(workload: Workload, target: Target, steps: list[Step], builder: Builder) -> tuple[Program, str]:
    """Lower, render and build; raises ScheduleError or CompileError."""
    program = build_program(workload, steps, target)
    result = builder.build(program.kernel_name, program.source)
    if not result.ok or result.lib_path is None:
        raise CompileError(f"{result.error_kind}: {_first_line(result.error_msg)}")
    return program, result.lib_path


def build_kernel(workload: Workload, target: Target, db: TuningDatabase | None = None,
                 builder: Builder | None = None) -> CompiledKernel:
    """Compile ``workload`` with the best schedule recorded in ``db`` for ``target``; without one
    (or if it no longer builds) warn loudly on stderr and use the space's rule-based default
    schedule (``SearchSpace.default_config``)."""
    builder = builder or Builder(workers=1)
    where = f"{workload_label(workload)} on {target.kind} {target.key}"
    record = db.best(workload.key, target.key) if db is not None else None
    if record is None:
        _warn(f"no tuned schedule for {where}; using the default schedule (run scripts/tune.py)")
    else:
        try:
            steps = [step_from_dict(d) for d in record.steps]
            program, lib = _compile(workload, target, steps, builder)
            return CompiledKernel(workload, target, steps, record.config, program, lib, tuned=True)
        except (ScheduleError, CompileError, KeyError, TypeError, ValueError) as err:
            why = f"{type(err).__name__}: {_first_line(str(err))}"
            _warn(f"tuned schedule for {where} failed to build ({why}); "
                  "using the default schedule (re-tune with scripts/tune.py)")
    space = make_space(workload, target)
    problem = ""
    for config in space.default_configs():  # the rules' configs, best first
        steps = space.steps(config)
        try:
            program, lib = _compile(workload, target, steps, builder)
        except ScheduleError as err:
            problem = f"is invalid: {_first_line(str(err))}"
        except CompileError as err:
            problem = f"failed to build: {err}"
        else:
            return CompiledKernel(workload, target, steps, config, program, lib, tuned=False)
    raise CompileError(f"default schedule of {where} {problem}")
