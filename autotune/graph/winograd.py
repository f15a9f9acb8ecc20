"""Winograd convolution F(m x m, 3 x 3) for 3x3 convolutions of stride 1 or 2 (Lavin & Gray, 2015).

A convolution ``Y = conv(X, W)`` (NHWC, weight HWIO) is rewritten into three kernels:

    V = WinogradInput(X)        V[xi, nu, p, c] = sum_ij Bt[xi, i] Bt[nu, j] tile_p(X)[i, j, c]
    M = MatMul(V, U)            a*a independent GEMMs [P, C] x [C, K] (U a model constant)
    Y = WinogradOutput(M)       Y[n, h, w, k]  = sum_{xi,nu} At[h%m, xi] At[w%m, nu] M[xi, nu, p, k]

with ``P = N * ceil(OH/m) * ceil(OW/m)`` output tiles of m x m, input tiles of ``a x a`` taken
every ``m * stride`` pixels, and the weight transformed once at compile time,
``U[xi, nu] = G W G^T``. Stride 1: ``a = m + 2`` (the 1-d F(m, 3)). Stride 2: ``a = 2m + 1``;
in one dimension the even input pixels meet taps 0 and 2 (a 1-d F(m, 2), m + 1 products) and the
odd pixels tap 1 (m products), so the matrices are F(m, 2)'s beside an identity. The GEMM does
``a*a / (m*m)`` multiply-adds per output and input channel where the direct convolution does 9:
4 (m=2) and 2.25 (m=4) at stride 1, 6.25 and 5.06 at stride 2; the transforms cost ``a*a``
multiply-adds per element of V, small next to the GEMM's ``K`` per element once the layer has more
than a few dozen output channels. The transformed weight is ``a*a / 9`` times the weight's size.

Both transforms are ordinary tensor expressions (each an elementwise kernel vectorized over the
channels, the output transform taking the conv's bias / residual / ReLU epilogue), and the GEMM
is the compiler's batched MatMul with a constant operand, so all three are tuned like any task.
The transform coefficients are literals in the expression (a ``select`` over the tile position),
so no table is read at run time.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, all_of, as_expr

from .forms import Form, coefficient, register_form, weighted
from .ir import Graph, GraphError, Node, TensorType
from .ops import REDUCE, Arg, Consts, Types, conv_params, float_only, is_uniform_conv, register, same

TILE_SIZES = (2, 4)  # m: outputs per tile side
# the forms tried by default (tune.py --model, compile_model): both tile sizes, on either target
# (measured on ResNet-18, docs/graph.md: on the CPU F(4x4) fastest in its first two stages, F(2x2)
# in the last two; on the H200 the module 1.8x faster than with direct convolutions only)
DEFAULT_SIZES = {"cpu": (2, 4), "cuda": (2, 4)}


def default_sizes(kind: str, sizes: int | Sequence[int] | None = None) -> tuple[int, ...]:
    """``sizes`` as a tuple (one tile size m, 0 for none, or several), or the target kind's default
    when None."""
    if sizes is None:
        return tuple(DEFAULT_SIZES.get(kind, ()))
    if isinstance(sizes, int):
        return (sizes,) if sizes else ()
    return tuple(sizes)

# Transform matrices (the standard choices of interpolation points: 0, +-1 for m=2; 0, +-1, +-2
# for m=4; each plus the point at infinity).
_MATRICES: dict[int, tuple[list[list[float]], list[list[float]], list[list[float]]]] = {
    2: (
        [[1, 1, 1, 0], [0, 1, -1, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    ),
    4: (
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
    ),
}


# F(m, 2) (the even pixels of a stride-2 tile), points 0, -1 for m=2 and 0, 1, -1, 2 for m=4, each
# plus the point at infinity
_MATRICES_R2: dict[int, tuple[list[list[float]], list[list[float]], list[list[float]]]] = {
    2: ([[1, 1, 0], [0, -1, 1]], [[1, 0], [-1, 1], [0, 1]], [[1, 1, 0], [0, 1, 0], [0, 1, 1]]),
    4: (
        [[1, 1, 1, 1, 0], [0, 1, -1, 2, 0], [0, 1, 1, 4, 0], [0, 1, -1, 8, 1]],
        [[1 / 2, 0], [-1 / 2, -1 / 2], [-1 / 6, 1 / 6], [1 / 6, 1 / 3], [0, 1]],
        [[2, -1, -2, 1, 0], [0, -2, -1, 1, 0], [0, 2, -3, 1, 0], [0, -1, 0, 1, 0], [0, 2, -1, -2, 1]],
    ),
}
STRIDES = (1, 2)
# fewer input channels than this (an image's 1-4 at a model's stem) leave the product too short a
# reduction to pay for writing a*a/(m*m) times the output: such convolutions stay direct
MIN_IN_CHANNELS = 8


def tile_side(m: int, stride: int = 1) -> int:
    """``a``: the input tile's side (and the number of products per dimension) of F(m, 3) at
    ``stride``."""
    return stride * (m - 1) + 3


def matrices(m: int, stride: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(At, G, Bt)`` of the 1-d F(m, 3) at ``stride`` as float64: At is m x a, G is a x 3, Bt is
    a x a. Stride 2 puts F(m, 2) on the even pixels (taps 0 and 2) first, then one product per
    output of its odd pixel and tap 1."""
    if m not in _MATRICES:
        raise GraphError(f"Winograd tile size {m} is not supported; valid: {', '.join(map(str, TILE_SIZES))}")
    if stride not in STRIDES:
        raise GraphError(f"Winograd stride {stride} is not supported; valid: 1, 2")
    if stride == 1:
        return tuple(np.array(x, dtype=np.float64) for x in _MATRICES[m])  # type: ignore[return-value]
    at_e, g_e, bt_e = (np.array(x, dtype=np.float64) for x in _MATRICES_R2[m])
    a = tile_side(m, 2)
    at, g, bt = np.zeros((m, a)), np.zeros((a, 3)), np.zeros((a, a))
    at[:, : m + 1], at[:, m + 1 :] = at_e, np.eye(m)
    g[: m + 1, 0], g[: m + 1, 2], g[m + 1 :, 1] = g_e[:, 0], g_e[:, 1], 1.0
    bt[: m + 1, 0::2] = bt_e
    bt[m + 1 :, 1::2] = np.eye(m)
    return at, g, bt


