"""Named workloads: build a :class:`Workload` from an op name and a list of integers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from .workload import Workload


class WorkloadError(ValueError):
    """An unknown op or a shape that does not fit it."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    params: tuple[str, ...]  # names of the integers of --shape, in order
    build: Callable[..., Workload]
    doc: str
    optional: dict | None = None  # trailing params with defaults

    def usage(self) -> str:
        opt = "".join(f"[,{p}={v}]" for p, v in (self.optional or {}).items())
        return f"{self.name} ({','.join(self.params)}{opt})"


_OPS: dict[str, OpSpec] = {}


def register(name: str, params: Sequence[str], doc: str, optional: dict | None = None):
    """Decorator adding a workload builder to the registry."""

    def wrap(fn: Callable[..., Workload]) -> Callable[..., Workload]:
        _OPS[name] = OpSpec(name, tuple(params), fn, doc, optional)
        return fn

    return wrap


def op_names() -> list[str]:
    _load_builtin()
    return sorted(_OPS)


def op_spec(name: str) -> OpSpec:
    _load_builtin()
    if name not in _OPS:
        raise WorkloadError(f"unknown op {name!r}; valid ops: {', '.join(sorted(_OPS))}")
    return _OPS[name]


def parse_shape(text: str) -> list[int]:
    """``"1024,1024,512"`` (or ``"1024x1024x512"``) -> integers; anything else is malformed."""
    parts = [p.strip() for p in re.split(r"[,x]", text.strip())]
    if not parts or any(not re.fullmatch(r"[+-]?\d+", p) for p in parts):
        raise WorkloadError(f"malformed shape {text!r}: expected comma-separated integers")
    return [int(p) for p in parts]


def make_workload(name: str, shape: Sequence[int] | str) -> Workload:
    """Build a named workload, e.g. ``make_workload("matmul", [1024, 1024, 1024])``."""
    spec = op_spec(name)
    values = parse_shape(shape) if isinstance(shape, str) else [int(v) for v in shape]
    optional = spec.optional or {}
    if not len(spec.params) <= len(values) <= len(spec.params) + len(optional):
        raise WorkloadError(f"{name} takes --shape {spec.usage()[len(name) + 1 :]}, got {len(values)} values")
    kwargs = dict(zip(list(spec.params) + list(optional), values))
    if any(v < 0 or (v == 0 and k != "pad") for k, v in kwargs.items()):
        raise WorkloadError(f"{name}: every dimension must be positive (pad non-negative), got {values}")
    for k, v in optional.items():
        kwargs.setdefault(k, v)
    try:
        wl = spec.build(**kwargs)
    except ValueError as err:
        raise WorkloadError(f"{name}: {err}") from None
    wl.params = kwargs
    return wl


# Workloads described by JSON rather than a list of integers (e.g. the fused subgraphs of a model,
# autotune.graph): op name -> builder, and where the builders of such ops live (imported on demand).
_DESCRIPTION_BUILDERS: dict[str, Callable[[dict], Workload]] = {}
_DESCRIPTION_MODULES = {"graph_subgraph": "autotune.graph.subgraph"}


def register_description(op: str, build: Callable[[dict], Workload]) -> None:
    """Let :func:`workload_from_description` rebuild workloads whose description has ``op``."""
    _DESCRIPTION_BUILDERS[op] = build


def workload_from_description(desc: dict) -> Workload:
    """Rebuild a workload from :meth:`Workload.description`."""
    op = desc.get("op")
    if op in _DESCRIPTION_MODULES and op not in _DESCRIPTION_BUILDERS:
        import importlib

        importlib.import_module(_DESCRIPTION_MODULES[op])
    if op in _DESCRIPTION_BUILDERS:
        try:
            return _DESCRIPTION_BUILDERS[op](desc)
        except (KeyError, TypeError, ValueError) as err:
            raise WorkloadError(f"{op}: cannot rebuild from its description: {err}") from None
    spec = op_spec(desc["op"])
    params = desc["params"]
    names = list(spec.params) + list(spec.optional or {})
    return make_workload(desc["op"], [params[n] for n in names if n in params])


_loaded = False


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from autotune.graph import named  # noqa: F401 - the graph operators' named workloads

        from . import library  # noqa: F401 - the dense family
