"""The ``torch.compile`` backend ``"autotune"`` and the export path of :mod:`autotune.torch`.

Dynamo hands the backend an FX graph of torch-level calls whose weights are graph inputs. The
backend exports that graph with ``torch.export`` (weights held as constants of a wrapping module, so
they become ``get_attr`` nodes and, in the compiler, constants that are folded and pre-tiled), runs
torch's core-ATen decompositions and compiles the supported regions (``partition``).

Shapes: each compiled module is specialized to the shapes it was compiled for. A new input shape
makes Dynamo's guards fail and Dynamo calls the backend again, which compiles for that shape (its
tasks get their own database keys). A graph that Dynamo made dynamic (after a second shape, or
``dynamic=True``) is specialized per seen shape: one compiled module per distinct input shape, kept in
a bounded LRU cache (``max_shapes``, default 8). Specializing is the compiler's model: every kernel
is tuned and generated for static extents, so a symbolic-shape kernel would be a different,
untuned program; the bound keeps a model called with many shapes from holding many modules.

Weights: Dynamo calls one graph for every module that runs the same code (with graph breaks inside a
layer, the graph of each piece serves all the layers, each with its own parameters). The weights are
constants of the compiled module, so the backend compiles once per set of weight tensors it is
called with (and again for weights changed in place).
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from autotune.target import Target, cpu_target
from records import TuningDatabase

from .aten import PRESERVED
from .partition import PartitionReport, compile_graph_module, find_regions, tune_regions

log = logging.getLogger("autotune.torch")
_names = itertools.count()


@dataclass
class Options:
    """The backend's ``options`` (``torch.compile(..., backend="autotune", options={...})``)."""

    db: Any = None  # a TuningDatabase or the path of one; None: default schedules only
    target: Any = None  # a Target or "cpu" (the default)
    tune_trials: int = 0  # > 0: tune each new graph's tasks up to this many measurements first
    max_shapes: int = 8  # dynamic graphs: compiled shapes kept (least recently used dropped)

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> Options:
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"unknown autotune backend option {unknown[0]!r}; valid: "
                f"{', '.join(cls.__dataclass_fields__)}"
            )
        out = cls(**opts)
        if not isinstance(out.tune_trials, int) or out.tune_trials < 0:
            raise ValueError(f"tune_trials must be a whole number >= 0, not {out.tune_trials!r}")
        if not isinstance(out.max_shapes, int) or out.max_shapes < 1:
            raise ValueError(f"max_shapes must be a whole number >= 1, not {out.max_shapes!r}")
        return out

    def resolve_target(self, on_cuda: bool = False) -> Target:
        """The Target object, "cpu" or "cuda" (this machine's GPU); by default the device of the
        graph's example inputs."""
        kind = self.target if self.target is not None else ("cuda" if on_cuda else "cpu")
        if isinstance(kind, Target):
            return kind
        if kind == "cpu":
            return cpu_target()
        if kind == "cuda":
            from ..backends import backend_for

            return backend_for("cuda").resolve()
        raise ValueError(f"target must be 'cpu', 'cuda' or a Target, not {self.target!r}")


def _open_db(db: Any) -> tuple[Any, bool]:
    """(database, whether it was opened here and is to be closed)."""
    if db is None or isinstance(db, TuningDatabase):
        return db, False
    return TuningDatabase(db), True


def export_aten(module: torch.nn.Module, args: Sequence[Any]) -> torch.fx.GraphModule:
    """``module`` exported with ``torch.export`` and decomposed to core ATen; weights as ``get_attr``."""
    if getattr(module, "training", False):
        log.warning(
            "autotune.torch: %s is in training mode; compile it after .eval() (inference only)",
            type(module).__name__,
        )
    ep = torch.export.export(module, tuple(args), strict=False)
    return ep.run_decompositions(decompositions()).module()


def decompositions() -> Any:
    """torch's core-ATen decompositions less those of the operators that ONNX also names as one
    (``linear``, ``matmul``, the activations), so both frontends give the same subgraphs."""
    table = torch.export.default_decompositions()
    for op in PRESERVED:
        table.pop(op, None)
    return table


