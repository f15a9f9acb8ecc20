"""Recognising a tensorizable reduction: a batched matrix product of two stored operands."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..codegen.c_base import math_call
from ..codegen.tensorcore import GemmView
from ..te.expr import (
    LOW_PRECISION_DTYPES,
    Binary,
    Call,
    Cast,
    Compare,
    FloatImm,
    IntImm,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
    substitute,
    walk,
)
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


# --- any product of two operands, gathered (a convolution as implicit GEMM), with an epilogue ----

_INT_C = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%"}
_FLOAT_C = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_CMP_C = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}


class _NotGatherable(Exception):
    pass


_UNIT = object()  # an index 0 into an axis of extent 1 (a broadcast read of the output's element)


class _Ctx:
    """What C text may refer to: the workload's inputs (``in<i>``), the 16-bit type the operands
    are stored in (AT_TO_FLOAT / AT_FROM_FLOAT convert it), and the product whose value an
    epilogue reads as ``at_v`` (only at the output's own element)."""

    def __init__(self, inputs: list, dtype: str, product: Tensor | None = None, out_axes: list | None = None):
        self.inputs, self.dtype, self.product, self.out_axes = inputs, dtype, product, out_axes or []


def _c(e, env: dict, ctx: _Ctx, ident: dict | None = None) -> str:  # noqa: ANN001, C901 - te Expr -> C
    """C text of ``e`` with variables replaced by ``env``'s C text; reads of computed tensors are
    inlined, reads of inputs index ``in<i>`` (16-bit values widened by AT_TO_FLOAT). ``ident`` maps
    a variable to the output axis it equals (so a read of the product can be checked to be the
    output's own element)."""
    ident = ident or {}
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        v = float(e.value)
        return ("INFINITY" if v > 0 else "-INFINITY") if np.isinf(v) else f"{v!r}f"
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary):
        a, b = _c(e.a, env, ctx, ident), _c(e.b, env, ctx, ident)
        if e.dtype == "float32":
            if e.op in _FLOAT_C:
                return f"({a} {_FLOAT_C[e.op]} {b})"
            if e.op in ("max", "min", "pow"):
                return math_call({"max": "fmax", "min": "fmin", "pow": "pow"}[e.op], [a, b], "float32")
            raise _NotGatherable(f"float {e.op}")
        if e.dtype.startswith("int") and e.op in _INT_C:
            return f"({a} {_INT_C[e.op]} {b})"
        raise _NotGatherable(f"{e.dtype} {e.op}")
    if isinstance(e, Compare):
        return f"({_c(e.a, env, ctx, ident)} {_CMP_C[e.op]} {_c(e.b, env, ctx, ident)})"
    if isinstance(e, Not):
        return f"(!{_c(e.a, env, ctx, ident)})"
    if isinstance(e, Select):
        return f"({_c(e.cond, env, ctx, ident)} ? {_c(e.t, env, ctx, ident)} : {_c(e.f, env, ctx, ident)})"
    if isinstance(e, Call):
        if e.dtype != "float32":
            raise _NotGatherable(f"{e.dtype} {e.name}")
        return math_call(e.name, [_c(a, env, ctx, ident) for a in e.args], "float32")
    if isinstance(e, Cast):
        v = _c(e.value, env, ctx, ident)
        src = e.value.dtype
        if e.dtype == "float32":
            # 16-bit values are widened where they are read; integers convert
            return v if src in ("float32", *LOW_PRECISION_DTYPES) else f"((float)({v}))"
        if e.dtype == ctx.dtype and e.dtype in LOW_PRECISION_DTYPES and src == "float32":
            return f"AT_TO_FLOAT(AT_FROM_FLOAT({v}))"  # rounded to the operands' 16-bit type
        raise _NotGatherable(f"cast {src} to {e.dtype}")
    if isinstance(e, TensorRead):
        return _read_c(e, env, ctx, ident)
    raise _NotGatherable(type(e).__name__)


