"""Recognising a tensorizable reduction: a batched matrix product of two stored operands."""

from __future__ import annotations

from ..codegen.tensorcore import GemmView
from ..te.expr import Binary, Cast, Reduce, TensorRead, Var
from ..te.tensor import Tensor

TENSOR_DTYPES = ("float16", "bfloat16", "float32")


def _read(e) -> TensorRead | None:  # noqa: ANN001 - Expr
    if isinstance(e, Cast) and e.dtype == "float32":
        e = e.value
    if isinstance(e, TensorRead) and e.tensor.is_placeholder and all(isinstance(i, Var) for i in e.indices):
        return e
    return None


def gemm_view(out: Tensor, precision: str = "fp32") -> GemmView | None:
    """``out`` as ``C[batch.., m, n] = sum_k A[.., m, k] * B[.., k, n]`` (either operand's last two
    dims in either order, batch dims leading), or None. float32 operands map to tensor cores only
    with ``precision`` "tf32"."""
    body = out.body if not out.is_placeholder else None
    if out.dtype != "float32" or not isinstance(body, Reduce) or body.combiner != "sum":
        return None
    if len(body.axes) != 1:
        return None
    if not isinstance(body.body, Binary) or body.body.op != "mul" or len(out.axes) < 2:
        return None
    a, b = _read(body.body.a), _read(body.body.b)
    if a is None or b is None or a.tensor.dtype != b.tensor.dtype or a.tensor.dtype not in TENSOR_DTYPES:
        return None
    if a.tensor.dtype == "float32" and precision != "tf32":
        return None
    k = body.axes[0].var
    *batch, m, n = [ax.var for ax in out.axes]
    # which operand reads m (A) and which reads n (B)
    if m in b.indices and n in a.indices:
        a, b = b, a
    lays = []
    for r, sp in ((a, m), (b, n)):
        idx = list(r.indices)
        if len(idx) not in (2, 2 + len(batch)) or (len(idx) > 2 and idx[:-2] != batch):
            return None
        tail = idx[-2:]
        if tail == [sp, k]:
            lays.append("mk" if sp is m else "nk")
        elif tail == [k, sp]:
            lays.append("km" if sp is m else "kn")
        else:
            return None
    size = 1
    for ax in out.axes[:-2]:
        size *= ax.extent
    return GemmView(
        batch=size,
        m=out.axes[-2].extent,
        n=out.axes[-1].extent,
        k=body.axes[0].extent,
        a_layout=lays[0],
        b_layout=lays[1],
        a_batched=len(a.indices) > 2 and size > 1,
        b_batched=len(b.indices) > 2 and size > 1,
        dtype=a.tensor.dtype,
    )
