"""The model compiler: ONNX -> graph IR -> passes -> fused groups -> tasks -> kernels with the best
known schedules -> memory plan -> one module.

    from autotune.graph import compile_model
    module = compile_model("model.onnx", db=TuningDatabase("tuning.db"))
    (probs,) = module.run({"x": x})             # numpy in, numpy out
    print(module.summary.line())               # tuned vs default-schedule subgraphs, arena size
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from autotune.aligned import aligned_empty
from autotune.ir.lower import c_name
from autotune.prepack import prepack_array
from autotune.program import CudaSource, Program, kernel_name
from autotune.schedule import ScheduleError, Step, step_from_dict
from autotune.target import Target, cpu_target
from autotune.te.workload import numpy_dtype
from records import TuningDatabase
from schedules import make_space

from .feeds import random_inputs
from .forms import FORMS, Plan, default_forms, describe, forms_in, get_form
from .frontend import from_onnx
from .fusion import Group, fuse
from .half import as_declared
from .inplace import View, concats_in_place
from .ir import Graph, GraphError, TensorType
from .memory import MemoryPlan, plan_memory
from .passes import canonicalize, finish
from .runtime import KernelSource, check_inputs, check_outputs, make_backend
from .tasks import KernelCall, Task, extract_tasks

LAYOUTS = ("NHWC", "NCHW", "auto")
SMALL_OUTPUT_BYTES = 64 << 10  # outputs below this size are not aligned (CompiledModule._outputs)


def load_model(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A graph from a Graph, an ONNX ModelProto / path / bytes, or a zoo spec (``zoo:resnet18``)."""
    if isinstance(model, Graph):
        return model
    if isinstance(model, str) and model.startswith("zoo:"):
        from . import zoo

        try:
            proto = zoo.make_model(model)
        except ValueError as err:
            raise GraphError(str(err)) from None
        return from_onnx(proto, input_shapes)
    return from_onnx(model, input_shapes)


@dataclass
class Prepared:
    """A model after the passes: its graph, fused groups, tasks and one call per group."""

    graph: Graph
    groups: list[Group]
    tasks: list[Task]
    calls: list[KernelCall]
    layout: str
    forms: dict[str, str] = field(default_factory=dict)  # node -> the form computing it (forms.py)

    @property
    def winograd_convs(self) -> dict[str, int]:
        """Conv -> m of the convolutions computed as Winograd F(m x m, 3 x 3)."""
        return {n: int(f[len("winograd"):]) for n, f in self.forms.items() if f.startswith("winograd")}

    def describe(self) -> str:
        weights = sum(t.weight for t in self.tasks)
        wg = f", {describe(self.forms)}" if self.forms else ""
        return (
            f"{self.graph.name}: {len(self.graph.nodes)} nodes -> {len(self.groups)} fused kernels, "
            f"{len(self.tasks)} distinct tasks ({weights} calls), layout {self.layout}{wg}"
        )


def prepare(
    model: Any,
    layout: str = "NHWC",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    forms: Plan | None = None,
    in_place: bool = False,
) -> Prepared:
    """Import (unless given a Graph), run the passes, fuse and extract tasks; ``forms``: a form
    (``forms.FORMS``) for every node it fits, or node name -> form; ``in_place``: concatenations
    written in place by their inputs' producers where they can be (``graph.inplace``; for a
    target whose backend renders views)."""
    return _prepare_canonical(_canonical(model, layout, input_shapes), layout, forms, in_place)


def _canonical(model: Any, layout: str, input_shapes: Mapping[str, Sequence[int]] | None) -> Graph:
    """The model imported (unless given a Graph) and taken through ``passes.canonicalize``."""
    if layout not in ("NHWC", "NCHW"):
        raise GraphError(f"unknown layout {layout!r}; valid: NHWC, NCHW")
    return canonicalize(load_model(model, input_shapes), layout)


def _prepare_canonical(base: Graph, layout: str, forms: Plan | None, in_place: bool) -> Prepared:
    """``prepare`` from the graph ``passes.canonicalize`` made in ``layout``."""
    graph = finish(base, forms)
    groups = fuse(graph)
    views: dict[str, View] = {}
    if in_place:
        groups, views = concats_in_place(groups, graph)
    tasks, calls = extract_tasks(groups, graph, views)
    return Prepared(graph, groups, tasks, calls, layout, forms_in(graph))