def _read_c(e: TensorRead, env: dict, ctx: _Ctx, ident: dict) -> str:
    t = e.tensor
    idx = [_c(i, env, ctx, ident) for i in e.indices]
    if t.is_placeholder:
        i = next((k for k, x in enumerate(ctx.inputs) if x is t), None)
        if i is None:
            raise _NotGatherable(f"{t.name} is not an input")
        if t.dtype not in ("float32", ctx.dtype):
            raise _NotGatherable(f"{t.name} is {t.dtype}")
        flat, stride = "0", 1
        for d in reversed(range(len(idx))):
            flat = f"{flat} + (size_t)({idx[d]}) * {stride}"
            stride *= t.shape[d]
        read = f"in{i}[{flat}]"
        return read if t.dtype == "float32" else f"AT_TO_FLOAT({read})"
    at = [_UNIT if isinstance(i, IntImm) and i.value == 0 and a.extent == 1 else
          ident.get(i) if isinstance(i, Var) else None for a, i in zip(t.axes, e.indices)]
    if t is ctx.product:
        if not all(x is o.var or (x is _UNIT and o.extent == 1) for x, o in zip(at, ctx.out_axes)):
            raise _NotGatherable("the epilogue reads the product away from its own element")
        return "at_v"
    if isinstance(t.body, Reduce):
        raise _NotGatherable("a reduction inside an operand or epilogue")
    inner_ident = {a.var: x for a, x in zip(t.axes, at) if x is not None}
    return _c(t.body, {**env, **{a.var: f"({x})" for a, x in zip(t.axes, idx)}}, ctx, inner_ident)


def _digits(axes: list, var: str) -> dict:
    """C text of each axis's value when ``var`` is their row-major flattening."""
    out, stride = {}, 1
    for a in reversed(axes):
        out[a.var] = f"(({var} / {stride}) % {a.extent})"
        stride *= a.extent
    return out


def _rounding(e) -> str:  # noqa: ANN001 - Expr
    """The type an operand's values are exactly representable in: a 16-bit type when every value
    is read from or rounded to it (constants such as padding zeros fit any), "float32" otherwise;
    "any" for a constant that is exact in float16 and bfloat16."""
    if isinstance(e, FloatImm):
        return "any" if float(e.value) == 0.0 else "float32"
    if isinstance(e, Cast) and e.dtype == "float32" and e.value.dtype in LOW_PRECISION_DTYPES:
        return e.value.dtype
    if isinstance(e, TensorRead) and not e.tensor.is_placeholder and not isinstance(e.tensor.body, Reduce):
        return _rounding(e.tensor.body)
    if isinstance(e, Select):
        kinds = {_rounding(e.t), _rounding(e.f)} - {"any"}
        return kinds.pop() if len(kinds) == 1 else ("any" if not kinds else "float32")
    return "float32"


def _computed_reads(e, seen: dict) -> None:  # noqa: ANN001
    """Computed tensors ``e`` reads, directly or through inlined stages (stop at reductions)."""
    for n in walk(e):
        if isinstance(n, TensorRead) and not n.tensor.is_placeholder and id(n.tensor) not in seen:
            seen[id(n.tensor)] = n.tensor
            if not isinstance(n.tensor.body, Reduce):
                _computed_reads(n.tensor.body, seen)


def product_stage(out: Tensor) -> Tensor | None:
    """The one sum reduction ``out`` is (or is elementwise of), or None."""
    if out.is_placeholder:
        return None
    if isinstance(out.body, Reduce):
        seen: dict = {}
        _computed_reads(out.body.body, seen)
        inner = any(isinstance(t.body, Reduce) for t in seen.values())
        return out if out.body.combiner == "sum" and not inner else None
    seen = {}
    _computed_reads(out.body, seen)
    reds = [t for t in seen.values() if isinstance(t.body, Reduce)]
    if len(reds) != 1 or reds[0].body.combiner != "sum" or reds[0].shape != out.shape:
        return None
    inner: dict = {}
    _computed_reads(reds[0].body.body, inner)
    return None if any(isinstance(t.body, Reduce) for t in inner.values()) else reds[0]


