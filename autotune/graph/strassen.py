"""Strassen's algorithm (Strassen, 1969) for a product with a constant matrix, one level or two
nested levels.

``Y = A W`` (A ``[..., K]`` with ``R`` rows in all, W ``[K, N]`` a model constant) is rewritten
into three kernels; with one level:

    S = StrassenInput(A)      S[b, i, k] = sum_p Ua[b, p] A_p[i, k]      7 sums of A's quadrants
    P = MatMul(S, T)          7 independent GEMMs [R/2, K/2] x [K/2, N/2] (T a model constant)
    Y = StrassenOutput(P)     Y_q[i, j] = sum_b Wc[q, b] P[b, i, j]      Y's quadrants

with the quadrants ``A_p`` / ``W_p`` / ``Y_q`` numbered 11, 12, 21, 22 and the weight's sums
computed once at compile time (``T[b] = sum_p Ub[b, p] W_p``, in float64). The GEMMs do 7/8 of
the product's multiply-adds; the transforms read and write the activations a few times more and
the weight grows by 7/4. When R is odd the last row of A's lower half is zero (S has ``ceil(R/2)``
rows) and the output drops it.

Two levels apply the same to each quadrant (attrs ``levels = 2``): A, W and Y cut in 4 x 4 blocks,
49 GEMMs ``[R/4, K/4] x [K/4, N/4]`` as one batched product over ``[7, 7]`` (49/64 of the
multiply-adds; the weight grows by 49/16), the coefficients the Kronecker squares of one level's.
The transforms stay one kernel each: a level's nesting costs no pass over memory of its own.

The rounding differs from the product's: every entry of Y sums up to four (two levels: sixteen)
products of sums, so its error bound is a few times the plain product's (float32 results stay
within ~1e-6 relative of it at these sizes); the compile check compares against onnxruntime as
for any form.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, as_expr

from .forms import Form, coefficient, register_form, weighted
from .ir import Graph, GraphError, Node, TensorType
from .ops import INJECTIVE, REDUCE, Arg, Consts, Types, float_only, register, same

# the levels tune.py --model and compile try by default, per target kind (measured on the CPU:
# ViT-B/16's products, docs/graph.md; two levels gain the BERT-base layer 2% in the host's fast
# phase for 6 more tasks to tune, so they are asked for: --strassen 2)
DEFAULT_LEVELS = {"cpu": 1, "cuda": 0}
LEVELS = (1, 2)
MIN_MACS = 1 << 24  # smaller products are not rewritten: the transforms would not pay
MIN_ROWS = 16

# the coefficients over the quadrants 11, 12, 21, 22 of A (UA) and of W (UB) that each of the 7
# products multiplies, and those over the 7 products that each quadrant of the output sums (WC)
UA = np.array([[1, 0, 0, 1], [0, 0, 1, 1], [1, 0, 0, 0], [0, 0, 0, 1], [1, 1, 0, 0], [-1, 0, 1, 0],
               [0, 1, 0, -1]], dtype=np.float64)
UB = np.array([[1, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, -1], [-1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0],
               [0, 0, 1, 1]], dtype=np.float64)
WC = np.array([[1, 0, 0, 1, -1, 0, 1], [0, 0, 1, 0, 1, 0, 0], [0, 1, 0, 1, 0, 0, 0],
               [1, -1, 1, 0, 0, 1, 0]], dtype=np.float64)
PRODUCTS = UA.shape[0]


def tables(levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UA, UB and WC of ``levels`` nested levels: Kronecker powers, the outer level's index first
    (product ``b = b1 * 7 + b2``, block ``p = p1 * 4 + p2`` for two levels)."""
    ua, ub, wc = UA, UB, WC
    for _ in range(levels - 1):
        ua, ub, wc = np.kron(ua, UA), np.kron(ub, UB), np.kron(wc, WC)
    return ua, ub, wc


