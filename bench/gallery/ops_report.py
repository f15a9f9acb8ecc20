"""What the gallery's exports are made of: per model and exporter, the ONNX operator types (with
counts), those the frontend rejects, the dtypes other than float32, and the attributes that matter
for support (pooling ceil_mode/pads, Conv groups/dilations/auto_pad, Resize modes, Einsum equations,
Gather on weights vs activations, ...). Markdown on stdout or ``--out``; needs only onnx.

    python -m bench.gallery.ops_report [--cache DIR] [--out FILE] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .export import DEFAULT_CACHE, EXPORTERS, one_line, paths
from .models import MODELS

# attributes shown per op type (others are left out: shapes, constant values)
NOTABLE = {
    "Conv": ("group", "dilations", "auto_pad", "pads", "strides", "kernel_shape"),
    "ConvTranspose": ("group", "dilations", "auto_pad", "pads", "strides", "output_padding"),
    "MaxPool": ("ceil_mode", "auto_pad", "pads", "strides", "kernel_shape", "dilations"),
    "AveragePool": ("ceil_mode", "auto_pad", "pads", "strides", "kernel_shape", "count_include_pad"),
    "Resize": ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a"),
    "Einsum": ("equation",),
    "Cast": ("to",),
    "Softmax": ("axis",),
    "LogSoftmax": ("axis",),
    "LayerNormalization": ("axis", "epsilon", "stash_type"),
    "Split": ("axis", "num_outputs"),
    "Concat": ("axis",),
    "Gather": ("axis",),
    "GatherElements": ("axis",),
    "GatherND": ("batch_dims",),
    "Flatten": ("axis",),
    "Gemm": ("transA", "transB", "alpha", "beta"),
    "Transpose": ("perm",),
    "Trilu": ("upper",),
    "CumSum": ("exclusive", "reverse"),
    "Gelu": ("approximate",),
    "Squeeze": (),
    "Unsqueeze": (),
    "ReduceMean": ("keepdims", "axes", "noop_with_empty_axes"),
    "ReduceSum": ("keepdims", "noop_with_empty_axes"),
    "ReduceMax": ("keepdims", "axes"),
    "Pad": ("mode",),
    "HardSigmoid": ("alpha", "beta"),
    "LeakyRelu": ("alpha",),
    "Dropout": ("seed",),
}
# ops whose inputs are classified as weight / foldable / activation
INPUT_KINDS = {"Gather", "GatherElements", "GatherND", "Slice", "Expand", "Where", "Reshape", "Split",
               "Pad", "Resize", "Tile", "Range", "Mul", "Add", "Equal", "Cast", "ReduceMean", "ReduceSum",
               "Squeeze", "Unsqueeze", "MatMul", "Einsum", "ConstantOfShape", "Mod", "Pow", "Clip"}
_SHAPE_ONLY = {"Shape", "Size"}  # outputs known at import (static shapes)


@dataclass
class OpsSummary:
    """One export's operator facts."""

    model: str
    exporter: str
    opset: int | None
    ops: Counter = field(default_factory=Counter)
    rejected: list[str] = field(default_factory=list)  # the frontend's unsupported() lines
    import_error: str | None = None
    dtypes: dict[str, Counter] = field(default_factory=dict)  # non-float32 dtype -> producing ops
    input_dtypes: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Counter] = field(default_factory=dict)  # op -> "attr=v ..." -> count
    inputs: dict[str, Counter] = field(default_factory=dict)  # op -> "in0:weight in1:activation" -> count

    def rejected_ops(self) -> list[str]:
        return sorted({line.split(" (node")[0].split(" node ")[0] for line in self.rejected})


def _short(v: Any) -> str:
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_short(x) for x in v[:8]) + (",..." if len(v) > 8 else "") + "]"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _dtype_name(elem_type: int) -> str:
    from onnx import helper

    return helper.tensor_dtype_to_string(int(elem_type)).replace("TensorProto.", "")


