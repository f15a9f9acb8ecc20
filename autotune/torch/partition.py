"""Compile an ATen FX graph region by region: the nodes the compiler supports are grouped into
regions (torch's ``CapabilityBasedPartitioner``), each region becomes one compiled module, and the
rest of the graph runs in eager PyTorch around them. A node that converts but that an operator
definition refuses (an attribute value, an element type) is moved out and the graph partitioned
again, so a model never fails for an operator the compiler lacks: one log line names what ran eagerly.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.tools_common import legalize_graph
from torch.utils import _pytree as pytree

from autotune.graph.compiler import CompiledModule, compile_model, prepare
from autotune.graph.ir import GraphError
from autotune.graph.ops import FOLD_LIMIT_BYTES
from autotune.target import Target

from .aten import WIDENED, supported, tensor_vals
from .importer import Region, RegionError, attr_value, region_graph

log = logging.getLogger("autotune.torch")

# nodes that move no data and compute nothing: a region of these alone is left to PyTorch
_TRIVIAL = {"Reshape", "Identity", "Transpose", "Flatten", "Squeeze", "Unsqueeze"}


class _Support(OperatorSupportBase):
    def __init__(self, refused: dict[str, str]) -> None:
        self.refused = refused

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.refused:
            return False
        why = supported(node)
        if why is not None:
            self.refused[node.name] = why
        return why is None


class CompiledRegion(torch.nn.Module):
    """One compiled region called from PyTorch: input tensors are read where they lie (their data
    pointers; a non-contiguous one is made contiguous once), outputs are allocated by PyTorch and
    written in place. Inference only: the outputs carry no autograd history.

    ``in_dtypes``/``out_dtypes``: the tensors' torch types where they differ from the compiled
    module's, 16-bit floats that the module computes in float32: such inputs are widened on the way
    in and such outputs rounded to their type on the way out."""

    def __init__(self, module: CompiledModule, in_dtypes: Sequence[torch.dtype] | None = None,
                 out_dtypes: Sequence[torch.dtype] | None = None) -> None:
        super().__init__()
        self.module = module
        g = module.graph
        self._outs = [(g.types[o].shape, _TORCH[g.types[o].dtype]) for o in g.outputs]
        self._ins = [(torch.Size(g.types[i].shape), _TORCH[g.types[i].dtype]) for i in g.inputs]
        if in_dtypes is not None:
            self._ins = [(s, d) for (s, _), d in zip(self._ins, in_dtypes)]
        self._widen = [j for j, (_, d) in enumerate(self._ins) if d in WIDENED]
        self._narrow = [(j, d) for j, d in enumerate(out_dtypes or ()) if d in WIDENED]
        self._lock = threading.Lock()  # one arena per module: calls from several threads take turns
        self._exe = module.executable
        self._copies = bool(module.plan.output_copies) or not hasattr(self._exe, "run_pointers")

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.run(*inputs)

    def run(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if len(inputs) != len(self._ins) or any(
            t.shape != s or t.dtype != d for t, (s, d) in zip(inputs, self._ins)
        ):
            got = ", ".join(f"{t.dtype}{list(t.shape)}" for t in inputs)
            want = ", ".join(f"{d}{list(s)}" for s, d in self._ins)
            raise ValueError(f"compiled for inputs {want}, called with {got} (compile again for new shapes)")
        if self._widen:
            inputs = tuple(t.float() if j in self._widen else t for j, t in enumerate(inputs))
        outs = self._run_cuda(inputs) if inputs and inputs[0].is_cuda else self._run_cpu(inputs)
        if self._narrow:
            outs = list(outs)
            for j, d in self._narrow:
                outs[j] = outs[j].to(d)
            outs = tuple(outs)
        return outs

    def _run_cpu(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        outs = tuple(torch.empty(s, dtype=d) for s, d in self._outs)
        if self._copies:  # an output that is an input or a constant: copied by the numpy path
            with self._lock:
                self.module.run_into([_view(t) for t in inputs], [o.numpy() for o in outs])
            return outs
        # the tensors' own memory (a non-contiguous input made contiguous once, kept alive here)
        held = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        with self._lock:
            self._exe.run_pointers([t.data_ptr() for t in held] + [o.data_ptr() for o in outs])
        return outs

    def _run_cuda(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """CUDA tensors: device pointers in, outputs allocated by PyTorch on the same device, the
        module's CUDA graph queued on PyTorch's current stream (no host synchronization)."""
        if not hasattr(self._exe, "run_device"):
            raise ValueError("this region was compiled for the CPU but called with CUDA tensors "
                             "(compile with options={'target': 'cuda'})")
        dev = inputs[0].device
        held = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        outs = tuple(torch.empty(s, dtype=d, device=dev) for s, d in self._outs)
        with self._lock:
            self._exe.run_device([t.data_ptr() for t in held] + [o.data_ptr() for o in outs],
                                 torch.cuda.current_stream(dev).cuda_stream)
        return outs


_TORCH = {"float32": torch.float32, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def _view(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a numpy array (a copy only when it is not contiguous)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


@dataclass
class PartitionReport:
    """What was compiled and what runs in eager PyTorch."""

    regions: list[CompiledModule] = field(default_factory=list)
    compiled_ops: int = 0
    fallback: dict[str, str] = field(default_factory=dict)  # FX node name -> why it runs eagerly
    fallback_ops: Counter = field(default_factory=Counter)  # ATen op -> nodes run eagerly

    def line(self, name: str) -> str:
        head = f"autotune.torch {name}: {self.compiled_ops} ops in {len(self.regions)} compiled region(s)"
        if not self.fallback_ops:
            return head + ", nothing runs eagerly"
        ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in self.fallback_ops.most_common())
        return head + f"; eager PyTorch for {sum(self.fallback_ops.values())} op(s): {ops}"


def fold_constants(gm: torch.fx.GraphModule) -> int:
    """Compute, once and in PyTorch, every node that depends on constants (``get_attr``) alone (attention
    masks, relative-position tables, shape arithmetic): such a node becomes a constant, however the
    compiler would take its operator. Random and impure nodes and results over the folding limit stay.
    Returns the number of nodes folded."""
    values: dict[torch.fx.Node, Any] = {}
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            values[node] = attr_value(gm, str(node.target))
            continue
        if node.op != "call_function" or node.is_impure():
            continue
        if any(a not in values for a in node.all_input_nodes):
            continue
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
        value = node.target(*args, **kwargs)
        values[node] = value
        if not isinstance(value, torch.Tensor):
            continue
        if value.numel() * value.element_size() > FOLD_LIMIT_BYTES or not any(
            u.op != "call_function" or u not in values for u in node.users
        ):
            continue
        attr = f"_autotune_folded_{folded}"
        gm.register_buffer(attr, value.detach().contiguous(), persistent=False)
        with gm.graph.inserting_before(node):
            const = gm.graph.get_attr(attr)
        const.meta = dict(node.meta)
        node.replace_all_uses_with(const)
        values[const] = value
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def find_regions(gm: torch.fx.GraphModule, name: str, max_rounds: int = 50) -> tuple[list[Region], dict]:
    """The compilable regions of ``gm`` (constant subgraphs folded first) and, by FX node name, why
    each other node is left out."""
    fold_constants(gm)
    refused: dict[str, str] = {}
    for _ in range(max_rounds):
        parts = CapabilityBasedPartitioner(gm, _Support(refused), allows_single_node_partition=True)
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        regions: list[Region] = []
        again = False
        for k, p in enumerate(parts.propose_partitions()):
            nodes = sorted(p.nodes, key=order.__getitem__)
            try:
                region = region_graph(gm, nodes, f"{name}_r{k}")
            except RegionError as err:
                refused.update(err.problems)
                again = True
                continue
            if all(n.op in _TRIVIAL for n in region.graph.nodes):
                refused.update({n.name: "moves no data (left to PyTorch)" for n in nodes})
                continue
            regions.append(region)
        if not again:
            return regions, refused
    raise GraphError(f"{name}: partitioning did not settle after {max_rounds} rounds")


def _drop_guards(gm: torch.fx.GraphModule) -> None:
    """``ExportedProgram.module()`` checks its inputs in a ``_guards_fn`` call and dtypes in asserts:
    a compiled region is specialized to its inputs' shapes and types and checks them itself."""
    for n in list(gm.graph.nodes):
        guard = n.op == "call_module" and str(n.target).startswith("_guards")
        if (guard or n.target is torch.ops.aten._assert_tensor_metadata.default) and not n.users:
            gm.graph.erase_node(n)


