"""Matrix products (Conv, MatMul) in a reduced precision: the ``_precision`` attribute a compile
option sets (``graph.precision``) and what it means for the operator's inference, numpy form and
tensor expression.

``fp16`` / ``bf16``: both operands are rounded to that 16-bit type (a constant weight is stored in
it, cast once at compile time; an activation is rounded where the product reads it) and the
products are summed in float32, as tensor cores do; the result stays float32. ``tf32``: float32
operands that tensor cores may round to TF32 (a mode of the workload, ``Workload.precision``).
"""

from __future__ import annotations

import numpy as np

from autotune import te
from autotune.te.gemm import PRECISIONS, STORAGE_DTYPE
from autotune.te.tensor import cast
from autotune.te.workload import numpy_dtype

from ..ir import GraphError, Node, TensorType
from .te_build import nd_compute

PRECISION_ATTR = "_precision"
# the precisions whose operands are stored in a 16-bit type, and that type
LOW_DTYPE = {p: d for p, d in STORAGE_DTYPE.items() if d != "float32"}


def product_precision(attrs: dict) -> str:
    p = attrs.get(PRECISION_ATTR, "fp32")
    if p not in PRECISIONS:
        raise GraphError(f"unknown product precision {p!r}; valid: {', '.join(PRECISIONS)}")
    return p


def check_operands(node: Node, types: list) -> None:
    """Product operands are float32, or (a weight cast at compile time) the 16-bit type of the
    node's precision."""
    low = LOW_DTYPE.get(product_precision(node.attrs))
    for i, t in zip(node.inputs, types):
        if t is not None and t.dtype not in ("float32", low):
            raise GraphError(
                f"{node.op} node {node.name!r}: input {i!r} is {t.dtype}; only float32 is compiled"
            )


def result_type(t: TensorType) -> str:
    """The dtype of a product's result: float32 (16-bit operands are summed in float32)."""
    return "float32" if t.dtype in LOW_DTYPE.values() else t.dtype


def operand_np(x: np.ndarray, attrs: dict, like: np.ndarray) -> np.ndarray:
    """An operand as the product sees it: rounded to the node's 16-bit type, in ``like``'s dtype."""
    low = LOW_DTYPE.get(product_precision(attrs))
    if low is not None:
        x = np.asarray(x).astype(numpy_dtype(low))
    dtype = like.dtype if like.dtype.kind == "f" and like.dtype.itemsize >= 4 else np.dtype(np.float32)
    return np.asarray(x).astype(dtype, copy=False)


def operand_te(x: te.Tensor, attrs: dict, name: str) -> te.Tensor:
    """An operand as the product reads it: float32, rounded to the node's 16-bit type first."""
    low = LOW_DTYPE.get(product_precision(attrs))
    if x.dtype == "float32" and low is None:
        return x
    if x.dtype == "float32":
        def fn(i: list) -> te.Expr:
            return cast("float32", cast(low, x[tuple(i)]))
    else:
        def fn(i: list) -> te.Expr:
            return cast("float32", x[tuple(i)])
    return nd_compute(x.shape, fn, f"{name}_{'f32' if low is None else low}", "elementwise")