def summarize(model: Any, name: str, exporter: str) -> OpsSummary:
    """The facts of one ONNX ModelProto (weights may be left external: only their names are read)."""
    import onnx
    from onnx import helper, shape_inference

    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    s = OpsSummary(name, exporter, opset)
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - report what the model itself declares
        inferred = model
    g = inferred.graph
    elem: dict[str, int] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            elem[vi.name] = vi.type.tensor_type.elem_type
    weights = {i.name for i in g.initializer}
    for i in g.initializer:
        elem[i.name] = i.data_type
    foldable = set(weights)
    producer: dict[str, str] = {}
    for n in g.node:
        for o in n.output:
            producer[o] = n.op_type
    for vi in g.input:
        if vi.name not in weights:
            s.input_dtypes[vi.name] = _dtype_name(elem.get(vi.name, 0))
    for n in g.node:
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        s.ops[op] += 1
        if n.op_type == "Constant" or n.op_type in _SHAPE_ONLY or all(
            (not x) or x in foldable for x in n.input
        ):
            foldable.update(n.output)
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type in NOTABLE:
            keys = NOTABLE[n.op_type]
            sig = " ".join(f"{k}={_short(attrs[k])}" for k in keys if k in attrs) or "(defaults)"
            if n.op_type == "Cast":
                sig = "to=" + _dtype_name(attrs.get("to", 0))
            s.attrs.setdefault(op, Counter())[sig] += 1
        if n.op_type in INPUT_KINDS:
            kinds = []
            for x in n.input:
                if not x:
                    kinds.append("-")
                elif x in weights:
                    kinds.append("weight")
                elif x in foldable:
                    kinds.append("const")
                else:
                    kinds.append("act")
            s.inputs.setdefault(op, Counter())[" ".join(kinds)] += 1
        for o in n.output:
            t = elem.get(o)
            if t and t != onnx.TensorProto.FLOAT:
                d = _dtype_name(t)
                where = "folded" if o in foldable else "runtime"
                s.dtypes.setdefault(d, Counter())[f"{op}({where})"] += 1
    for vi in g.input:
        t = elem.get(vi.name)
        if vi.name not in weights and t and t != onnx.TensorProto.FLOAT:
            d = _dtype_name(t)
            s.dtypes.setdefault(d, Counter())["graph input"] += 1
    return s


def frontend_view(s: OpsSummary, path: Path) -> None:
    """Fill in what the frontend says of the export: unsupported() lines and the import error."""
    import onnx

    from autotune.graph.frontend import from_onnx, unsupported

    try:
        s.rejected = list(unsupported(onnx.load(str(path), load_external_data=False)))
    except Exception as err:  # noqa: BLE001 - an API change must not end the report
        s.rejected = [f"(unsupported() failed: {one_line(err)})"]
    try:
        from_onnx(str(path))
    except Exception as err:  # noqa: BLE001 - the error is the finding
        s.import_error = one_line(err)