def compile_graph_module(
    gm: torch.fx.GraphModule,
    target: Target,
    db: Any,
    name: str = "torch",
    tune_trials: int = 0,
    **compile_kwargs: Any,
) -> tuple[Callable[..., Any], PartitionReport]:
    """``gm`` (core ATen, weights as ``get_attr``) with its supported regions compiled: a callable
    taking ``gm``'s inputs, and the report (also logged, one line)."""
    _drop_guards(gm)
    regions, refused = find_regions(gm, name)
    if tune_trials:
        tune_regions(regions, target, db, tune_trials)
    report = PartitionReport()
    compiled: list[tuple[Region, CompiledModule]] = []
    for region in regions:
        try:
            module = compile_model(region.graph, target, db, verbose=False, **compile_kwargs)
        except Exception as err:  # noqa: BLE001 - a region that does not compile runs eagerly instead
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            for n in region.graph.nodes:
                refused.setdefault(n.name.split(":")[0], f"region failed to compile: {first}")
            log.warning(
                "autotune.torch %s: a region of %d nodes runs eagerly (%s)",
                name,
                len(region.graph.nodes),
                first,
            )
            continue
        compiled.append((region, module))
        report.regions.append(module)
    inside = {n for region, _ in compiled for n in _region_nodes(region)}
    for n in gm.graph.nodes:
        if n.op == "call_function" and n not in inside and n.target is not operator.getitem:
            report.fallback[n.name] = refused.get(n.name, "not supported")
            report.fallback_ops[_op_name(n)] += 1
    report.compiled_ops = sum(1 for n in inside if n.target is not operator.getitem)
    (log.warning if report.fallback_ops else log.info)("%s", report.line(name))
    for k, (region, module) in enumerate(compiled):
        ins, outs = ([tensor_vals(n)[0].dtype for n in nodes] for nodes in (region.inputs, region.outputs))
        _replace(gm, region, CompiledRegion(module, ins, outs), f"autotune_region_{k}")
    for n in gm.graph.nodes:  # eager views may now see tensors laid out as the regions write them
        if n.target in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
            n.target = torch.ops.aten.reshape.default
    legalize_graph(gm)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return _fast_path(gm) or gm, report