def block(p: int, levels: int) -> tuple[int, int]:
    """(row block, column block) of block ``p`` in the ``2^levels x 2^levels`` grid: each level's
    quadrant (11, 12, 21, 22 as 0-3, the outer level first) halves the one above it."""
    row = col = 0
    for level in range(levels):
        q = (p // 4 ** (levels - 1 - level)) % 4
        row, col = 2 * row + q // 2, 2 * col + q % 2
    return row, col


def _digits(b: int, levels: int, base: int = PRODUCTS) -> tuple[int, ...]:
    """Product ``b`` (block ``b`` with base 4) as one index per level, the outer level first."""
    return tuple((b // base ** (levels - 1 - level)) % base for level in range(levels))


def blocks(x: np.ndarray, levels: int) -> np.ndarray:
    """``x`` (2-d) zero-padded to ``2^levels`` equal parts per side, as ``[4^levels, rows, cols]``
    in the order of ``block``."""
    parts = 1 << levels
    rows, cols = -(-x.shape[0] // parts), x.shape[1] // parts
    xp = np.zeros((parts * rows, parts * cols), dtype=x.dtype)
    xp[: x.shape[0], : x.shape[1]] = x
    out = []
    for p in range(4 ** levels):
        r, c = block(p, levels)
        out.append(xp[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols])
    return np.stack(out)


def transform_weight(w: np.ndarray, levels: int = 1) -> np.ndarray:
    """``T[b] = sum_p UB[b, p] W_p`` of a ``[K, N]`` weight (K, N divisible by ``2^levels``), in
    float64 then cast back, shaped ``[7] * levels + [K / 2^levels, N / 2^levels]``."""
    ub = tables(levels)[1]
    q = blocks(w.astype(np.float64), levels)
    t = np.einsum("bp,pkn->bkn", ub, q)
    return np.ascontiguousarray(t.reshape((PRODUCTS,) * levels + q.shape[1:]).astype(w.dtype))


def _rows(shape: Sequence[int]) -> int:
    return math.prod(shape[:-1])


def _part(n: int, levels: int) -> int:
    """The rows of one block of ``n`` rows split ``2^levels`` ways (padded)."""
    return -(-n // (1 << levels))


# --- graph operators -----------------------------------------------------------------------------
def _levels(node: Node) -> int:
    levels = int(node.attrs.get("levels", 1))
    if levels not in LEVELS:
        raise GraphError(f"{node.op} node {node.name!r}: levels {levels} is not one of {LEVELS}")
    return levels


@register("StrassenInput", INJECTIVE, internal=True)
class _StrassenInput:
    """A [..., K] -> S [7] * L + [ceil(R / 2^L), K / 2^L] (R = rows of A, L = attrs levels, 1 if
    not given)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        a, levels = same(types[0]), _levels(node)
        if len(a.shape) < 2 or a.shape[-1] % (1 << levels):
            raise GraphError(f"StrassenInput node {node.name!r}: input {a.shape} does not split "
                             f"{1 << levels} ways in its last dim")
        shape = (PRODUCTS,) * levels + (_part(_rows(a.shape), levels), a.shape[-1] >> levels)
        return [TensorType(shape, a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        levels = _levels(node)
        q = blocks(xs[0].reshape(-1, xs[0].shape[-1]), levels)
        s = np.einsum("bp,pik->bik", tables(levels)[0].astype(q.dtype), q)
        return [np.ascontiguousarray(s.reshape((PRODUCTS,) * levels + q.shape[1:]))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return input_transform(args[0], name, int(attrs.get("levels", 1)))


@register("StrassenOutput", REDUCE, internal=True)
class _StrassenOutput:
    """P [7] * L + [ceil(R / 2^L), N / 2^L] -> Y [R, 2^L, N / 2^L] (Y's rows, each cut in 2^L
    parts; the graph reshapes it to the product's shape); attrs rows = R, levels = L (1 if not
    given)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        p, levels = same(types[0]), _levels(node)
        rows = int(node.attrs["rows"])
        if p.shape[:levels] != (PRODUCTS,) * levels or len(p.shape) != levels + 2 \
                or p.shape[levels] != _part(rows, levels):
            raise GraphError(f"StrassenOutput node {node.name!r}: input {p.shape} does not fit {rows} rows")
        return [TensorType((rows, 1 << levels, p.shape[-1]), p.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        levels, rows = _levels(node), int(node.attrs["rows"])
        part, cols = xs[0].shape[-2:]
        p = xs[0].reshape(-1, part, cols)
        y = np.einsum("qb,bij->qij", tables(levels)[2].astype(p.dtype), p)  # the blocks of Y
        full = np.zeros((part << levels, 1 << levels, cols), dtype=p.dtype)
        for q in range(4 ** levels):
            r, c = block(q, levels)
            full[r * part:(r + 1) * part, c] = y[q]
        return [np.ascontiguousarray(full[:rows])]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return output_transform(args[0], int(attrs["rows"]), name, int(attrs.get("levels", 1)))


# --- tensor expressions --------------------------------------------------------------------------
def _element(a: te.Tensor, row: Expr, col: Expr) -> Expr:
    """``A[row, col]`` of A viewed as ``[R, K]`` (``row`` unravelled over A's leading dims)."""
    lead = list(a.shape[:-1])
    idx: list[Expr] = []
    for d in reversed(lead):
        idx.append(row % d if d > 1 else as_expr(0))
        row = row // d
    return a[tuple(reversed(idx)) + (col,)]


def input_transform(a: te.Tensor, name: str, levels: int = 1) -> te.Tensor:
    rows, k = _rows(a.shape), a.shape[-1]
    part, width = _part(rows, levels), k >> levels

    def body(bs: Sequence[Expr], i: Expr, c: Expr) -> Expr:

        def part_of(p: int) -> Expr:
            rb, cb = block(p, levels)
            r = i + part * rb
            v = _element(a, r, c + width * cb)
            return v if (rb + 1) * part <= rows else T.select(r < rows, v, 0.0)

        def coeff(p: int) -> Expr | None:
            # one literal per level, each picked by that level's product axis (a schedule that
            # unrolls the axes folds them)
            out: Expr | None = None
            for level, q in enumerate(_digits(p, levels, 4)):
                c = coefficient(UA, bs[level], q)
                if c is None:
                    return None
                out = c if out is None else out * c
            return out

        return weighted([(coeff(p), part_of(p)) for p in range(4 ** levels)])

    shape = (PRODUCTS,) * levels + (part, width)
    if levels == 1:
        return T.compute(shape, lambda b, i, c: body((b,), i, c), name=name, tag="strassen_input")
    return T.compute(shape, lambda b1, b2, i, c: body((b1, b2), i, c), name=name, tag="strassen_input")


def output_transform(p: te.Tensor, rows: int, name: str, levels: int = 1) -> te.Tensor:
    part, cols = p.shape[-2], p.shape[-1]
    wc, parts = tables(levels)[2], 1 << levels
    # by row block rb: the coefficients over the products of the column block h's output block
    by_row = [wc[[q for q in range(4 ** levels) if block(q, levels)[0] == rb]] for rb in range(parts)]

    def body(r: Expr, h: Expr, j: Expr) -> Expr:
        i: Expr = r
        for rb in range(1, parts):
            i = T.select(r >= part * rb, r - part * rb, i)
        out: Expr | None = None
        for rb, table in enumerate(by_row):
            v = weighted([(coefficient(table, h, b), p[_digits(b, levels) + (i, j)])
                          for b in range(PRODUCTS ** levels)])
            out = v if out is None else T.select(r >= part * rb, v, out)
        assert out is not None
        return out

    return T.compute((rows, parts, cols), body, name=name, tag="strassen_output")


# --- the graph rewrite -----------------------------------------------------------------------------
def eligible(g: Graph, node: Node, levels: int = 1) -> bool:
    """A float32 MatMul by a constant ``[K, N]`` matrix (not an exact integer product), K and N
    divisible by ``2^levels``, at least MIN_ROWS rows of A per block and MIN_MACS * 4^(levels - 1)
    multiply-adds."""
    if node.op != "MatMul" or len(node.inputs) != 2 or node.inputs[1] not in g.consts:
        return False
    if node.attrs.get("exact"):  # an integer product (passes.exact_product): its sums must stay exact
        return False
    a, w = g.types.get(node.inputs[0]), g.consts[node.inputs[1]]
    if a is None or len(a.shape) < 2 or w.ndim != 2 or w.dtype != np.float32 or a.dtype != "float32":
        return False
    k, n = w.shape
    rows, parts = _rows(a.shape), 1 << levels
    return (a.shape[-1] == k and k % parts == 0 and n % parts == 0 and rows >= MIN_ROWS * parts // 2
            and rows * k * n >= MIN_MACS << 2 * (levels - 1))


# node names of a rewritten product, by levels: its name + these
SUFFIXES = ("/st_in", "/st_gemm", "/st_out")
SUFFIXES2 = ("/st2_in", "/st2_gemm", "/st2_out")


def rewrite(g: Graph, node: Node, levels: int = 1) -> list[Node]:
    """``node`` as StrassenInput -> MatMul -> StrassenOutput -> Reshape, the first three named
    ``node.name`` + the level's suffixes; the weight's sums added to ``g``."""
    from .passes import _add_const, _new_value

    a, wname = node.inputs
    y = node.outputs[0]
    rows = _rows(g.types[a].shape)
    tag = "" if levels == 1 else str(levels)
    attrs = {} if levels == 1 else {"levels": levels}
    s_in, s_gemm, s_out = (node.name + s for s in (SUFFIXES if levels == 1 else SUFFIXES2))
    t = _add_const(g, f"{wname}_strassen{tag}", transform_weight(g.consts[wname], levels))
    shape = _add_const(g, y + "_shape", np.array(g.types[y].shape, dtype=np.int64))
    s = _new_value(g, s_in, TensorType((1,), "float32"))  # types are inferred after the rewrite
    prod = _new_value(g, s_gemm, TensorType((1,), "float32"))
    halves = _new_value(g, s_out, TensorType((1,), "float32"))
    return [
        Node("StrassenInput", [a], [s], dict(attrs), s_in),
        Node("MatMul", [s, t], [prod], {}, s_gemm),
        Node("StrassenOutput", [prod], [halves], {"rows": rows, **attrs}, s_out),
        Node("Reshape", [halves, shape], [y], {}, g.fresh_name(node.name + "/st_view")),
    ]


def form_name(levels: int) -> str:
    """The form of ``levels`` levels: ``strassen``, ``strassen2``."""
    return "strassen" if levels == 1 else f"strassen{levels}"


def _register(levels: int, label: str) -> None:
    register_form(Form(
        name=form_name(levels),
        label=label,
        what="matmul",
        suffixes=SUFFIXES if levels == 1 else SUFFIXES2,
        eligible=lambda g, n: eligible(g, n, levels),
        rewrite=lambda g, n: rewrite(g, n, levels),
        recognizes=lambda n: n.op == "StrassenInput" and int(n.attrs.get("levels", 1)) == levels,
    ))


_register(1, "Strassen")
_register(2, "Strassen x2")