def _on_cuda(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph's inputs are CUDA tensors (then the default target is this machine's GPU)."""
    return any(isinstance(v, torch.Tensor) and v.is_cuda
               for n in gm.graph.nodes if n.op == "placeholder" for v in [n.meta.get("val")])


def compile_aten(gm: torch.fx.GraphModule, opts: Options, name: str) -> tuple[Callable, PartitionReport]:
    db, opened = _open_db(opts.db)
    try:
        return compile_graph_module(gm, opts.resolve_target(_on_cuda(gm)), db, name, opts.tune_trials)
    finally:
        if opened:
            db.close()


class _Frozen(torch.nn.Module):
    """A Dynamo graph with its weight inputs held as buffers: exported, they become constants."""

    def __init__(self, gm: torch.fx.GraphModule, weights: Mapping[int, torch.Tensor], n_args: int) -> None:
        super().__init__()
        self.gm = gm
        self.train(False)
        self.slots = [(i, f"w{i}") for i in range(n_args) if i in weights]
        for i, name in self.slots:
            self.register_buffer(name, weights[i].detach(), persistent=False)
        self.user = [i for i in range(n_args) if i not in weights]

    def forward(self, *user: Any) -> Any:
        args: list[Any] = [None] * (len(self.slots) + len(self.user))
        for i, name in self.slots:
            args[i] = getattr(self, name)
        for i, v in zip(self.user, user):
            args[i] = v
        return self.gm(*args)


def _is_weight(node: torch.fx.Node, value: Any) -> bool:
    """A Dynamo graph input that is a module's parameter or buffer (by Dynamo's source of it)."""
    if isinstance(value, torch.nn.Parameter):
        return True
    arg = node.meta.get("grapharg")
    source = getattr(getattr(arg, "source", None), "name", None)
    name = source() if callable(source) else source
    return isinstance(name, str) and ("._buffers[" in name or "._parameters[" in name)


def _is_dynamic(node: torch.fx.Node) -> bool:
    v = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(v, torch.SymInt):
        return True
    return isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape)


_VERSION = operator.attrgetter("_version")


def _weights_key(weights: Sequence[torch.Tensor]) -> tuple:
    """Which weight tensors these are and whether they changed since: their memory (a new tensor, or
    ``.data`` replaced) and version (changed in place); their shapes are Dynamo's guards. Taken on
    every call: ~25 us for 200 weights, where the tuple of each one's memory, shape, strides and
    version took 140."""
    return tuple(map(torch.Tensor.data_ptr, weights)), tuple(map(_VERSION, weights))


def _is_scalar(node: torch.fx.Node, value: Any) -> bool:
    """A Python number of the module that Dynamo passes as a 0-d tensor (a dynamic graph's floats,
    such as a layer norm's ``eps``): a constant of the model, compiled in by value."""
    arg = node.meta.get("grapharg")
    return (isinstance(value, torch.Tensor) and value.dim() == 0 and not isinstance(value, torch.nn.Parameter)
            and bool(getattr(arg, "pass_arg_as_tensor", False)))


def _scalars_inlined(gm: torch.fx.GraphModule, values: Mapping[int, Any]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose ``.item()`` of the placeholders ``values`` names (by position) are
    those Python numbers (export cannot trace a tensor's value into a Python number)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    places = [env[n] for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in values.items():
        for item in [u for u in places[i].users if u.op == "call_method" and u.target == "item"]:
            number = value.item()

            def swap(a: Any, it: torch.fx.Node = item, v: Any = number) -> Any:
                return v if a is it else a

            for user in list(item.users):
                user.args = torch.fx.node.map_arg(user.args, swap)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, swap)
            graph.erase_node(item)
    return torch.fx.GraphModule(gm, graph)


class _Specialized:
    """A Dynamo graph compiled for the weights it is called with and, if Dynamo made it dynamic, per
    input shape. The weights (parameters and buffers, and the module's numbers Dynamo passes as 0-d
    tensors) are the compiled module's constants, but Dynamo calls one graph for every module that
    runs the same code: the part of a layer's forward between two graph breaks serves each of the
    model's layers, each with its own parameters. So a call with other weights (other tensors, or
    these changed in place) compiles for those, and each set of weights keeps the modules of its
    shapes (an LRU cache of ``max_shapes``). A graph that cannot be exported runs in eager PyTorch
    (one warning), so a model never fails for being compiled."""

    def __init__(self, gm: torch.fx.GraphModule, weight_idx: Sequence[int], scalar_idx: Sequence[int],
                 n: int, dynamic: bool, opts: Options, name: str) -> None:
        self.gm, self.n, self.dynamic = gm, n, dynamic
        self.weight_idx, self.scalar_idx = list(weight_idx), list(scalar_idx)
        self.user = [i for i in range(n) if i not in set(weight_idx) | set(scalar_idx)]
        self.opts, self.name = opts, name
        self.cache: dict[tuple, collections.OrderedDict[tuple, Callable]] = {}

    def compile(self, args: Sequence[Any]) -> Callable:
        """The callable (of all the graph's arguments) for these arguments' weights and shapes,
        compiled now if new."""
        user = [args[i] for i in self.user]
        shapes = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                       for a in user) if self.dynamic else ()
        scalars = tuple(args[i].item() for i in self.scalar_idx)
        key = (_weights_key([args[i] for i in self.weight_idx]), scalars)
        per_shape = self.cache.setdefault(key, collections.OrderedDict())
        fn = per_shape.get(shapes)
        if fn is not None:
            per_shape.move_to_end(shapes)
            return fn
        constant = self.weight_idx + self.scalar_idx
        label = f"{self.name}_w{len(self.cache) - 1}" if len(self.cache) > 1 else self.name
        if len(self.cache) > 1 and not per_shape:
            log.info("autotune.torch %s: compiling for another module's weights (set %d)", self.name,
                     len(self.cache))
        if self.dynamic:
            log.info("autotune.torch %s: compiling for shapes %s", self.name, shapes)
            label = f"{label}_s{len(per_shape)}"
        gm = _scalars_inlined(self.gm, {i: args[i] for i in self.scalar_idx}) if self.scalar_idx else self.gm
        frozen = _Frozen(gm, {i: args[i] for i in constant}, self.n)
        try:
            compiled, _ = compile_aten(export_aten(frozen, user), self.opts, label)
        except Exception as err:  # noqa: BLE001 - what cannot be exported runs as it is
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            log.warning("autotune.torch %s: not exported, runs in eager PyTorch (%s: %s)", label,
                        type(err).__name__, first)
            fn = self.gm
        else:
            idx = self.user

            def fn(*a: Any) -> Any:
                return compiled(*[a[i] for i in idx])

        per_shape[shapes] = fn
        if len(per_shape) > self.opts.max_shapes:
            per_shape.popitem(last=False)
        return fn

    def __call__(self, *args: Any) -> Any:
        return self.compile(args)(*args)


def autotune_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: Mapping[str, Any] | None = None,
    **_: Any,
) -> Callable:
    """The ``torch.compile`` backend: Dynamo's graph with its supported regions compiled (for each set
    of weights it is called with, see ``_Specialized``)."""
    opts = Options.parse(options)
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weight_idx = [i for i, (n, v) in enumerate(zip(places, example_inputs)) if _is_weight(n, v)]
    scalar_idx = [i for i, (n, v) in enumerate(zip(places, example_inputs))
                  if i not in weight_idx and _is_scalar(n, v)]
    dynamic = any(_is_dynamic(n) for n in places)
    graph = _Specialized(gm, weight_idx, scalar_idx, len(places), dynamic, opts, f"dynamo_{next(_names)}")
    if not dynamic:
        graph.compile(example_inputs)  # now, so a model's problems show at its first call
    # run with Dynamo's frame hook off: otherwise every Python frame of the call is offered to it
    return torch._dynamo.disable(graph)