def transform_weight(w: np.ndarray, m: int, stride: int = 1) -> np.ndarray:
    """``U[xi, nu, c, k] = (G W[:, :, c, k] G^T)[xi, nu]`` of an HWIO 3x3 weight, in float64 then
    cast back to the weight's dtype."""
    _, g, _ = matrices(m, stride)
    u = np.einsum("xi,yj,ijck->xyck", g, g, w.astype(np.float64))
    return np.ascontiguousarray(u.astype(w.dtype))


def tiles(out_h: int, out_w: int, m: int) -> tuple[int, int]:
    return math.ceil(out_h / m), math.ceil(out_w / m)


# --- graph operators -----------------------------------------------------------------------------
def _geometry(attrs: dict) -> tuple[int, int, int, int, int, int, int]:
    """(m, stride, pad, out_h, out_w, tile rows, tile columns) of a transform operator's
    attributes (``stride`` absent: 1)."""
    m, oh, ow = int(attrs["m"]), int(attrs["out_h"]), int(attrs["out_w"])
    return (m, int(attrs.get("stride", 1)), int(attrs.get("pad", 1)), oh, ow, *tiles(oh, ow, m))


@register("WinogradInput", REDUCE, internal=True)
class _WinogradInput:
    """X [N, H, W, C] -> V [a, a, N*TH*TW, C]; attrs m, pad, out_h, out_w."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        x = same(types[0])
        m, st, _, _, _, th, tw = _geometry(node.attrs)
        a = tile_side(m, st)
        return [TensorType((a, a, x.shape[0] * th * tw, x.shape[3]), x.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x = xs[0]
        m, st, pad, _, _, th, tw = _geometry(node.attrs)
        _, _, bt = matrices(m, st)
        a, step = tile_side(m, st), m * st
        n, h, w, c = x.shape
        ph, pw = (th - 1) * step + a, (tw - 1) * step + a  # the padded extent the tiles cover
        xp = np.zeros((n, ph, pw, c), dtype=x.dtype)
        hh, ww = min(h, ph - pad), min(w, pw - pad)
        xp[:, pad : pad + hh, pad : pad + ww] = x[:, :hh, :ww]
        d = np.empty((n, th, tw, a, a, c), dtype=x.dtype)
        for i in range(a):
            for j in range(a):
                d[:, :, :, i, j] = xp[:, i : i + th * step : step, j : j + tw * step : step]
        v = np.einsum("xi,yj,ntsijc->xyntsc", bt.astype(x.dtype), bt.astype(x.dtype), d)
        return [np.ascontiguousarray(v.reshape(a, a, n * th * tw, c))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return input_transform(attrs, args[0], name)


@register("WinogradOutput", REDUCE, internal=True)
class _WinogradOutput:
    """M [a, a, N*TH*TW, K] -> Y [N, out_h, out_w, K]; attrs m, out_h, out_w."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        float_only(node, types)
        mm = same(types[0])
        m, st, _, oh, ow, th, tw = _geometry(node.attrs)
        if len(mm.shape) != 4 or mm.shape[0] != tile_side(m, st) or mm.shape[2] % (th * tw):
            raise GraphError(f"WinogradOutput node {node.name!r}: input {mm.shape} does not fit m={m}, "
                             f"stride {st}")
        return [TensorType((mm.shape[2] // (th * tw), oh, ow, mm.shape[3]), mm.dtype)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        mm = xs[0]
        m, st, _, oh, ow, th, tw = _geometry(node.attrs)
        at, _, _ = matrices(m, st)
        a, k = tile_side(m, st), mm.shape[3]
        n = mm.shape[2] // (th * tw)
        y = np.einsum("ux,vy,xyntsk->ntusvk", at.astype(mm.dtype), at.astype(mm.dtype),
                      mm.reshape(a, a, n, th, tw, k))
        y = y.reshape(n, th * m, tw * m, k)[:, :oh, :ow]
        return [np.ascontiguousarray(y)]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        assert isinstance(args[0], te.Tensor)
        return output_transform(attrs, args[0], name)


# --- tensor expressions --------------------------------------------------------------------------
def _tile_index(p: Expr, n_batch: int, th: int, tw: int) -> tuple[Expr, Expr, Expr]:
    """(n, tile row, tile column) of the flat tile index ``p``."""
    per = th * tw
    n = as_expr(0) if n_batch == 1 else p // per
    t = p if n_batch == 1 else p % per
    return n, t // tw, t % tw


def input_transform(attrs: dict, x: te.Tensor, name: str) -> te.Tensor:
    m, st, pad, _, _, th, tw = _geometry(attrs)
    _, _, bt = matrices(m, st)
    a, step = tile_side(m, st), m * st
    n_batch, h, w, c = x.shape

    def body(xi: Expr, nu: Expr, p: Expr, ch: Expr) -> Expr:
        n, ty, tx = _tile_index(p, n_batch, th, tw)

        def d(i: int, j: int) -> Expr:
            y, xx = ty * step + (i - pad), tx * step + (j - pad)
            return T.select(all_of(y >= 0, y < h, xx >= 0, xx < w), x[n, y, xx, ch], 0.0)

        rows = [weighted([(coefficient(bt, nu, j), d(i, j)) for j in range(a)]) for i in range(a)]
        return weighted([(coefficient(bt, xi, i), row) for i, row in enumerate(rows)])

    return T.compute((a, a, n_batch * th * tw, c), body, name=name, tag="winograd_input")


def output_transform(attrs: dict, mm: te.Tensor, name: str) -> te.Tensor:
    m, st, _, oh, ow, th, tw = _geometry(attrs)
    at, _, _ = matrices(m, st)
    a, k = tile_side(m, st), mm.shape[3]
    n_batch = mm.shape[2] // (th * tw)

    def body(n: Expr, y: Expr, xx: Expr, ch: Expr) -> Expr:
        p = (n * th + y // m) * tw + xx // m
        u, v = y % m, xx % m
        rows = [
            (coefficient(at, u, xi),
             weighted([(coefficient(at, v, nu), mm[xi, nu, p, ch]) for nu in range(a)]))
            for xi in range(a)
        ]
        return weighted(rows)

    return T.compute((n_batch, oh, ow, k), body, name=name, tag="winograd_output")


# --- the graph pass ------------------------------------------------------------------------------
def eligible(g: Graph, conv: Node) -> bool:
    """An NHWC 3x3 convolution (not an exact integer one) with stride 1 or 2 on both axes, no
    dilation, one group, at least ``MIN_IN_CHANNELS`` input channels, symmetric padding <= 2 and a
    constant weight (HWIO)."""
    if conv.op != "Conv" or conv.attrs.get("layout") != "NHWC" or conv.inputs[1] not in g.consts:
        return False
    if conv.attrs.get("exact"):  # an integer convolution (passes.exact_product): no fractions
        return False
    if not is_uniform_conv(conv):
        return False
    p = conv_params(conv)
    pads = list(conv.attrs.get("pads", [0, 0, 0, 0]))
    w = g.consts[conv.inputs[1]]
    return (
        w.shape[:2] == (3, 3)
        and w.shape[2] >= MIN_IN_CHANNELS
        and p["stride"] in STRIDES
        and p["dilation"] == 1
        and p["groups"] == 1
        and len(set(pads)) == 1
        and pads[0] <= 2
    )


SUFFIXES = ("/wg_in", "/wg_gemm", "/wg_out")  # node names of a rewritten conv: its name + these


def rewrite(g: Graph, conv: Node, m: int) -> list[Node]:
    """``conv`` as WinogradInput -> MatMul -> WinogradOutput (+ bias Add), nodes named
    ``conv.name + SUFFIXES[i]``; its transformed weight added to ``g``."""
    from .passes import _add_const, _new_value

    x, wname = conv.inputs[0], conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    y = conv.outputs[0]
    _, oh, ow, _ = g.types[y].shape
    p = conv_params(conv)
    attrs = {"m": m, "pad": p["pad"], "out_h": oh, "out_w": ow}
    if p["stride"] != 1:  # stride 1 is the attribute's absence (the tasks of stride 1 keep their keys)
        attrs["stride"] = p["stride"]
    s_in, s_gemm, s_out = (conv.name + s for s in SUFFIXES)
    u = _add_const(g, wname + f"_winograd{m}", transform_weight(g.consts[wname], m, p["stride"]))
    v = _new_value(g, s_in, TensorType((1,), "float32"))  # types are inferred after the rewrite
    mm = _new_value(g, s_gemm, TensorType((1,), "float32"))
    out = [Node("WinogradInput", [x], [v], dict(attrs), s_in), Node("MatMul", [v, u], [mm], {}, s_gemm)]
    raw = y if bias is None else _new_value(g, s_out, TensorType((1,), "float32"))
    out.append(Node("WinogradOutput", [mm], [raw], dict(attrs), s_out))
    if bias is not None:
        out.append(Node("Add", [raw, bias], [y], {}, g.fresh_name(conv.name + "/bias")))
    return out


def _form(m: int) -> Form:
    return Form(
        name=f"winograd{m}",
        label=f"F({m}x{m},3x3)",
        what="conv",
        suffixes=SUFFIXES,
        eligible=eligible,
        rewrite=lambda g, conv: rewrite(g, conv, m),
        recognizes=lambda n: n.op == "WinogradInput" and int(n.attrs["m"]) == m,
    )


for _m in TILE_SIZES:
    register_form(_form(_m))