def gather_view(
    prod: Tensor, inputs: list, precision: str = "fp32", out: Tensor | None = None
) -> GemmView | None:
    """``prod = sum_k x * y`` over any operands (computed ones inlined: padding, casts), as a
    product whose M flattens the axes only x reads, N those only y reads, K the reduction axes: the
    operands are gathered element by element (a convolution as implicit GEMM); ``out`` (default
    ``prod``) is elementwise of ``prod`` (bias, activation, residual: the epilogue). None when it
    is not such a product in float16/bfloat16 (both operands rounded to the same type) or TF32."""
    out = prod if out is None else out
    body = prod.body if not prod.is_placeholder else None
    if prod.dtype != "float32" or out.dtype != "float32" or not isinstance(body, Reduce):
        return None
    if body.combiner != "sum":
        return None
    if not isinstance(body.body, Binary) or body.body.op != "mul":
        return None
    x, y = body.body.a, body.body.b
    kinds = {_rounding(x), _rounding(y)}
    if kinds <= {"float32", "any"} and precision == "tf32":
        dtype = "float32"
    elif len(kinds - {"any"}) == 1 and (kinds - {"any"}) <= set(LOW_PRECISION_DTYPES):
        dtype = next(iter(kinds - {"any"}))
    else:
        return None
    used_x, used_y = _used_vars(x), _used_vars(y)
    m_axes = [a for a in prod.axes if a.var in used_x and a.var not in used_y]
    n_axes = [a for a in prod.axes if a.var in used_y and a.var not in used_x]
    # batch axes: read by both, or of extent 1 (read by neither: a broadcast batch of one)
    b_axes = [a for a in prod.axes if (a.var in used_x) == (a.var in used_y) and
              (a.var in used_x or a.extent == 1)]
    if not m_axes or not n_axes or len(m_axes) + len(n_axes) + len(b_axes) != len(prod.axes):
        return None
    env_b = _digits(b_axes, "at_b")
    env_k = _digits(list(body.axes), "at_gk")
    ctx = _Ctx(list(inputs), dtype)
    pos = {**_digits(m_axes, "at_row"), **_digits(n_axes, "at_col"), **env_b}
    try:
        a_expr = _c(x, {**_digits(m_axes, "at_gm"), **env_b, **env_k}, ctx)
        b_expr = _c(y, {**_digits(n_axes, "at_gn"), **env_b, **env_k}, ctx)
        epilogue = None
        if out is not prod:
            ectx = _Ctx(list(inputs), dtype, prod, list(out.axes))
            env_out = {o.var: pos[p.var] for o, p in zip(out.axes, prod.axes)}
            epilogue = _c(out.body, env_out, ectx, {o.var: o.var for o in out.axes})
    except _NotGatherable:
        return None
    off, stride = "0", 1
    for a in reversed(prod.axes):
        off = f"{off} + (size_t){pos[a.var]} * {stride}"
        stride *= a.extent
    size = lambda axes: int(np.prod([a.extent for a in axes])) if axes else 1  # noqa: E731
    return GemmView(batch=size(b_axes), m=size(m_axes), n=size(n_axes), k=size(list(body.axes)),
                    a_layout="mk", b_layout="nk", a_batched=False, b_batched=False,
                    dtype=dtype, a_expr=a_expr, b_expr=b_expr, c_offset=off, epilogue=epilogue,
                    in_dtypes=tuple(t.dtype for t in inputs),
                    a_rows_fastest=_rows_fastest(x, m_axes, list(body.axes)),
                    b_rows_fastest=_rows_fastest(y, n_axes, list(body.axes)))


def _used_vars(e) -> set:  # noqa: ANN001
    """Variables an operand's read indices use."""
    return {n for n in walk(e) if isinstance(n, Var)}


def _innermost_vars(e) -> set:  # noqa: ANN001 - Expr
    """Variables the last (contiguous) index of every input read in ``e`` uses, computed stages
    inlined: which of the product's axes runs along memory."""
    out: set = set()
    for n in walk(e):
        if not isinstance(n, TensorRead):
            continue
        t = n.tensor
        if t.is_placeholder:
            out |= _used_vars(n.indices[-1]) if n.indices else set()
        elif not isinstance(t.body, Reduce):
            out |= _innermost_vars(substitute(t.body, {a.var: i for a, i in zip(t.axes, n.indices)}))
    return out


def _rows_fastest(e, rows: list, ks: list) -> bool:  # noqa: ANN001 - Expr
    """Gather an operand's tile with consecutive threads along its rows (m or n) rather than
    along k, because its inputs are contiguous along a row axis (coalesced loads)."""
    inner = _innermost_vars(e)
    row_vars, k_vars = {a.var for a in rows}, {a.var for a in ks}
    return bool(inner & row_vars) and not inner & k_vars


def product_view(workload) -> GemmView | None:  # noqa: ANN001 - Workload
    """The workload's single output as a tensor-core product: stored operands (cp.async tiles)
    when it is a plain batched matrix product of its two inputs, else gathered operands with the
    output's elementwise epilogue, else None."""
    if len(workload.outputs) != 1:
        return None
    out = workload.outputs[0]
    prod = product_stage(out)
    if prod is None:
        return None
    if prod is out and len(workload.inputs) == 2:
        view = gemm_view(out, workload.precision)
        if view is not None:
            a = next(r for r in walk(out.body) if isinstance(r, TensorRead) and _read(r) is not None
                     and out.axes[-2].var in r.indices)
            return replace(view, a_arg=0 if a.tensor is workload.inputs[0] else 1,
                           in_dtypes=tuple(t.dtype for t in workload.inputs))
    return gather_view(prod, list(workload.inputs), workload.precision, out)
