"""One level of Strassen's algorithm for a product with a constant matrix (Strassen, 1969).

``Y = A W`` (A ``[..., K]`` with ``R`` rows in all, W ``[K, N]`` a model constant) is rewritten
into three kernels:

    S = StrassenInput(A)      S[b, i, k] = sum_p Ua[b, p] A_p[i, k]      7 sums of A's quadrants
    P = MatMul(S, T)          7 independent GEMMs [R/2, K/2] x [K/2, N/2] (T a model constant)
    Y = StrassenOutput(P)     Y_q[i, j] = sum_b Wc[q, b] P[b, i, j]      Y's quadrants

with the quadrants ``A_p`` / ``W_p`` / ``Y_q`` numbered 11, 12, 21, 22 and the weight's sums
computed once at compile time (``T[b] = sum_p Ub[b, p] W_p``, in float64). The GEMMs do 7/8 of
the product's multiply-adds; the transforms read and write the activations a few times more and
the weight grows by 7/4. When R is odd the last row of A's lower half is zero (S has ``ceil(R/2)``
rows) and the output drops it.

The rounding differs from the product's: every entry of Y sums up to four products of sums, so
its error bound is a few times the plain product's (float32 results stay within ~1e-6 relative
of it at these sizes); the compile check compares against onnxruntime as for any form.
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
from .ops import REDUCE, Arg, Consts, Types, float_only, register, same

# the targets where tune.py --model and compile try the form by default (measured on the CPU:
# ViT-B/16's products, docs/graph.md)
DEFAULT_ON = {"cpu": True, "cuda": False}
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


def quadrants(x: np.ndarray, rows: int, cols: int) -> list[np.ndarray]:
    """The four ``rows x cols`` blocks 11, 12, 21, 22 of a 2-d array, zero-padded at the end."""
    xp = np.zeros((2 * rows, 2 * cols), dtype=x.dtype)
    xp[: x.shape[0], : x.shape[1]] = x
    return [xp[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols] for i in (0, 1) for j in (0, 1)]


def transform_weight(w: np.ndarray) -> np.ndarray:
    """``T[b] = sum_p UB[b, p] W_p`` of a ``[K, N]`` weight (K, N even), in float64 then cast back."""
    k, n = w.shape
    q = quadrants(w.astype(np.float64), k // 2, n // 2)
    t = np.einsum("bp,pkn->bkn", UB, np.stack(q))
    return np.ascontiguousarray(t.astype(w.dtype))


def _rows(shape: Sequence[int]) -> int:
    return math.prod(shape[:-1])


# --- graph operators -----------------------------------------------------------------------------
@register("StrassenInput", REDUCE, internal=True)
class _StrassenInput:
    """A [..., K] -> S [7, ceil(R/2), K/2] (R = rows of A)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        a = same(types[0])
        if len(a.shape) < 2 or a.shape[-1] % 2:
            raise GraphError(f"StrassenInput node {node.name!r}: input {a.shape} has no even last dim")
        return [TensorType((PRODUCTS, (_rows(a.shape) + 1) // 2, a.shape[-1] // 2), a.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        a = xs[0].reshape(-1, xs[0].shape[-1])
        q = np.stack(quadrants(a, (a.shape[0] + 1) // 2, a.shape[1] // 2))
        return [np.ascontiguousarray(np.einsum("bp,pik->bik", UA.astype(a.dtype), q))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return input_transform(args[0], name)


@register("StrassenOutput", REDUCE, internal=True)
class _StrassenOutput:
    """P [7, ceil(R/2), N/2] -> Y [R, 2, N/2] (Y's rows with each row's two halves; the graph
    reshapes it to the product's shape); attrs rows = R."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        p = same(types[0])
        rows = int(node.attrs["rows"])
        if len(p.shape) != 3 or p.shape[0] != PRODUCTS or p.shape[1] != (rows + 1) // 2:
            raise GraphError(f"StrassenOutput node {node.name!r}: input {p.shape} does not fit {rows} rows")
        return [TensorType((rows, 2, p.shape[2]), p.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        p = xs[0]
        rows, half = int(node.attrs["rows"]), p.shape[1]
        y = np.einsum("qb,bij->qij", WC.astype(p.dtype), p)  # quadrants 11, 12, 21, 22
        full = np.concatenate([np.stack([y[0], y[1]], axis=1), np.stack([y[2], y[3]], axis=1)])
        assert full.shape[0] == 2 * half
        return [np.ascontiguousarray(full[:rows])]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return output_transform(args[0], int(attrs["rows"]), name)


# --- tensor expressions --------------------------------------------------------------------------
def _element(a: te.Tensor, row: Expr, col: Expr) -> Expr:
    """``A[row, col]`` of A viewed as ``[R, K]`` (``row`` unravelled over A's leading dims)."""
    lead = list(a.shape[:-1])
    idx: list[Expr] = []
    for d in reversed(lead):
        idx.append(row % d if d > 1 else as_expr(0))
        row = row // d
    return a[tuple(reversed(idx)) + (col,)]


def input_transform(a: te.Tensor, name: str) -> te.Tensor:
    rows, k = _rows(a.shape), a.shape[-1]
    half_r, half_k = (rows + 1) // 2, k // 2

    def body(b: Expr, i: Expr, c: Expr) -> Expr:
        def part(p: int) -> Expr:
            r = i + half_r * (p // 2)
            v = _element(a, r, c + half_k * (p % 2))
            return v if p < 2 or rows % 2 == 0 else T.select(r < rows, v, 0.0)

        return weighted([(coefficient(UA, b, p), part(p)) for p in range(4)])

    return T.compute((PRODUCTS, half_r, half_k), body, name=name, tag="strassen_input")


def output_transform(p: te.Tensor, rows: int, name: str) -> te.Tensor:
    half_r, half_n = p.shape[1], p.shape[2]

    def body(r: Expr, h: Expr, j: Expr) -> Expr:
        lower = r >= half_r
        i = T.select(lower, r - half_r, r)

        # quadrants 11 and 12 (upper rows) or 21 and 22, the column half h picking which
        upper = weighted([(coefficient(WC[0:2], h, b), p[b, i, j]) for b in range(PRODUCTS)])
        below = weighted([(coefficient(WC[2:4], h, b), p[b, i, j]) for b in range(PRODUCTS)])
        return T.select(lower, below, upper)

    return T.compute((rows, 2, half_n), body, name=name, tag="strassen_output")


# --- the graph rewrite -----------------------------------------------------------------------------
def eligible(g: Graph, node: Node) -> bool:
    """A float32 MatMul by a constant ``[K, N]`` matrix, K and N even, at least MIN_ROWS rows of A
    and MIN_MACS multiply-adds."""
    if node.op != "MatMul" or len(node.inputs) != 2 or node.inputs[1] not in g.consts:
        return False
    a, w = g.types.get(node.inputs[0]), g.consts[node.inputs[1]]
    if a is None or len(a.shape) < 2 or w.ndim != 2 or w.dtype != np.float32 or a.dtype != "float32":
        return False
    k, n = w.shape
    rows = _rows(a.shape)
    return (a.shape[-1] == k and k % 2 == 0 and n % 2 == 0 and rows >= MIN_ROWS
            and rows * k * n >= MIN_MACS)


SUFFIXES = ("/st_in", "/st_gemm", "/st_out")  # node names of a rewritten product: its name + these


def rewrite(g: Graph, node: Node) -> list[Node]:
    """``node`` as StrassenInput -> MatMul -> StrassenOutput -> Reshape, the first three named
    ``node.name + SUFFIXES[i]``; the weight's sums added to ``g``."""
    from .passes import _add_const, _new_value

    a, wname = node.inputs
    y = node.outputs[0]
    rows = _rows(g.types[a].shape)
    s_in, s_gemm, s_out = (node.name + s for s in SUFFIXES)
    t = _add_const(g, wname + "_strassen", transform_weight(g.consts[wname]))
    shape = _add_const(g, y + "_shape", np.array(g.types[y].shape, dtype=np.int64))
    s = _new_value(g, s_in, TensorType((1,), "float32"))  # types are inferred after the rewrite
    prod = _new_value(g, s_gemm, TensorType((1,), "float32"))
    halves = _new_value(g, s_out, TensorType((1,), "float32"))
    return [
        Node("StrassenInput", [a], [s], {}, s_in),
        Node("MatMul", [s, t], [prod], {}, s_gemm),
        Node("StrassenOutput", [prod], [halves], {"rows": rows}, s_out),
        Node("Reshape", [halves, shape], [y], {}, g.fresh_name(node.name + "/st_view")),
    ]


register_form(Form(
    name="strassen",
    label="Strassen",
    what="matmul",
    suffixes=SUFFIXES,
    eligible=eligible,
    rewrite=rewrite,
    recognizes=lambda n: n.op == "StrassenInput",
))