def register() -> None:
    """Register ``"autotune"`` with Dynamo (the package's entry point does this when it is installed)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # an installed entry point that Dynamo has found registers the backend itself when it loads it
    if "autotune" not in _COMPILER_FNS and _BACKENDS.get("autotune") is None:
        register_backend(autotune_backend, name="autotune")


class CompiledTorchModule:
    """``autotune.torch.compile``'s result: call it like the module (same positional inputs)."""

    def __init__(self, fn: Callable, report: PartitionReport) -> None:
        self.fn, self.report = fn, report

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    @property
    def regions(self) -> list:
        return self.report.regions


def compile(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    *,
    db: Any = None,
    target: Any = None,
    tune_trials: int = 0,
) -> CompiledTorchModule:
    """``module`` exported with ``torch.export`` for the shapes of ``example_inputs`` and compiled with
    the best schedules in ``db`` (tuning first with ``tune_trials``); unsupported operators run eagerly."""
    opts = Options.parse({"db": db, "target": target, "tune_trials": tune_trials})
    gm = export_aten(module, example_inputs)
    fn, report = compile_aten(gm, opts, type(module).__name__)
    return CompiledTorchModule(fn, report)


def tune(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    trials: int,
    db: Any,
    *,
    target: Any = None,
    layout: str = "NHWC",
    strategy: str = "xgb",
) -> Any:
    """Tune the tasks of ``module``'s compilable regions (exported for ``example_inputs``' shapes) until
    ``db`` holds ``trials`` measurements for them; returns the model tuner's summary."""
    opts = Options.parse({"db": db, "target": target})
    gm = export_aten(module, example_inputs)
    regions, _ = find_regions(gm, type(module).__name__)
    database, opened = _open_db(db)
    try:
        return tune_regions(regions, opts.resolve_target(_on_cuda(gm)), database, trials, layout, strategy)
    finally:
        if opened:
            database.close()