def _counter_line(c: Counter, limit: int = 12) -> str:
    items = c.most_common()
    text = ", ".join(f"`{k}` ×{v}" for k, v in items[:limit])
    return text + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def render(summaries: list[OpsSummary], failed_exports: list[str], missing: Sequence[str] = ()) -> str:
    """The Markdown report: an overview over all exports, then one section per export."""
    lines = ["# Operators of the gallery's exports", "",
             "Generated by `python -m bench.gallery.ops_report` from the cached exports "
             "(`bench/gallery/exports/`). \"OP inputs\" lines classify each input of a node, in order: "
             "`act` = computed at run time from the model inputs, `const` = "
             "depends only on weights/constants/static shapes (foldable at import), `weight` = an "
             "initializer.",
             ""]
    users: dict[str, set[str]] = {}
    rejected: dict[str, set[str]] = {}
    for s in summaries:
        for op in s.ops:
            users.setdefault(op, set()).add(f"{s.model}.{s.exporter}")
        for op in s.rejected_ops():
            rejected.setdefault(op, set()).add(f"{s.model}.{s.exporter}")
    lines += ["## Overview", "", f"{len(summaries)} exports; {len(users)} operator types in all; "
              f"{len(rejected)} rejected by the frontend somewhere.", "",
              "| op | exports using it | rejected in |", "| --- | ---: | ---: |"]
    for op in sorted(users, key=lambda o: (-len(rejected.get(o, ())), -len(users[o]), o)):
        lines.append(f"| {op} | {len(users[op])} | {len(rejected.get(op, ()))} |")
    lines += ["", "Attribute forms over all exports (how many exports use each):", ""]
    forms: dict[str, Counter] = {}
    for s in summaries:
        for op, c in s.attrs.items():
            forms.setdefault(op, Counter()).update(c.keys())
    lines += [f"- {op}: {_counter_line(forms[op], 10)}" for op in sorted(forms)]
    dtypes: dict[str, Counter] = {}
    for s in summaries:
        for d, c in s.dtypes.items():
            dtypes.setdefault(d, Counter()).update(c.keys())
    lines += ["", "Non-float32 values over all exports (producer(folded|runtime): how many exports):", ""]
    lines += [f"- {d}: {_counter_line(dtypes[d], 40)}" for d in sorted(dtypes)]
    lines += ["", "Import result per export:", "", "| model | exporter | opset | nodes | import |",
              "| --- | --- | ---: | ---: | --- |"]
    for s in summaries:
        res = "ok" if s.import_error is None else s.import_error.replace("|", "\\|")[:300]
        lines.append(f"| {s.model} | {s.exporter} | {s.opset} | {sum(s.ops.values())} | {res} |")
    if failed_exports:
        lines += ["", "Exports that failed (no ONNX to read):", ""] + [f"- {f}" for f in failed_exports]
    if missing:
        lines += ["", f"Not exported yet: {', '.join(missing)}"]
    for s in summaries:
        lines += ["", f"## {s.model} · {s.exporter} (opset {s.opset}, {sum(s.ops.values())} nodes)", "",
                  f"- ops: {_counter_line(s.ops, 100)}",
                  f"- inputs: {', '.join(f'`{k}` {v}' for k, v in s.input_dtypes.items())}",
                  f"- rejected op types: {', '.join(s.rejected_ops()) or 'none'}"]
        attr_lines = [r for r in s.rejected if " node " in r and " (node" not in r]
        if attr_lines:
            lines.append(f"- rejected attributes: {'; '.join(attr_lines[:8])}"
                         + (f" … ({len(attr_lines) - 8} more)" if len(attr_lines) > 8 else ""))
        lines.append(f"- import: {s.import_error or 'ok'}")
        for d, c in sorted(s.dtypes.items()):
            lines.append(f"- dtype {d}: {_counter_line(c)}")
        for op, c in sorted(s.attrs.items()):
            lines.append(f"- {op} attrs: {_counter_line(c, 8)}")
        for op, c in sorted(s.inputs.items()):
            lines.append(f"- {op} inputs: {_counter_line(c, 6)}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", help="models (default: every model with a cached export)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--exporter", choices=EXPORTERS, action="append", help="repeatable; default both")
    p.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    p.add_argument("--no-frontend", action="store_true", help="skip the frontend's verdicts (faster)")
    a = p.parse_args(argv)
    unknown = [m for m in a.models if m not in MODELS]
    if unknown:
        print(f"error: unknown model(s) {', '.join(unknown)}; valid: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    import onnx

    summaries, failed, missing = [], [], []
    for name in a.models or list(MODELS):
        for ex in a.exporter or EXPORTERS:
            onnx_path, meta_path = paths(a.cache, name, ex)
            if not meta_path.is_file():
                missing.append(f"{name} · {ex}")
                continue
            meta = json.loads(meta_path.read_text())
            if not meta.get("ok") or not onnx_path.is_file():
                failed.append(f"{name} · {ex}: {meta.get('error')}")
                continue
            s = summarize(onnx.load(str(onnx_path), load_external_data=False), name, ex)
            if not a.no_frontend:
                frontend_view(s, onnx_path)
            summaries.append(s)
    text = render(summaries, failed, missing)
    if a.out:
        tmp = a.out.with_name(a.out.name + ".part")
        tmp.write_text(text)
        tmp.replace(a.out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
