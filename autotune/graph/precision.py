"""The ``--precision`` of a compiled model: matrix products (Conv, MatMul) on tensor cores.

``fp16`` / ``bf16`` mark every product that tensor cores compute (MatMul, Conv with one group)
with that precision (``ops.products``): its constant weights are cast to the 16-bit type once,
here, and its activations are rounded where the product reads them; sums, softmax, norms and
every other operator stay in float32, and so do the values between kernels. ``tf32`` marks the
float32 products that tensor cores may round to TF32. ``fp32`` changes nothing.
"""

from __future__ import annotations

from ..te.workload import numpy_dtype
from .ir import Graph, GraphError, TensorType
from .ops.products import LOW_DTYPE, PRECISION_ATTR, PRECISIONS
from .passes import eliminate_dead_code, infer_types

# a compiled model's outputs against onnxruntime's float32 ones: the largest error relative to the
# largest reference magnitude (16-bit operands round to 2^-11 (fp16) / 2^-8 (bf16) relative, and the
# rounding of each layer's operands adds up over a deep model)
OUTPUT_TOLERANCE = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}


def output_tolerance(precision: str) -> float:
    """The stated tolerance of a model compiled in ``precision`` (see OUTPUT_TOLERANCE)."""
    return OUTPUT_TOLERANCE[precision]


def _is_product(n) -> bool:  # noqa: ANN001 - Node
    return n.op == "MatMul" or (n.op == "Conv" and int(n.attrs.get("group", 1)) == 1)


def apply_precision(graph: Graph, precision: str) -> Graph:
    """A copy of ``graph`` whose products compute in ``precision`` (see the module docstring)."""
    if precision not in PRECISIONS:
        raise GraphError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return graph
    g = graph.copy()
    low = LOW_DTYPE.get(precision)
    cast: dict[str, str] = {}  # float32 weight -> its 16-bit copy
    for n in g.nodes:
        if not _is_product(n) or any(g.types[v].dtype != "float32" for v in n.inputs[:2] if v):
            continue
        n.attrs = {**n.attrs, PRECISION_ATTR: precision}
        if low is None:
            continue
        for pos, v in enumerate(n.inputs[:2]):
            if v in g.consts:
                if v not in cast:
                    name = g.fresh_name(f"{v}_{precision}")
                    g.consts[name] = g.consts[v].astype(numpy_dtype(low))
                    g.types[name] = TensorType(g.types[v].shape, low)
                    cast[v] = name
                n.inputs[pos] = cast[v]
    return eliminate_dead_code(infer_types(g))