def _by_node(prepared: Prepared, value: Callable[[str], Any]) -> dict[str, tuple[int, Any]]:
    """Node name -> (the call computing it, ``value`` of that call's task key)."""
    out: dict[str, tuple[int, Any]] = {}
    for i, call in enumerate(prepared.calls):
        v = value(prepared.tasks[call.task].key)
        for n in call.group.nodes:
            out[n.name] = (i, v)
    return out


def _node_costs(prepared: Prepared, target: Target,
                db: TuningDatabase | None) -> dict[str, tuple[int, float]]:
    """Node name -> (the call computing it, that kernel's best recorded time; inf without a record)."""
    def best(key: str) -> float:
        rec = db.best(key, target.key) if db is not None else None
        return rec.mean_s if rec else math.inf

    return _by_node(prepared, best)


def _calls_of(by_node: Mapping[str, tuple[int, Any]], names: Sequence[str]) -> dict[int, Any]:
    """The distinct calls computing ``names`` (a form's kernels may fuse: its input transform into
    its product), call -> its value in ``by_node``; a name no call computes is left out."""
    return {by_node[n][0]: by_node[n][1] for n in names if n in by_node}


def node_forms(prepared: Sequence[Prepared]) -> tuple[dict[str, list[list[str]]], list[str]]:
    """How the preparations of one model (one layout: the direct one and copies in forms) compute
    it: each node that has a form -> its ways, each the task keys of the kernels computing it
    (direct: one; a form: its transforms and product); and the task keys of every other kernel
    call, which every way shares (from the direct preparation)."""
    direct = next(p for p in prepared if not p.forms)
    copies = [p for p in prepared if p.forms]

    direct_keys = _by_node(direct, str)
    ways: dict[str, list[list[str]]] = {}
    for p in copies:
        keys = _by_node(p, str)
        for node, form in p.forms.items():
            kernels = list(_calls_of(keys, [node + s for s in FORMS[form].suffixes]).values())
            ways.setdefault(node, [[direct_keys[node][1]]]).append(kernels)
    shared = [direct.tasks[call.task].key for call in direct.calls
              if not any(n.name in ways for n in call.group.nodes)]
    return ways, shared


