"""QuantizeLinear and DequantizeLinear: per-tensor, per-axis and blocked scales and zero points.

Both are written by ``passes.lower_quantize`` as the operators they are made of, so they compute at
run time with those operators' kernels: the scale and zero point brought to a form that broadcasts
against x (a Reshape for per-axis, a Gather of each block's entry for blocked), then
``(float(x) - float(zero_point)) * scale`` to dequantize and
``Cast(Clip(Round(x / scale) + float(zero_point), lo, hi))`` to quantize (round half to even,
saturated to the integer type's range, as ONNX specifies). Kernels take the integer types (the
8/16-bit ones and the sub-byte int4/uint4/int2/uint2; int32 for DequantizeLinear) with float32
values and scales; float8/float4 quantized values are folded on constants only."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from autotune import te
from autotune.te import tensor as T
from autotune.te.expr import Expr, const

from ..ir import GraphError, Node, TensorType
from .base import ELEMWISE, OPS, REWRITE, Arg, Consts, Types, broadcast_shapes, norm_axis, register, same
from .elementwise import _cast_np, onnx_dtype
from .nn import matmul_shape
from .te_build import arg_dtype, nd_compute, read, shape_of

# quantized integer types whose kernels compile, with their ranges (QuantizeLinear saturates to them)
QUANT_RANGES = {
    "uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
    "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1),
}


def _check(node: Node) -> str | None:
    precision = int(node.attrs.get("precision", 0))
    if precision not in (0, 1):
        return f"precision={precision} (the division is compiled in float32)"
    return None


def granularity(node: Node, x: tuple[int, ...], p: tuple[int, ...]) -> tuple[str, int, int]:
    """How a scale / zero point of shape ``p`` maps onto x: ("tensor" | "axis" | "blocked", axis,
    block size); GraphError when the shape fits none."""
    block = int(node.attrs.get("block_size", 0))
    if int(np.prod(p, dtype=np.int64)) == 1 and len(p) <= 1:
        return "tensor", 0, 0
    axis = norm_axis(int(node.attrs.get("axis", 1)), len(x), node.op)
    if not block and len(p) == 1 and p[0] == x[axis]:
        return "axis", axis, 0
    if block > 0 and len(p) == len(x) and p[axis] == -(-x[axis] // block) and all(
        a == b for d, (a, b) in enumerate(zip(p, x)) if d != axis
    ):
        return "blocked", axis, block
    raise GraphError(
        f"{node.op} node {node.name!r}: a scale / zero point of shape {p} fits neither per-tensor, per-axis "
        f"(axis {node.attrs.get('axis', 1)}) nor blocked (block_size {block}) quantization of {x}"
    )


def broadcastable(node: Node, x: tuple[int, ...], value: np.ndarray) -> np.ndarray:
    """A scale / zero point as numpy broadcasts it against x (each block's entry repeated)."""
    kind, axis, block = granularity(node, x, value.shape)
    if kind == "tensor":
        return value.reshape(())
    if kind == "axis":
        return value.reshape([x[axis] if d == axis else 1 for d in range(len(x))])
    return np.take(value, np.arange(x[axis]) // block, axis=axis)


def output_dtype(node: Node, types: Types) -> str:
    """QuantizeLinear's output type: the zero point's, else the ``output_dtype`` attribute's, else uint8."""
    if len(types) > 2 and types[2] is not None:
        return types[2].dtype
    code = int(node.attrs.get("output_dtype", 0))
    return str(onnx_dtype(code)) if code else "uint8"


def _operands(node: Node, types: Types) -> tuple[TensorType, TensorType, TensorType | None]:
    x, scale = same(types[0]), same(types[1])
    zp = types[2] if len(types) > 2 else None
    kind = granularity(node, x.shape, scale.shape)
    if zp is not None and granularity(node, x.shape, zp.shape) != kind:
        raise GraphError(f"{node.op} node {node.name!r}: zero point {zp.shape}, scale {scale.shape}")
    return x, scale, zp


def _folded(node: Node, consts: Consts) -> bool:
    return all(c is not None for c, i in zip(consts, node.inputs) if i)


class _Dequantize:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, scale, zp = _operands(node, types)
        code = int(node.attrs.get("output_dtype", 0))
        out = str(onnx_dtype(code)) if code else scale.dtype
        if not _folded(node, consts):
            ok = x.dtype in QUANT_RANGES or x.dtype == "int32"
            if not ok or scale.dtype != "float32" or out != "float32":
                raise GraphError(
                    f"DequantizeLinear node {node.name!r}: {x.dtype} values with a {scale.dtype} scale to "
                    f"{out} are not compiled (integer values, float32 scales and results)"
                )
            if zp is not None and zp.dtype != x.dtype:
                raise GraphError(f"DequantizeLinear node {node.name!r}: zero point {zp.dtype}, x {x.dtype}")
        return [TensorType(x.shape, out)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, scale = np.asarray(xs[0]), np.asarray(xs[1])
        d = x.astype(np.float32)
        if len(xs) > 2 and xs[2] is not None and "float" not in str(x.dtype):
            d = d - broadcastable(node, x.shape, np.asarray(xs[2])).astype(np.float32)
        code = int(node.attrs.get("output_dtype", 0))
        out = onnx_dtype(code) if code else scale.dtype
        return [(d * broadcastable(node, x.shape, scale)).astype(out)]


class _Quantize:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        x, scale, _ = _operands(node, types)
        out = output_dtype(node, types)
        if not _folded(node, consts):
            if out not in QUANT_RANGES:
                raise GraphError(
                    f"QuantizeLinear node {node.name!r}: target type {out} is not compiled (kernels "
                    f"quantize to {', '.join(QUANT_RANGES)})"
                )
            if x.dtype != "float32" or scale.dtype != "float32":
                raise GraphError(
                    f"QuantizeLinear node {node.name!r}: input is {x.dtype} with a {scale.dtype} scale; "
                    "only float32 is compiled"
                )
        return [TensorType(x.shape, out)]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, scale = np.asarray(xs[0]), np.asarray(xs[1])
        zp = np.asarray(xs[2]) if len(xs) > 2 and xs[2] is not None else None
        code = int(node.attrs.get("output_dtype", 0)) or 2  # default uint8
        out = np.dtype(zp.dtype) if zp is not None else onnx_dtype(code)
        q = x / broadcastable(node, x.shape, scale)
        if out.name in QUANT_RANGES:
            with np.errstate(invalid="ignore"):
                qi = np.rint(q).astype(np.int32)
            if zp is not None:
                qi = qi + broadcastable(node, x.shape, zp).astype(np.int32)
            lo, hi = QUANT_RANGES[out.name]
            return [np.clip(qi, lo, hi).astype(out)]
        if "float4" in out.name and zp is not None:
            q = q + broadcastable(node, x.shape, zp).astype(np.float32)
        return [_cast_np(np.asarray(q), out, bool(node.attrs.get("saturate", 1)))]


register("DequantizeLinear", REWRITE, _check)(_Dequantize)
register("QuantizeLinear", REWRITE, _check)(_Quantize)


# --- integer matrix products and convolutions -------------------------------------------------------
# a product of 8-bit values less their zero points is computed as float32 MatMuls (Convs), exact while
# every partial sum is an integer below 2**24: K * 255 * 255 < 2**24, K <= 258 terms a sum. A longer
# sum is split along K into pieces of at most that many terms, each piece's exact value cast to int32
# and the pieces added in int32 (which holds up to 33025 terms).
EXACT_PRODUCT_TERMS = (1 << 24) // (255 * 255)
INT32_PRODUCT_TERMS = ((1 << 31) - 1) // (255 * 255)


def exact_pieces(units: int, terms_per_unit: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges of ``units`` (a product's K, a convolution's input channels, each adding
    ``terms_per_unit`` terms to a sum) in pieces of at most EXACT_PRODUCT_TERMS terms, of equal size
    rounded up to a multiple of 8 units where that fits."""
    cap = EXACT_PRODUCT_TERMS // terms_per_unit
    if cap < 1:
        raise ValueError(f"{terms_per_unit} terms a unit exceed {EXACT_PRODUCT_TERMS}")
    count = -(-units // cap)
    size = -(-units // count)
    if cap >= 8:
        size = min(cap - cap % 8, -(-size // 8) * 8)
    return [(lo, min(units, lo + size)) for lo in range(0, units, size)]


def _centred(x: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    a = x.astype(np.int32)
    return a if zp is None else a - zp.astype(np.int32)


def _integer_product(node: Node, types: Types, consts: Consts, a: int, b: int) -> tuple[int, ...]:
    """The shape of the product of inputs ``a`` and ``b`` (8-bit integers), and GraphError where a
    kernel could not compute it exactly."""
    ta, tb = same(types[a]), same(types[b])
    for t in (ta, tb):
        if t.dtype not in ("int8", "uint8"):
            raise GraphError(f"{node.op} node {node.name!r}: operand is {t.dtype}, not int8 / uint8")
    if not _folded(node, consts) and ta.shape[-1] > INT32_PRODUCT_TERMS:
        raise GraphError(
            f"{node.op} node {node.name!r}: a sum of {ta.shape[-1]} products (more than "
            f"{INT32_PRODUCT_TERMS}) may overflow int32; not compiled"
        )
    return matmul_shape(ta.shape, tb.shape, node.name)


def _integer_conv(node: Node, types: Types, consts: Consts, x: int, w: int) -> tuple[int, ...]:
    """The output shape of the convolution of inputs ``x`` and ``w`` (8-bit integers, NCHW), and
    GraphError where a kernel could not compute it exactly (see ``exact_pieces``)."""
    tx, tw = same(types[x]), same(types[w])
    for t in (tx, tw):
        if t.dtype not in ("int8", "uint8"):
            raise GraphError(f"{node.op} node {node.name!r}: operand is {t.dtype}, not int8 / uint8")
    conv = Node("Conv", [node.inputs[x], node.inputs[w]], node.outputs[:1], node.attrs, node.name)
    wide = [TensorType(t.shape, "float32") for t in (tx, tw)]
    (out,) = OPS["Conv"].infer(conv, wide, [None, None])
    window = int(np.prod(tw.shape[2:], dtype=np.int64))
    groups = int(node.attrs.get("group", 1))
    if not _folded(node, consts):
        if window > EXACT_PRODUCT_TERMS or (groups > 1 and window * tw.shape[1] > EXACT_PRODUCT_TERMS):
            raise GraphError(
                f"{node.op} node {node.name!r}: a window of {window} x {tw.shape[1]} channels "
                f"{'in each of ' + str(groups) + ' groups ' if groups > 1 else ''}is not computed exactly "
                f"in float32; not compiled")
        if window * tw.shape[1] > INT32_PRODUCT_TERMS:
            raise GraphError(f"{node.op} node {node.name!r}: sums of {window * tw.shape[1]} products may "
                             "overflow int32; not compiled")
    return out.shape


def _conv_np(node: Node, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The exact integer convolution of centred operands (in float64, then int64)."""
    conv = Node("Conv", ["x", "w"], ["y"], node.attrs, node.name)
    (y,) = OPS["Conv"].numpy(conv, [x.astype(np.float64), w.astype(np.float64)])
    return np.rint(y).astype(np.int64)


def _per_channel(v: np.ndarray | None, rank: int) -> np.ndarray | None:
    """A per-output-channel vector (or a scalar) shaped to broadcast over NCHW's channel axis."""
    if v is None or v.size == 1:
        return None if v is None else v.reshape(())
    return v.reshape([-1] + [1] * (rank - 1))


class _ConvInteger:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [TensorType(_integer_conv(node, types, consts, 0, 1), "int32")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, w = np.asarray(xs[0]), np.asarray(xs[1])
        zx = np.asarray(xs[2]) if len(xs) > 2 and xs[2] is not None else None
        zw = _per_channel(np.asarray(xs[3]), w.ndim) if len(xs) > 3 and xs[3] is not None else None
        return [_conv_np(node, _centred(x, zx), _centred(w, zw)).astype(np.int32)]


class _QLinearConv:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [_requantized(node, types, consts, _integer_conv(node, types, consts, 0, 3))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = _qlinear_operands(xs)
        rank = w.ndim - 1
        acc = _conv_np(node, _centred(x, x_zp), _centred(w, _per_channel(w_zp, w.ndim)))
        if len(xs) > 8 and xs[8] is not None:
            acc = acc + _per_channel(np.asarray(xs[8]), rank).astype(np.int64)
        m = x_s * _per_channel(w_s, rank) / y_s
        return [requantize_np(acc, m, y_zp, (y_zp if y_zp is not None else x).dtype)]


class _MatMulInteger:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [TensorType(_integer_product(node, types, consts, 0, 1), "int32")]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        zp = [np.asarray(xs[i]) if len(xs) > i and xs[i] is not None else None for i in (2, 3)]
        return [np.matmul(_centred(np.asarray(xs[0]), zp[0]), _centred(np.asarray(xs[1]), zp[1]))]


def _qlinear_operands(xs: list[np.ndarray]) -> tuple[np.ndarray | None, ...]:
    """QLinearMatMul's / QLinearConv's first eight operands as arrays (None where absent): x, its
    scale and zero point, the weight, its scale and zero point, the output's scale and zero point."""
    return tuple(np.asarray(xs[i]) if len(xs) > i and xs[i] is not None else None for i in range(8))


def _requantized(node: Node, types: Types, consts: Consts, shape: tuple[int, ...]) -> TensorType:
    """The type of QLinearMatMul's / QLinearConv's output (the output zero point's, else x's), their
    scales (inputs 1, 4, 6) and bias (input 8) checked."""
    if not _folded(node, consts):
        for i in (1, 4, 6):
            if same(types[i]).dtype != "float32":
                raise GraphError(f"{node.op} node {node.name!r}: a {types[i].dtype} scale; float32 is "
                                 "compiled")
        if len(types) > 8 and types[8] is not None and types[8].dtype != "int32":
            raise GraphError(f"{node.op} node {node.name!r}: a {types[8].dtype} bias; int32 is compiled")
    zp = types[7] if len(types) > 7 else None
    return TensorType(shape, (zp or same(types[0])).dtype)


class _QLinearMatMul:
    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        return [_requantized(node, types, consts, _integer_product(node, types, consts, 0, 3))]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = _qlinear_operands(xs)
        c = np.matmul(_centred(a, a_zp), _centred(b, b_zp))
        out = (y_zp if y_zp is not None else a).dtype
        return [requantize_np(c, a_s * b_s / y_s, y_zp, out)]


def requantize_np(c: np.ndarray, m: np.ndarray, zp: np.ndarray | None, out: np.dtype) -> np.ndarray:
    """``saturate(rint(c * m) + zp)`` in float64 (onnx's arithmetic: an integer times a float32)."""
    d = np.asarray(c, np.float64) * np.asarray(m, np.float64)
    if zp is not None:
        d = d + np.asarray(zp, np.float64)
    info = np.iinfo(out)
    return np.clip(np.rint(d), info.min, info.max).astype(out)


class _Requantize:
    """``saturate(rint(c * m) + zp)`` to the integer type ``to``, in float64 (QLinearMatMul's output
    stage: c an exact integer product, m the combined scale)."""

    @staticmethod
    def infer(node: Node, types: Types, consts: Consts) -> list[TensorType]:
        shape = broadcast_shapes(*[t.shape for t in types if t is not None])
        return [TensorType(shape, node.attrs["to"])]

    @staticmethod
    def numpy(node: Node, xs: list[np.ndarray]) -> list[np.ndarray]:
        zp = np.asarray(xs[2]) if len(xs) > 2 and xs[2] is not None else None
        return [requantize_np(np.asarray(xs[0]), np.asarray(xs[1]), zp, np.dtype(node.attrs["to"]))]

    @staticmethod
    def te(attrs: dict, args: Sequence[Arg], name: str) -> te.Tensor:
        ops = [a for a in args if a is not None]
        shape = broadcast_shapes(*[shape_of(a) for a in ops])
        to = attrs["to"]
        lo, hi = (float(v) for v in (np.iinfo(to).min, np.iinfo(to).max))

        def body(i: list[Expr]) -> Expr:
            wide = [T.cast("float64", read(a, i, shape, arg_dtype(a))) for a in ops]
            d = wide[0] * wide[1]
            if len(wide) > 2:
                d = d + wide[2]
            r = T.min(T.max(T.nearbyint(d), const(lo, "float64")), const(hi, "float64"))
            return T.cast(to, r)

        return nd_compute(shape, body, name, "elementwise")


# the operators passes.lower_quantize writes as others
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "MatMulInteger", "QLinearMatMul", "ConvInteger",
                 "QLinearConv")

register("MatMulInteger", REWRITE)(_MatMulInteger)
register("QLinearMatMul", REWRITE)(_QLinearMatMul)
register("ConvInteger", REWRITE)(_ConvInteger)
register("QLinearConv", REWRITE)(_QLinearConv)
register("Requantize", ELEMWISE, internal=True)(_Requantize)
