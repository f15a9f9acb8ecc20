"""Recognising a tensorizable reduction: a batched matrix product of two stored operands."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..codegen.tensorcore import GemmView
from ..te.expr import Binary, Cast, Compare, FloatImm, IntImm, Not, Reduce, Select, TensorRead, Var, walk
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


# --- any product of two operands, gathered (a convolution as implicit GEMM) ----------------------

_INT_C = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%"}
_CMP_C = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}


def _c(e, env: dict, inputs: list) -> str:  # noqa: ANN001, C901 - te Expr -> C text
    """C text of ``e`` with variables replaced by ``env``'s C text; reads of computed tensors are
    inlined, reads of inputs index ``in<i>`` (16-bit values widened by AT_TO_FLOAT)."""
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        return f"{float(e.value)!r}f"
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary):
        a, b = _c(e.a, env, inputs), _c(e.b, env, inputs)
        if e.dtype == "float32":
            op = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(e.op)
            if op is None:
                raise _NotGatherable(f"float {e.op}")
            return f"({a} {op} {b})"
        return f"({a} {_INT_C[e.op]} {b})"
    if isinstance(e, Compare):
        return f"({_c(e.a, env, inputs)} {_CMP_C[e.op]} {_c(e.b, env, inputs)})"
    if isinstance(e, Not):
        return f"(!{_c(e.a, env, inputs)})"
    if isinstance(e, Select):
        return f"({_c(e.cond, env, inputs)} ? {_c(e.t, env, inputs)} : {_c(e.f, env, inputs)})"
    if isinstance(e, Cast):
        if e.dtype != "float32":
            raise _NotGatherable(f"cast to {e.dtype}")
        return _c(e.value, env, inputs)  # 16-bit reads are widened where they are read
    if isinstance(e, TensorRead):
        t = e.tensor
        idx = [_c(i, env, inputs) for i in e.indices]
        if t.is_placeholder:
            if not any(t is x for x in inputs):
                raise _NotGatherable(f"{t.name} is not an input")
            flat, stride = "0", 1
            for d in reversed(range(len(idx))):
                flat = f"{flat} + (size_t)({idx[d]}) * {stride}"
                stride *= t.shape[d]
            i = next(k for k, x in enumerate(inputs) if x is t)
            read = f"in{i}[{flat}]"
            return read if t.dtype == "float32" else f"AT_TO_FLOAT({read})"
        if isinstance(t.body, Reduce):
            raise _NotGatherable("a reduction inside an operand")
        return _c(t.body, {**env, **{a.var: f"({x})" for a, x in zip(t.axes, idx)}}, inputs)
    raise _NotGatherable(type(e).__name__)


class _NotGatherable(Exception):
    pass


def _digits(axes: list, var: str) -> dict:
    """C text of each axis's value when ``var`` is their row-major flattening."""
    out, stride = {}, 1
    for a in reversed(axes):
        out[a.var] = f"(({var} / {stride}) % {a.extent})"
        stride *= a.extent
    return out


def gather_view(out: Tensor, inputs: list, precision: str = "fp32") -> GemmView | None:
    """``out = sum_k x * y`` over any operands (computed ones inlined: padding), as a product
    whose M flattens the axes only x reads, N those only y reads, K the reduction axes: the
    operands are gathered element by element (a convolution as implicit GEMM), or None."""
    body = out.body if not out.is_placeholder else None
    if out.dtype != "float32" or not isinstance(body, Reduce) or body.combiner != "sum" or len(inputs) != 2:
        return None
    if not isinstance(body.body, Binary) or body.body.op != "mul":
        return None
    dts = {t.dtype for t in inputs}
    if len(dts) != 1 or next(iter(dts)) not in TENSOR_DTYPES or (dts == {"float32"} and precision != "tf32"):
        return None
    x, y = body.body.a, body.body.b
    used_x, used_y = _used_vars(x), _used_vars(y)
    m_axes = [a for a in out.axes if a.var in used_x and a.var not in used_y]
    n_axes = [a for a in out.axes if a.var in used_y and a.var not in used_x]
    b_axes = [a for a in out.axes if a.var in used_x and a.var in used_y]
    if not m_axes or not n_axes or len(m_axes) + len(n_axes) + len(b_axes) != len(out.axes):
        return None
    env_b = _digits(b_axes, "at_b")
    env_k = _digits(list(body.axes), "at_gk")
    try:
        a_expr = _c(x, {**_digits(m_axes, "at_gm"), **env_b, **env_k}, inputs)
        b_expr = _c(y, {**_digits(n_axes, "at_gn"), **env_b, **env_k}, inputs)
    except _NotGatherable:
        return None
    pos = {**_digits(m_axes, "at_row"), **_digits(n_axes, "at_col"), **env_b}
    off, stride = "0", 1
    for a in reversed(out.axes):
        off = f"{off} + (size_t){pos[a.var]} * {stride}"
        stride *= a.extent
    size = lambda axes: int(np.prod([a.extent for a in axes])) if axes else 1  # noqa: E731
    return GemmView(batch=size(b_axes), m=size(m_axes), n=size(n_axes), k=size(list(body.axes)),
                    a_layout="mk", b_layout="nk", a_batched=False, b_batched=False,
                    dtype=next(iter(dts)), a_expr=a_expr, b_expr=b_expr, c_offset=off)


def _used_vars(e) -> set:  # noqa: ANN001
    """Variables an operand's read indices use."""
    return {n for n in walk(e) if isinstance(n, Var)}


def product_view(workload) -> GemmView | None:  # noqa: ANN001 - Workload
    """The workload's single output as a tensor-core product: stored operands (cp.async tiles)
    when it is a plain batched matrix product, else gathered operands, else None."""
    if len(workload.outputs) != 1 or len(workload.inputs) != 2:
        return None
    out = workload.outputs[0]
    view = gemm_view(out, workload.precision)
    if view is not None:
        a = next(r for r in walk(out.body) if isinstance(r, TensorRead) and _read(r) is not None
                 and out.axes[-2].var in r.indices)
        return replace(view, a_arg=0 if a.tensor is workload.inputs[0] else 1)
    return gather_view(out, list(workload.inputs), workload.precision)