def choose_forms(
    model: Any,
    target: Target,
    db: TuningDatabase | None,
    layout: str,
    forms: Sequence[str],
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Prepared:
    """The algorithm of each node that has forms as a tunable: of its direct kernel and each form
    in ``forms`` that fits it, the one whose kernels' best recorded times add up to the least
    (direct wherever the others lack records)."""
    in_place = target.backend.concat_in_place
    base, direct, every = prepare_forms(model, layout, forms, in_place, input_shapes)
    d_cost = _node_costs(direct, target, db)
    best: dict[str, tuple[float, str]] = {}
    for name, prepared in every.items():
        f_cost = _node_costs(prepared, target, db)
        for node in prepared.forms:
            calls = _calls_of(f_cost, [node + s for s in FORMS[name].suffixes])
            cost = sum(calls.values()) if calls else math.inf
            if cost < best.get(node, (d_cost.get(node, (0, math.inf))[1], ""))[0]:
                best[node] = (cost, name)
    if not best:
        return direct
    return _prepare_canonical(base, layout, {n: f for n, (_, f) in best.items()}, in_place)


def prepare_forms(
    model: Any,
    layout: str,
    forms: Sequence[str],
    in_place: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[Graph, Prepared, dict[str, Prepared]]:
    """The model prepared directly and in each form of ``forms`` that fits one of its nodes (form
    -> preparation; a form that fits none is left out), from one run of the passes before the
    forms; and that run's graph."""
    base = _canonical(model, layout, input_shapes)
    every = {name: _prepare_canonical(base, layout, name, in_place) for name in forms
             if any(get_form(name).eligible(base, n) for n in base.nodes)}
    return base, _prepare_canonical(base, layout, None, in_place), every


def estimated_latency(tasks: Sequence[Task], target: Target, db: TuningDatabase | None) -> float:
    """Sum of weight x best recorded latency over the tasks (inf if one has no record)."""
    if db is None:
        return math.inf
    total = 0.0
    for t in tasks:
        rec = db.best(t.key, target.key)
        if rec is None:
            return math.inf
        total += t.weight * rec.mean_s
    return total


def choose_layout(
    model: Any,
    target: Target,
    db: TuningDatabase | None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    forms: Sequence[str] = (),
) -> Prepared:
    """Layout as a tunable: the layout whose tasks are all tuned with the lowest estimated model
    latency (sum of weight x best latency); NHWC when neither is fully tuned."""
    graph = load_model(model, input_shapes)
    options = [choose_forms(graph, target, db, lay, forms) for lay in ("NHWC", "NCHW")]
    costs = [estimated_latency(p.tasks, target, db) for p in options]
    return options[1] if costs[1] < costs[0] else options[0]


@dataclass
class KernelChoice:
    """The schedule one task compiles with."""

    task: Task
    steps: list[Step]
    config: dict | None
    tuned: bool
    best_s: float | None = None
    note: str = ""
    program: Program | CudaSource | None = field(default=None, repr=False)


def render(wl: Any, steps: Sequence[Step], target: Target) -> Program | CudaSource:
    """The target's program of one schedule (C for the CPU, CUDA kernels for a GPU)."""
    return target.backend.render(wl, steps, target)


_REPLAY_ERRORS = (ScheduleError, KeyError, TypeError, ValueError)  # a record today's code cannot replay


def _replay(task: Task, record: Any, target: Target) -> KernelChoice:
    """The task compiled with a record's steps; raises one of _REPLAY_ERRORS if they no longer apply.
    Steps recorded when graph operators named their axes by position are read in today's names."""
    try:
        steps = [step_from_dict(d) for d in record.steps]
        prog = render(task.workload, steps, target)
    except ScheduleError:
        steps = [step_from_dict(d) for d in positional_axes_renamed(task.workload, record.steps)]
        prog = render(task.workload, steps, target)
    return KernelChoice(task, steps, record.config, True, record.mean_s, program=prog)


_POSITIONAL_AXIS = re.compile(r"i(\d+)$")


def positional_axes_renamed(wl: Any, steps: Sequence[dict]) -> list[dict]:
    """Recorded steps with loops named after the positional axes graph operators once had (``i0``,
    ``i1``, ...: spatial dim d was ``i{d}``) renamed after the stage's axes today (a MatMul's
    ``z0.., i, j``); other names, and stages whose axes still have such names, are kept."""
    axes = {t.name: [a.name for a in t.axes] for t in wl.tensors if not t.is_placeholder}

    def stage_axes(stage: str) -> list[str] | None:  # a cache_write stage has its tensor's axes
        return axes.get(stage, axes.get(stage.removesuffix("_local")))

    def loop(stage: str, name: str) -> str:
        own = stage_axes(stage) or []
        parts = []
        for part in name.split("@"):
            root, dot, rest = part.partition(".")
            m = _POSITIONAL_AXIS.match(root)
            if m and root not in own and int(m[1]) < len(own):
                root = own[int(m[1])]
            parts.append(root + dot + rest)
        return "@".join(parts)

    out = []
    for d in steps:
        d = dict(d)
        at = d.get("target", d.get("stage")) if d.get("step") == "compute_at" else d.get("stage")
        for key in ("loop", "x", "y"):
            if isinstance(d.get(key), str) and at is not None:
                d[key] = loop(at, d[key])
        if isinstance(d.get("loops"), (list, tuple)) and at is not None:
            d["loops"] = [loop(at, x) for x in d["loops"]]
        out.append(d)
    return out


def runner_up_schedules(task: Task, target: Target, db: TuningDatabase, k: int) -> list[KernelChoice]:
    """The task's 2nd to ``k``-th fastest recorded schedules that still replay (for ``rerank``)."""
    out = []
    for record in db.top(task.workload.key, target.key, k)[1:]:
        try:
            out.append(_replay(task, record, target))
        except _REPLAY_ERRORS:
            continue
    return out


def choose_schedule(task: Task, target: Target, db: TuningDatabase | None) -> KernelChoice:
    """The best recorded schedule for the task, or the space's rule-based default (noted why)."""
    wl = task.workload
    record = db.best(wl.key, target.key) if db is not None else None
    note = "no tuning record"
    if record is not None:
        try:
            return _replay(task, record, target)
        except _REPLAY_ERRORS as err:
            note = f"tuned schedule failed to replay ({type(err).__name__})"
    space = make_space(wl, target)
    last: Exception | None = None
    for config in space.default_configs():  # the rules' configs, best first
        steps = space.steps(config)
        try:
            prog = render(wl, steps, target)
            return KernelChoice(task, steps, config, False, None, note, prog)
        except ScheduleError as err:
            last = err
    raise GraphError(f"{task.label}: no default schedule lowers ({last})")


@dataclass
class CompileSummary:
    """What the module was built from."""

    model: str
    layout: str
    tasks: int
    tuned_tasks: int
    fallback: list[str]
    calls: int
    tuned_calls: int
    arena_bytes: int
    naive_bytes: int
    estimated_s: float | None
    seconds: dict = field(default_factory=dict)
    reranked: list[str] = field(default_factory=list)  # tasks whose in-module timing picked a runner-up
    picked: list[str] = field(default_factory=list)  # tasks that took the runner-up stored for this module
    forms: dict[str, str] = field(default_factory=dict)  # node -> the form computing it (forms.py)

    def line(self) -> str:
        fb = f"; default schedule for: {', '.join(self.fallback)}" if self.fallback else ""
        wg = describe(self.forms)
        return (
            f"{self.model}: {self.tuned_calls}/{self.calls} fused subgraphs use tuned schedules "
            f"({self.tuned_tasks}/{self.tasks} distinct), {self.calls - self.tuned_calls} fell back{fb}; "
            f"arena {self.arena_bytes / 2**20:.2f} MiB vs {self.naive_bytes / 2**20:.2f} MiB unshared"
            + (f"; {len(self.reranked)} took a runner-up, faster in the module" if self.reranked else "")
            + (f"; {len(self.picked)} took the runner-up stored as faster in this module" if self.picked
               else "")
            + (f"; {wg}" if wg else "")
        )

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "layout": self.layout,
            "tasks": self.tasks,
            "tuned_tasks": self.tuned_tasks,
            "tuned_subgraphs": self.tuned_calls,
            "fallback_subgraphs": self.calls - self.tuned_calls,
            "fallback": self.fallback,
            "peak_arena_bytes": self.arena_bytes,
            "naive_intermediate_bytes": self.naive_bytes,
            "estimated_s": self.estimated_s,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "reranked": self.reranked,
            "picked": self.picked,
            "forms": self.forms,
        }


class CompiledModule:
    """A compiled model: ``run(inputs) -> outputs`` on numpy arrays (not reentrant: one arena)."""

    def __init__(
        self,
        prepared: Prepared,
        plan: MemoryPlan,
        choices: list[KernelChoice],
        executable: Any,
        summary: CompileSummary,
        entry_c: str,
        entry_name: str = "",
    ) -> None:
        self.prepared = prepared
        self.graph = prepared.graph
        self.plan = plan
        self.choices = choices
        self.executable = executable
        self.summary = summary
        self.entry_source = entry_c  # the C entry point (CPU) or the host launch sequence (CUDA)
        self.entry_name = entry_name
        self._staging: dict[int, np.ndarray] = {}  # inputs converted to the graph's types, reused
        types = self.graph.types
        self._input_types = [(n, tuple(types[n].shape), np.dtype(numpy_dtype(types[n].dtype)))
                             for n in self.graph.inputs]
        # (shape, dtype, aligned): new outputs from SMALL_OUTPUT_BYTES on are 64-byte aligned
        self._output_types = [(tuple(t.shape), np.dtype(t.dtype),
                               math.prod(t.shape) * np.dtype(t.dtype).itemsize >= SMALL_OUTPUT_BYTES)
                              for t in (types[o] for o in self.graph.outputs)]

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)

    @property
    def lib_path(self) -> str:
        return self.executable.lib_path

    def random_inputs(self, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Random inputs of the model's types: float normal, indices within what they index (token
        ids below the vocabulary size), other integers 0 or 1 (masks), bools either way."""
        return random_inputs(self.graph, rng)

    def _inputs(self, inputs: Mapping[str, Any] | Sequence[Any] | None) -> list[np.ndarray]:
        """The arrays the entry point reads (``check_inputs``; random ones where none are given).
        Inputs (by name or in order) that are already C-contiguous arrays of the graph's types are
        taken on a short path: right after a model run the interpreter's own data is out of the
        caches, and every step costs (``bench/cpu_models/python_call``)."""
        kind = type(inputs)
        if kind in (dict, list, tuple) and len(inputs) == len(self._input_types):  # type: ignore[arg-type]
            arrays = []
            for i, (name, shape, dtype) in enumerate(self._input_types):
                a = inputs.get(name) if kind is dict else inputs[i]  # type: ignore[union-attr,index]
                if (type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype
                        or not a.flags.c_contiguous):
                    break
                arrays.append(a)
            else:
                return arrays
        return check_inputs(self.graph, inputs if inputs is not None else self.random_inputs(), self._staging)

    def _outputs(self) -> list[np.ndarray]:
        """New output arrays: 64-byte aligned from ``SMALL_OUTPUT_BYTES`` on; a smaller one as numpy
        allocates it (the kernels store unaligned vectors; aligning it took 45 µs a call, cold)."""
        return [aligned_empty(shape, dtype) if big else np.empty(shape, dtype)
                for shape, dtype, big in self._output_types]

    def run(
        self, inputs: Mapping[str, Any] | Sequence[Any], outputs: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Outputs (graph order) for inputs given by name or in ``input_names`` order; with
        ``outputs`` (C-contiguous arrays of the output types, e.g. views of a caller's tensors) the
        results are written there and those arrays are returned. A 16-bit float model's 16-bit outputs
        come back in their type (computed in float32; written into ``outputs`` as float32)."""
        arrays = self._inputs(inputs)
        if outputs is not None:
            outs = list(outputs)
            check_outputs(self.graph, outs)
            self.run_into(arrays, outs)
            return outs
        outs = self._outputs()
        self.run_into(arrays, outs)
        return as_declared(self.graph, outs) if self.graph.declared_outputs else outs

    def run_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """The model on arrays the caller has checked (C-contiguous, of the graph's input and output
        types, in graph order): inputs read and outputs written where they lie, nothing copied or
        allocated (``run`` checks; a framework boundary calls this per call)."""
        self.executable.run(inputs, outputs)
        if self.plan.output_copies:
            self._copy_outputs(inputs, outputs)

    def _copy_outputs(self, arrays: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        from .memory import root_of

        for j, value in self.plan.output_copies:
            r = root_of(self.graph, value)
            s = self.plan.storage.get(r)
            if r in self.graph.consts:
                src = self.graph.consts[r]
            elif s is not None and s.kind == "input":
                src = arrays[s.index]
            elif s is not None and s.kind == "output":
                src = outputs[s.index]
            else:
                raise GraphError(f"output {value!r} has no readable storage")
            outputs[j][...] = np.reshape(src, outputs[j].shape)

    def time(
        self,
        inputs: Mapping[str, Any] | Sequence[Any] | None = None,
        repeat: int = 5,
        min_repeat_ms: float = 200.0,
    ) -> list[float]:
        """Seconds per model run, one value per repeat, timed around the entry point (in C on the
        CPU; CUDA-graph replays between CUDA events on a GPU)."""
        arrays = self._inputs(inputs)
        return self.executable.time(arrays, self._outputs(), repeat, min_repeat_ms)

    def profile(
        self, inputs: Mapping[str, Any] | Sequence[Any] | None = None, repeat: int = 20
    ) -> list[dict]:
        """Per kernel call, in order: the median seconds it took inside whole model runs (each call
        timed where it runs, so its inputs and weights are as warm as in a real run), and the
        tuning measurement of its task (``tuned_s``; None for a default schedule). CPU only."""
        if not hasattr(self.executable, "profile"):
            raise GraphError(f"a per-kernel profile is not available for {type(self.executable).__name__}")
        arrays = self._inputs(inputs)
        calls = self.prepared.calls
        seconds = self.executable.profile(arrays, self._outputs(), repeat, len(calls))
        med = np.median(seconds, axis=0)
        rows = []
        for i, call in enumerate(calls):
            c = self.choices[call.task]
            rows.append({"call": i, "task": call.task, "label": c.task.label, "seconds": float(med[i]),
                         "tuned_s": c.best_s if c.tuned else None})
        return rows

    def __repr__(self) -> str:
        return f"CompiledModule({self.summary.line()})"


def with_prepacked_weights(
    graph: Graph, calls: Sequence[KernelCall], programs: Sequence[Any]
) -> tuple[Graph, list[KernelCall]]:
    """The graph and calls with every weight that a kernel reads pre-tiled (``autotune.prepack``)
    replaced, for that call, by a constant holding the tiled copy; the copy is made here, once.
    ``programs`` are the tasks' programs, indexed like ``Task`` numbers."""
    consts, types = dict(graph.consts), dict(graph.types)
    out: list[KernelCall] = []
    for call in calls:
        layouts = getattr(programs[call.task], "prepack", ())
        if not layouts:
            out.append(call)
            continue
        args = list(call.args)
        for i, spec in layouts:
            v = args[i]
            if v not in graph.consts:
                raise GraphError(f"{v!r} is read pre-tiled but is not a constant of the model")
            name = f"{v}@tiles" + "x".join(str(t) for t in spec.tile) + "p" + "".join(map(str, spec.perm))
            if name not in consts:
                consts[name] = prepack_array(np.asarray(graph.consts[v]), spec)
                types[name] = TensorType(tuple(consts[name].shape), str(consts[name].dtype))
            args[i] = name
        out.append(dataclasses.replace(call, args=args))
    if all(a is b for a, b in zip(out, calls)):
        return graph, list(calls)
    return dataclasses.replace(graph, consts=consts, types=types), out


def compile_model(
    model: Any,
    target: Target | None = None,
    db: TuningDatabase | None = None,
    *,
    layout: str = "NHWC",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    workers: int | None = None,
    cache_dir: str | None = None,
    verbose: bool = True,
    rerank: int = 1,
    winograd: int | Sequence[int] | None = None,
    strassen: int | None = None,
) -> CompiledModule:
    """Compile a model with the best schedules in ``db`` (default schedules where it has none).

    ``model``: ONNX path / bytes / ModelProto, a zoo spec (``"zoo:bert_layer"``), a Graph (as
    imported) or a Prepared (passes already run);
    ``layout``: NHWC, NCHW or auto (the one with the lower estimated latency from ``db``).
    ``cache_dir``: where built objects and libraries are kept (default ~/.cache/autotune/modules).
    ``rerank`` k > 1 (CPU): each task takes the fastest of its k best records timed inside the
    module rather than its best isolated one (``rerank.rerank_in_module``; a few seconds per variant);
    1: each task takes the pick that tuning stored for this module in ``db`` where it still holds
    (``rerank.apply_picks``), else its best record.
    ``winograd``: tile sizes m (2, 4): each 3x3 convolution of stride 1 or 2 computed directly or as
    F(m x m, 3 x 3), whichever ``db`` records as fastest (``choose_forms``; tune with the
    same sizes); None: the target kind's default (``winograd.DEFAULT_SIZES``), 0 or (): direct.
    ``strassen``: each large product by a constant matrix computed directly or by up to this many
    levels of Strassen's algorithm (0 / False: direct; 1 / True: one level; 2: one or two),
    whichever ``db`` records as fastest; None: the target kind's default
    (``strassen.DEFAULT_LEVELS``).
    With ``verbose`` the summary line goes to stderr."""
    t0 = time.perf_counter()
    target = target or cpu_target()
    forms = default_forms(target.kind, winograd, strassen)
    if layout not in LAYOUTS:
        raise GraphError(f"unknown layout {layout!r}; valid: {', '.join(LAYOUTS)}")
    if isinstance(model, Prepared):
        prepared = model
    elif layout == "auto":
        prepared = choose_layout(model, target, db, input_shapes, forms)
    else:
        prepared = choose_forms(model, target, db, layout, forms, input_shapes)
    t1 = time.perf_counter()
    by_key: dict[str, KernelChoice] = {}
    choices: list[KernelChoice] = []
    for task in prepared.tasks:
        if task.key not in by_key:
            by_key[task.key] = choose_schedule(task, target, db)
        choices.append(dataclasses.replace(by_key[task.key], task=task))
    backend = make_backend(target, workers=workers, cache_dir=cache_dir)
    reranked: list[str] = []
    picked: list[str] = []
    if db is not None and target.backend.profiles_modules:
        from .rerank import apply_picks, rerank_in_module

        if rerank > 1:
            done = rerank_in_module(prepared, choices, target, db, backend, rerank)
            choices, reranked = done.choices, done.changed
        else:
            choices, picked = apply_picks(prepared, choices, target, db)
    t2 = time.perf_counter()
    built = _build(prepared, choices, backend)
    t3 = time.perf_counter()
    tuned_calls = sum(choices[c.task].tuned for c in prepared.calls)
    est = (
        sum(c.task.weight * c.best_s for c in choices if c.best_s) if all(c.tuned for c in choices) else None
    )
    summary = CompileSummary(
        model=prepared.graph.name,
        layout=prepared.layout,
        tasks=len(choices),
        tuned_tasks=sum(c.tuned for c in choices),
        fallback=[c.task.label for c in choices if not c.tuned],
        calls=len(prepared.calls),
        tuned_calls=tuned_calls,
        arena_bytes=built.plan.arena_bytes,
        naive_bytes=built.plan.naive_bytes,
        estimated_s=est,
        seconds={"passes": t1 - t0, "schedules": t2 - t1, "build": t3 - t2},
        reranked=reranked,
        picked=picked,
        forms=dict(prepared.forms),
    )
    if verbose:
        print(summary.line(), file=sys.stderr, flush=True)
    b = built
    entry_c = backend.entry_text(b.entry, b.kernels, b.calls, b.call_kernels, b.graph, b.plan)
    return CompiledModule(prepared, b.plan, choices, b.executable, summary, entry_c, b.entry)


@dataclass
class _Built:
    entry: str
    kernels: list[KernelSource]
    calls: list[KernelCall]
    call_kernels: list[str]
    graph: Graph
    plan: MemoryPlan
    executable: Any


def _build(prepared: Prepared, choices: Sequence[KernelChoice], backend: Any) -> _Built:
    """Kernels of the choices, pre-tiled weights, memory plan, one library, loaded."""
    kernels: dict[str, KernelSource] = {}
    names: list[str] = []

    def add(prog: Any, c: KernelChoice) -> str:
        name = prog.kernel_name if isinstance(prog, Program) else kernel_name(c.task.workload)
        kernels.setdefault(name, KernelSource(name, prog.source, prog))
        return name

    for c in choices:
        assert c.program is not None
        names.append(add(c.program, c))
    graph, calls = with_prepacked_weights(prepared.graph, prepared.calls, [kernels[n].program for n in names])
    plan = plan_memory(graph, calls)
    call_kernels = []
    for call in calls:  # a call writing into a concatenation runs its task's schedule through the view
        c = choices[call.task]
        call_kernels.append(names[call.task] if call.view is None else
                            add(backend.target.backend.render_into(c.task.workload, c.steps, backend.target,
                                                                   call.view), c))
    kernels = {n: kernels[n] for n in dict.fromkeys(call_kernels)}  # those some call runs
    entry = "model_" + c_name(graph.name)[:40]
    lib = backend.build(entry, list(kernels.values()), calls, call_kernels, graph, plan)
    return _Built(entry, list(kernels.values()), calls, call_kernels, graph, plan,
                  backend.load(lib, entry, graph, plan))