def _op_name(n: torch.fx.Node) -> str:
    t = n.target
    return str(getattr(t, "__name__", t)) if not isinstance(t, torch._ops.OpOverload) else str(t)


def _region_nodes(region: Region) -> set[torch.fx.Node]:
    """The FX nodes of a region (its outputs and everything between its inputs and them)."""
    seen: set[torch.fx.Node] = set()
    stop = set(region.inputs)
    todo = list(region.outputs)
    while todo:
        n = todo.pop()
        if n in seen or n in stop or n.op != "call_function":
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    return seen


def _replace(gm: torch.fx.GraphModule, region: Region, module: CompiledRegion, attr: str) -> None:
    """Put one call of ``module`` in the place of the region's nodes."""
    gm.add_submodule(attr, module)
    nodes = _region_nodes(region)
    last = max(nodes, key=list(gm.graph.nodes).index)
    with gm.graph.inserting_after(last):
        call = gm.graph.call_module(attr, tuple(region.inputs))
    outs = []
    with gm.graph.inserting_after(call):
        for j, _ in enumerate(region.outputs):
            outs.append(gm.graph.call_function(operator.getitem, (call, j)))
    for old, new in zip(region.outputs, outs):
        new.meta = dict(old.meta)
        old.replace_all_uses_with(new, delete_user_cb=lambda user: user not in nodes)


def _fast_path(gm: torch.fx.GraphModule) -> Callable[..., Any] | None:
    """For a graph that is one compiled region and nothing else: a direct call of the region (no
    FX interpretation per call), or None."""
    nodes = list(gm.graph.nodes)
    places = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op == "call_module"]
    rest = [n for n in nodes if n.op not in ("placeholder", "output") and n not in calls]
    if len(calls) != 1 or any(n.target is not operator.getitem or n.args[0] is not calls[0] for n in rest):
        return None
    region: CompiledRegion = gm.get_submodule(str(calls[0].target))
    out = nodes[-1].args[0]
    flat, out_spec = pytree.tree_flatten(out)
    if not all(isinstance(v, torch.fx.Node) and v in rest for v in flat):
        return None
    in_idx = [places.index(a) if a in places else -1 for a in calls[0].args]
    out_idx = [int(v.args[1]) for v in flat]
    if -1 in in_idx:
        return None
    info = getattr(gm.graph._codegen, "pytree_info", None)
    if info is not None:
        positional = pytree.tree_structure((tuple(range(len(places))), {}))
        if info.in_spec is not None and info.in_spec != positional:
            return None
        out_spec = info.out_spec if info.out_spec is not None else out_spec
    run = region.run
    same_in = in_idx == list(range(len(places)))
    if out_spec == pytree.tree_structure(tuple(out_idx)) and out_idx == list(range(len(out_idx))):
        return run if same_in else lambda *args: run(*[args[i] for i in in_idx])  # a tuple, as returned
    if out_spec == pytree.tree_structure(0) and same_in:
        (j,) = out_idx
        return lambda *args: run(*args)[j]

    def call(*args: torch.Tensor) -> Any:
        res = run(*args) if same_in else run(*[args[i] for i in in_idx])
        return pytree.tree_unflatten([res[j] for j in out_idx], out_spec)

    return call


def tune_regions(
    regions: Sequence[Region],
    target: Target,
    db: Any,
    trials: int,
    layout: str = "NHWC",
    strategy: str = "xgb",
) -> Any:
    """Tune every task of the regions under one budget of ``trials`` measurements (the model
    tuner's gradient task scheduler); records go to ``db`` as from ``tune.py --model``."""
    from autotune.graph.tuning import tune_model
    from autotune.search import TuneOptions

    if db is None:
        raise GraphError("tuning needs a database (db=...)")
    prepared = [prepare(r.graph, layout, in_place=target.backend.concat_in_place) for r in regions]
    if not prepared:
        return None
    builder, runner = target.backend.make_builder(target), target.backend.make_runner(target)
    options = TuneOptions(trials=trials, strategy=strategy, progress=False)
    with builder, runner:
        return tune_model(prepared, target, db, trials, options, builder, runner, log=log.info)
