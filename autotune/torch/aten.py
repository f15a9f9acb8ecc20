"""Core ATen operators (what ``torch.export`` leaves after its decompositions) as nodes of the graph
IR, named as the ONNX operator definitions of :mod:`autotune.graph.ops`: a subgraph imported from
PyTorch and the same subgraph imported from ONNX become the same tasks with the same database keys.

An ATen overload that is one operator on the same operands is declared by that operator's definition
(``OpDef.aten``: its torch mapping, beside its inference, numpy form and te builder) and converted
here by the form declared; ATen operators that become several operators (``linear``, ``convolution``,
``native_layer_norm``, views, indexing) have converters of their own below. Each entry of
``CONVERTERS`` maps one ATen overload to a function ``(cx, node) -> value names`` that
emits IR nodes through an :class:`Emitter`; python scalars become constants of the operation's
element type, operands of another element type are cast first (PyTorch's type promotion made
explicit). A node whose converter is missing, or whose tensors have an element type no kernel holds,
is not supported: it runs in eager PyTorch (see ``partition``).
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np
import torch

from autotune.graph.ir import GraphError, Node, TensorType, contiguous
from autotune.graph.ops import KERNEL_DTYPES, OPS

aten = torch.ops.aten

# 16-bit floats are computed in float32 (as a 16-bit ONNX model is, see ``autotune.graph.half``): their
# values are IR float32 values; a region takes and returns them in their own type (``partition``)
WIDENED = (torch.float16, torch.bfloat16)
DTYPES = {torch.float32: "float32", torch.float16: "float32", torch.bfloat16: "float32",
          torch.int64: "int64", torch.int32: "int32", torch.bool: "bool"}


def np_dtype(t: torch.dtype) -> str:
    """The IR element type of a torch dtype; GraphError for one no kernel holds."""
    if t not in DTYPES:
        raise GraphError(f"element type {t} is not compiled (kernels hold {', '.join(KERNEL_DTYPES)})")
    return DTYPES[t]


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a numpy array (a view where numpy holds its type; 16-bit floats widened to
    float32, exactly)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype in WIDENED else t).numpy()


def tensor_vals(node: torch.fx.Node) -> list[Any]:
    """The fake tensors a node produces (its ``meta['val']``, flattened)."""
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        return [v for v in val if isinstance(v, torch.Tensor)]
    return [val] if isinstance(val, torch.Tensor) else []


def static_type(val: Any) -> TensorType:
    """The IR type of a (fake) tensor; GraphError for a symbolic dim or an uncompiled dtype."""
    shape = []
    for d in val.shape:
        if not isinstance(d, int):
            raise GraphError(f"dynamic dim {d} (shapes are specialized per call; see autotune.torch)")
        shape.append(int(d))
    return TensorType(tuple(shape), np_dtype(val.dtype))


class Emitter:
    """Collects the IR nodes, constants and input types of one region while its ATen nodes convert."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self.names: dict[torch.fx.Node, list[str]] = {}
        self._count = 0
        self.current = ""

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}__{self._count}"

    def const(self, value: Any, dtype: str = "int64") -> str:
        arr = contiguous(np.asarray(value, dtype=dtype))  # (a 0-d value stays 0-d)
        name = self.fresh(f"{self.current}_c")
        self.consts[name] = arr
        return name

    def emit(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh(self.current) for _ in range(n_out)]
        # float attributes as ONNX holds them (float32), so both frontends give the same keys
        attrs = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in attrs.items()}
        self.nodes.append(Node(op, list(inputs), outs, attrs, self.fresh(f"{self.current}:{op}")))
        return outs

    def one(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        return self.emit(op, inputs, 1, **attrs)[0]

    def value(self, arg: Any, dtype: str = "float32") -> str:
        """The IR value of an operand: a converted fx node, or a python scalar as a 0-d constant."""
        if isinstance(arg, torch.fx.Node):
            names = self.names[arg]
            if len(names) != 1 or not names[0]:
                raise GraphError(f"{arg.name} has several outputs; only getitem reads them")
            return names[0]
        if isinstance(arg, (bool, int, float)):
            return self.const(arg, dtype)
        raise GraphError(f"operand {arg!r} is not a tensor or a number")

    def typed(self, arg: Any, dtype: str) -> str:
        """``value(arg)`` cast to ``dtype`` when it holds another element type."""
        name = self.value(arg, dtype)
        if isinstance(arg, torch.fx.Node) and np_dtype(tensor_vals(arg)[0].dtype) != dtype:
            return self.one("Cast", [name], to=_ONNX_TYPES[dtype])
        return name


_ONNX_TYPES = {"float32": 1, "int32": 6, "int64": 7, "bool": 9}

Converter = Callable[[Emitter, torch.fx.Node], "str | list[str]"]
CONVERTERS: dict[Any, Converter] = {}


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    def wrap(fn: Converter) -> Converter:
        for t in targets:
            CONVERTERS[t] = fn
        return fn

    return wrap


def out_dtype(node: torch.fx.Node) -> str:
    return np_dtype(tensor_vals(node)[0].dtype)


def out_shape(node: torch.fx.Node) -> list[int]:
    return [int(d) for d in tensor_vals(node)[0].shape]


def arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    """Positional argument ``i`` (or keyword ``name``) of an fx node."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def rank_of(node: Any) -> int:
    return len(tensor_vals(node)[0].shape)


def _declared() -> dict[Any, tuple[str, str]]:
    """The ATen overloads the operator definitions declare as themselves (``OpDef.aten``):
    ``{aten.relu.default: ("Relu", "unary")}``, a negation as ``("!Equal", "compare")``."""
    out = {}
    for op in OPS.values():
        for overload, form in op.aten.items():
            packet, _, name = overload.partition(".")
            negate = "!" if form.startswith("!") else ""
            out[getattr(getattr(aten, packet), name)] = (negate + op.name, form.lstrip("!"))
    return out


_ELEMENTWISE = _declared()


def _kind(kind: str) -> dict[Any, str]:
    return {k: op for k, (op, kd) in _ELEMENTWISE.items() if kd == kind}


# --- elementwise ------------------------------------------------------------------------------------
_UNARY = _kind("unary")


def _unary(cx: Emitter, node: torch.fx.Node) -> str:
    op = _UNARY[node.target]
    if op == "Not":
        return cx.one(op, [cx.typed(node.args[0], "bool")])
    if op in ("IsNaN", "IsInf"):
        return cx.one(op, [cx.value(node.args[0])])
    return cx.one(op, [cx.typed(node.args[0], out_dtype(node))])


for _t in _UNARY:
    CONVERTERS[_t] = _unary


@converts(aten.rsqrt.default)
def _rsqrt(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Reciprocal", [cx.one("Sqrt", [cx.typed(node.args[0], "float32")])])


_BINARY = _kind("binary")
# arithmetic on truths (PyTorch computes it in bool): a product is And, a sum or maximum Or
_ON_BOOL = {"Mul": "And", "Min": "And", "Add": "Or", "Max": "Or"}


def _binary(cx: Emitter, node: torch.fx.Node) -> str:
    op = _BINARY[node.target]
    dt = out_dtype(node)
    if dt == "bool" and op in _ON_BOOL:
        return cx.one(_ON_BOOL[op], [cx.typed(node.args[0], dt), cx.typed(node.args[1], dt)])
    if op in ("And", "Or", "Xor") and dt != "bool":
        raise GraphError(f"{node.target} on {dt} (bitwise, not logical)")
    a, b = node.args[0], node.args[1]
    if node.target in (aten.rsub.Scalar, aten.rsub.Tensor):
        a, b = b, a
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    if alpha != 1:
        b = cx.one("Mul", [cx.typed(b, dt), cx.const(alpha, dt)])  # type: ignore[assignment]
        return cx.one(op, [cx.typed(a, dt), b])
    if op == "Pow":
        return cx.one(op, [cx.typed(a, dt), cx.typed(b, dt)])
    if op == "Mod":
        return cx.one(op, [cx.typed(a, dt), cx.typed(b, dt)], fmod=0)
    return cx.one(op, [cx.typed(a, dt), cx.typed(b, dt)])


for _t in _BINARY:
    CONVERTERS[_t] = _binary


@converts(aten.fmod.Scalar, aten.fmod.Tensor)
def _fmod(cx: Emitter, node: torch.fx.Node) -> str:
    dt = out_dtype(node)
    return cx.one("Mod", [cx.typed(node.args[0], dt), cx.typed(node.args[1], dt)], fmod=1)


@converts(aten.div.Tensor_mode)
def _div_mode(cx: Emitter, node: torch.fx.Node) -> str:
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    dt = out_dtype(node)
    q = cx.one("Div", [cx.typed(node.args[0], "float32"), cx.typed(node.args[1], "float32")])
    if mode is None:
        return q
    if mode == "floor":
        q = cx.one("Floor", [q])
    elif dt == "float32":
        q = cx.one("Mul", [cx.one("Sign", [q]), cx.one("Floor", [cx.one("Abs", [q])])])
    return q if dt == "float32" else cx.one("Cast", [q], to=_ONNX_TYPES[dt])


_COMPARE = _kind("compare")


def _compare(cx: Emitter, node: torch.fx.Node) -> str:
    op = _COMPARE[node.target].lstrip("!")
    negate = _COMPARE[node.target].startswith("!")
    tensors = [a for a in node.args[:2] if isinstance(a, torch.fx.Node)]
    dts = [tensor_vals(a)[0].dtype for a in tensors]
    common = dts[0] if len(dts) == 1 else torch.promote_types(dts[0], dts[1])
    if any(isinstance(a, float) for a in node.args[:2]) and not common.is_floating_point:
        common = torch.float32
    dt = np_dtype(common)
    out = cx.one(op, [cx.typed(node.args[0], dt), cx.typed(node.args[1], dt)])
    return cx.one("Not", [out]) if negate else out


for _t in _COMPARE:
    CONVERTERS[_t] = _compare


@converts(aten.where.self)
def _where(cx: Emitter, node: torch.fx.Node) -> str:
    dt = out_dtype(node)
    return cx.one(
        "Where", [cx.typed(node.args[0], "bool"), cx.typed(node.args[1], dt), cx.typed(node.args[2], dt)]
    )


@converts(aten.clamp.default, aten.clamp.Tensor, aten.hardtanh.default)
def _clamp(cx: Emitter, node: torch.fx.Node) -> str:
    dt = out_dtype(node)
    default = (-1.0, 1.0) if node.target == aten.hardtanh.default else (None, None)
    lo = arg(node, 1, "min_val" if node.target == aten.hardtanh.default else "min", default[0])
    hi = arg(node, 2, "max_val" if node.target == aten.hardtanh.default else "max", default[1])
    ins = [
        cx.typed(node.args[0], dt),
        "" if lo is None else cx.typed(lo, dt),
        "" if hi is None else cx.typed(hi, dt),
    ]
    while ins[-1] == "":
        ins.pop()
    return cx.one("Clip", ins)


@converts(aten.gelu.default)
def _gelu(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one(
        "Gelu", [cx.value(node.args[0])], approximate=arg(node, 1, "approximate", "none")
    )


@converts(aten.silu.default)
def _silu(cx: Emitter, node: torch.fx.Node) -> str:
    x = cx.value(node.args[0])
    return cx.one("Mul", [x, cx.one("Sigmoid", [x])])


@converts(aten.hardswish.default)
def _hardswish(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("HardSwish", [cx.value(node.args[0])])


@converts(aten.hardsigmoid.default)
def _hardsigmoid(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("HardSigmoid", [cx.value(node.args[0])], alpha=1.0 / 6, beta=0.5)


@converts(aten.leaky_relu.default)
def _leaky(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("LeakyRelu", [cx.value(node.args[0])], alpha=float(arg(node, 1, "negative_slope", 0.01)))


@converts(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def _copy(cx: Emitter, node: torch.fx.Node) -> str:
    x = node.args[0]
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != tensor_vals(x)[0].device.type:
        raise GraphError(f"a copy to {device}")
    dt = out_dtype(node)
    if np_dtype(tensor_vals(x)[0].dtype) != dt:
        return cx.one("Cast", [cx.value(x)], to=_ONNX_TYPES[dt])
    return cx.one("Identity", [cx.value(x)])


# --- linear algebra and convolution -----------------------------------------------------------------
@converts(aten.mm.default, aten.bmm.default)
def _mm(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("MatMul", [cx.value(node.args[0]), cx.value(node.args[1])])


@converts(aten.matmul.default)
def _matmul(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("MatMul", [cx.value(node.args[0]), cx.value(node.args[1])])


@converts(aten.linear.default)
def _linear(cx: Emitter, node: torch.fx.Node) -> str:
    """As PyTorch's ONNX exporter writes ``nn.Linear``: ``Add(bias, MatMul(x, W^T))``, and on a
    matrix a ``Gemm``, which ``canonicalize_gemm`` makes ``Add(MatMul(x, W^T), bias)``."""
    w = cx.one("Transpose", [cx.value(node.args[1])], perm=[1, 0])
    y = cx.one("MatMul", [cx.value(node.args[0]), w])
    bias = arg(node, 2, "bias")
    if bias is None:
        return y
    return cx.one("Add", [y, cx.value(bias)] if rank_of(node) == 2 else [cx.value(bias), y])


@converts(aten.addmm.default)
def _addmm(cx: Emitter, node: torch.fx.Node) -> str:
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    y = cx.one("MatMul", [cx.value(node.args[1]), cx.value(node.args[2])])
    if alpha != 1:
        y = cx.one("Mul", [y, cx.const(alpha, "float32")])
    bias = cx.value(node.args[0])
    if beta != 1:
        bias = cx.one("Mul", [bias, cx.const(beta, "float32")])
    return cx.one("Add", [y, bias])


@converts(aten.convolution.default)
def _conv(cx: Emitter, node: torch.fx.Node) -> str:
    x, w, b, stride, padding, dilation, transposed, out_pad, groups = node.args[:9]
    ins = [cx.value(x), cx.value(w)] + ([cx.value(b)] if b is not None else [])
    k = rank_of(w) - 2

    def per_dim(values: Sequence[int], what: str) -> list[int]:
        """One value per spatial dim (ATen writes one value for all of them as a list of one)."""
        values = [int(v) for v in values]
        if len(values) == 1:
            return values * k
        if len(values) != k:
            raise GraphError(f"convolution {what} {values} for {k} spatial dims")
        return values

    attrs = dict(
        strides=per_dim(stride, "stride"),
        pads=per_dim(padding, "padding") * 2,
        dilations=per_dim(dilation, "dilation"),
        group=int(groups),
        kernel_shape=list(tensor_vals(w)[0].shape[2:]),
    )
    if transposed:
        return cx.one("ConvTranspose", ins, output_padding=per_dim(out_pad, "output padding"), **attrs)
    return cx.one("Conv", ins, **attrs)


@converts(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(cx: Emitter, node: torch.fx.Node) -> list[str]:
    x, w, b, mean, var, _momentum, eps = node.args[:7]
    c = int(tensor_vals(x)[0].shape[1])
    scale = cx.value(w) if w is not None else cx.const(np.ones(c), "float32")
    bias = cx.value(b) if b is not None else cx.const(np.zeros(c), "float32")
    out = cx.one(
        "BatchNormalization", [cx.value(x), scale, bias, cx.value(mean), cx.value(var)], epsilon=float(eps)
    )
    return [out, "", ""]


@converts(aten.native_group_norm.default)
def _group_norm(cx: Emitter, node: torch.fx.Node) -> list[str]:
    x, w, b = node.args[:3]
    c, groups, eps = int(node.args[4]), int(node.args[6]), float(node.args[7])
    scale = cx.value(w) if w is not None else cx.const(np.ones(c), "float32")
    bias = cx.value(b) if b is not None else cx.const(np.zeros(c), "float32")
    out = cx.one("GroupNormalization", [cx.value(x), scale, bias], num_groups=groups, epsilon=eps)
    return [out, "", ""]


@converts(aten.native_layer_norm.default)
def _layer_norm(cx: Emitter, node: torch.fx.Node) -> list[str]:
    x, shape, w, b, eps = node.args[:5]
    scale = cx.value(w) if w is not None else cx.const(np.ones(list(shape)), "float32")
    ins = [cx.value(x), scale] + ([cx.value(b)] if b is not None else [])
    out = cx.one("LayerNormalization", ins, axis=-len(shape), epsilon=float(eps))
    return [out, "", ""]


@converts(aten._softmax.default, aten._log_softmax.default)
def _softmax(cx: Emitter, node: torch.fx.Node) -> str:
    op = "Softmax" if node.target == aten._softmax.default else "LogSoftmax"
    return cx.one(op, [cx.value(node.args[0])], axis=int(node.args[1]))


# --- pooling and reductions ---------------------------------------------------------------------------
def _pool_attrs(k: Sequence[int], stride: Sequence[int], padding: Sequence[int], ceil: bool) -> dict:
    nd = len(k)
    stride = list(stride) or list(k)
    padding = list(padding) * (nd if len(padding) == 1 else 1)
    return dict(
        kernel_shape=list(k) * (nd if len(k) == 1 else 1),
        strides=stride * (nd if len(stride) == 1 else 1),
        pads=padding * 2,
        ceil_mode=int(bool(ceil)),
    )


def _pool_dims(node: torch.fx.Node) -> int:
    """2 or 3: the spatial dims of a 2-d or 3-d pool."""
    return 3 if node.target in (aten.max_pool3d_with_indices.default, aten.avg_pool3d.default) else 2


@converts(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool(cx: Emitter, node: torch.fx.Node) -> list[str]:
    x, k, nd = node.args[0], list(node.args[1]), _pool_dims(node)
    stride = list(arg(node, 2, "stride", []) or [])
    padding, dilation = list(arg(node, 3, "padding", [0])), list(arg(node, 4, "dilation", [1]))
    attrs = _pool_attrs(k if len(k) == nd else k * nd, stride, padding, arg(node, 5, "ceil_mode", False))
    attrs["dilations"] = dilation * (nd if len(dilation) == 1 else 1)
    return [cx.one("MaxPool", [cx.value(x)], **attrs), ""]


@converts(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(cx: Emitter, node: torch.fx.Node) -> str:
    x, k, nd = node.args[0], list(node.args[1]), _pool_dims(node)
    stride = list(arg(node, 2, "stride", []) or [])
    padding = list(arg(node, 3, "padding", [0]))
    if arg(node, 6, "divisor_override", None) is not None:
        raise GraphError("average pool with divisor_override")
    attrs = _pool_attrs(k if len(k) == nd else k * nd, stride, padding, arg(node, 4, "ceil_mode", False))
    include = bool(arg(node, 5, "count_include_pad", True))
    return cx.one("AveragePool", [cx.value(x)], count_include_pad=int(include), **attrs)


@converts(aten.upsample_bilinear2d.vec, aten.upsample_nearest2d.vec)
def _upsample(cx: Emitter, node: torch.fx.Node) -> str:
    """PyTorch's 2-d resampling as a Resize: given scale factors map coordinates by themselves (as
    PyTorch does), output sizes by output / input; bilinear reads half-pixel centres (or the
    corners), nearest rounds down from the asymmetric coordinate."""
    x = node.args[0]
    linear = node.target == aten.upsample_bilinear2d.vec
    factors = arg(node, 3 if linear else 2, "scale_factors", None)
    if linear:
        corners = bool(arg(node, 2, "align_corners", False))
        attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners" if corners else
                 "pytorch_half_pixel"}
    else:
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if factors is not None:
        scales = cx.const([1.0, 1.0, *[float(f) for f in factors]], "float32")
        return cx.one("Resize", [cx.value(x), "", scales], **attrs)
    return cx.one("Resize", [cx.value(x), "", "", cx.const(out_shape(node))], **attrs)


@converts(aten._adaptive_avg_pool2d.default)
def _adaptive_avg(cx: Emitter, node: torch.fx.Node) -> str:
    h, w = tensor_vals(node.args[0])[0].shape[-2:]
    oh, ow = node.args[1]
    if h % oh or w % ow:
        raise GraphError(f"adaptive average pool {h}x{w} -> {oh}x{ow} (windows of unequal size)")
    k = [int(h) // int(oh), int(w) // int(ow)]
    return cx.one("AveragePool", [cx.value(node.args[0])], kernel_shape=k, strides=k)


def _axes(dims: Any, rank: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [int(d) % max(rank, 1) for d in dims]


_REDUCE = _kind("reduce")


def _reduce(cx: Emitter, node: torch.fx.Node) -> str:
    op = _REDUCE[node.target]
    x = node.args[0]
    rank = rank_of(x)
    if node.target in (aten.mean.default, aten.sum.default):
        dims, keep = None, False
    else:
        dims, keep = arg(node, 1, "dim"), bool(arg(node, 2, "keepdim", False))
    dt = out_dtype(node)
    if op == "ReduceMean" and keep and rank == 4 and sorted(_axes(dims, rank)) == [2, 3] and dt == "float32":
        return cx.one("GlobalAveragePool", [cx.value(x)])  # adaptive_avg_pool2d(x, 1), as ONNX writes it
    return cx.one(op, [cx.typed(x, dt), cx.const(_axes(dims, rank))], keepdims=int(keep))


for _t in _REDUCE:
    CONVERTERS[_t] = _reduce


_ALL = (aten.all.dim, aten.all.dims, aten.all.default)


@converts(aten.any.dim, aten.any.dims, aten.any.default, *_ALL)
def _any_all(cx: Emitter, node: torch.fx.Node) -> str:
    """Whether any / all elements are nonzero: the maximum / minimum of their truth as 0 or 1."""
    x = node.args[0]
    truth = cx.one("Cast", [cx.typed(x, "bool")], to=_ONNX_TYPES["float32"])
    whole = node.target in (aten.any.default, aten.all.default)
    dims = list(range(rank_of(x))) if whole else arg(node, 1, "dim")
    keep = 0 if whole else int(bool(arg(node, 2, "keepdim", False)))
    op = "ReduceMin" if node.target in _ALL else "ReduceMax"
    r = cx.one(op, [truth, cx.const(_axes(dims, rank_of(x)))], keepdims=keep)
    return cx.one("Greater", [r, cx.const(0.0, "float32")])


@converts(aten.cumsum.default)
def _cumsum(cx: Emitter, node: torch.fx.Node) -> str:
    dt = out_dtype(node)
    return cx.one("CumSum", [cx.typed(node.args[0], dt), cx.const(int(node.args[1]) % max(rank_of(node), 1))])


@converts(aten.argmax.default, aten.argmin.default)
def _arg_reduce(cx: Emitter, node: torch.fx.Node) -> str:
    dim = arg(node, 1, "dim")
    if dim is None:
        raise GraphError("argmax over every axis")
    op = "ArgMax" if node.target == aten.argmax.default else "ArgMin"
    return cx.one(
        op, [cx.value(node.args[0])], axis=int(dim), keepdims=int(bool(arg(node, 2, "keepdim", False)))
    )


# --- shapes and data movement -----------------------------------------------------------------------
@converts(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.flatten.using_ints,
)
def _reshape(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Reshape", [cx.value(node.args[0]), cx.const(out_shape(node))])


@converts(aten.permute.default)
def _permute(cx: Emitter, node: torch.fx.Node) -> str:
    rank = rank_of(node.args[0])
    return cx.one("Transpose", [cx.value(node.args[0])], perm=[int(p) % rank for p in node.args[1]])


@converts(aten.t.default, aten.transpose.int)
def _transpose(cx: Emitter, node: torch.fx.Node) -> str:
    rank = rank_of(node.args[0])
    perm = list(range(rank))
    if rank >= 2:
        a, b = (
            (0, 1) if node.target == aten.t.default else (int(node.args[1]) % rank, int(node.args[2]) % rank)
        )
        perm[a], perm[b] = perm[b], perm[a]
    return cx.one("Transpose", [cx.value(node.args[0])], perm=perm)


@converts(aten.expand.default)
def _expand(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Expand", [cx.value(node.args[0]), cx.const(out_shape(node))])


@converts(aten.cat.default)
def _cat(cx: Emitter, node: torch.fx.Node) -> str:
    dt = out_dtype(node)
    parts = [a for a in node.args[0] if out_shape(a) != [0]]  # torch.cat skips 1-d empty tensors
    return cx.one(
        "Concat", [cx.typed(a, dt) for a in parts], axis=int(arg(node, 1, "dim", 0)) % rank_of(node)
    )


@converts(aten.slice.Tensor)
def _slice(cx: Emitter, node: torch.fx.Node) -> str:
    x = node.args[0]
    dim = int(arg(node, 1, "dim", 0))
    size = int(tensor_vals(x)[0].shape[dim])
    start, end, step = arg(node, 2, "start", None), arg(node, 3, "end", None), arg(node, 4, "step", 1)
    start = 0 if start is None else max(-size, min(int(start), size))
    end = size if end is None else max(-size, min(int(end), size))
    return cx.one(
        "Slice", [cx.value(x), cx.const([start]), cx.const([end]), cx.const([dim]), cx.const([int(step)])]
    )


@converts(aten.slice_scatter.default)
def _slice_scatter(cx: Emitter, node: torch.fx.Node) -> str:
    """``x`` with ``x[..., start:end:step, ...] = src``: with step 1 the pieces of ``x`` around ``src``
    concatenated, otherwise a ScatterElements at the slice's positions."""
    x, src = node.args[0], node.args[1]
    rank = rank_of(x)
    dim = int(arg(node, 2, "dim", 0)) % rank
    size = int(tensor_vals(x)[0].shape[dim])
    start, end, step = arg(node, 3, "start", None), arg(node, 4, "end", None), int(arg(node, 5, "step", 1))
    positions = range(size)[slice(start, end, step)]
    src_shape = [int(d) for d in tensor_vals(src)[0].shape]
    if len(positions) != src_shape[dim]:
        raise GraphError(f"slice_scatter of {src_shape[dim]} into {len(positions)} positions")
    if not positions:
        return cx.one("Identity", [cx.value(x)])
    if step == 1:
        lo, hi = positions[0], positions[-1] + 1
        parts = [cx.one("Slice", [cx.value(x), cx.const([a]), cx.const([b]), cx.const([dim])])
                 for a, b in ((0, lo), (hi, size)) if b > a]
        return cx.one("Concat", [*parts[: int(lo > 0)], cx.value(src), *parts[int(lo > 0):]], axis=dim)
    index = np.broadcast_to(
        np.asarray(positions, np.int64).reshape([-1 if k == dim else 1 for k in range(rank)]), src_shape
    )
    return cx.one("ScatterElements", [cx.value(x), cx.const(np.ascontiguousarray(index)), cx.value(src)],
                  axis=dim)


@converts(aten.repeat.default)
def _repeat(cx: Emitter, node: torch.fx.Node) -> str:
    """``x.repeat(r)``: a Tile, ``x`` first given the leading 1-dims of ``r``'s extra entries."""
    x, reps = node.args[0], [int(r) for r in node.args[1]]
    v, rank = cx.value(x), rank_of(x)
    if len(reps) > rank:
        shape = [1] * (len(reps) - rank) + [int(d) for d in tensor_vals(x)[0].shape]
        v = cx.one("Reshape", [v, cx.const(shape)])
    return cx.one("Tile", [v, cx.const(reps)])


@converts(aten.select.int)
def _select(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Gather", [cx.value(node.args[0]), cx.const(int(node.args[2]))], axis=int(node.args[1]))


@converts(aten.split_with_sizes.default, aten.split.Tensor)
def _split(cx: Emitter, node: torch.fx.Node) -> list[str]:
    x = node.args[0]
    dim = int(arg(node, 2, "dim", 0)) % rank_of(x)
    sizes = [int(t.shape[dim]) for t in tensor_vals(node)]
    outs, start = [], 0
    for s in sizes:
        outs.append(cx.one("Slice", [cx.value(x), cx.const([start]), cx.const([start + s]), cx.const([dim])]))
        start += s
    return outs


@converts(aten.as_strided.default)
def _as_strided(cx: Emitter, node: torch.fx.Node) -> str:
    """A strided view of a contiguous tensor: a Gather of its elements at constant positions."""
    x = node.args[0]
    val = tensor_vals(x)[0]
    if not val.is_contiguous() or val.storage_offset() != 0:
        raise GraphError("as_strided of a tensor that is not contiguous from its start")
    size, stride = [int(d) for d in node.args[1]], [int(d) for d in node.args[2]]
    offset = int(arg(node, 3, "storage_offset", 0) or 0)
    index = np.full(size, offset, dtype=np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        index += (np.arange(n, dtype=np.int64) * st).reshape([n if j == k else 1 for j in range(len(size))])
    if index.size and (index.min() < 0 or index.max() >= val.numel()):
        raise GraphError("as_strided reaches outside its input")
    flat = cx.one("Reshape", [cx.value(x), cx.const([-1])])
    return cx.one("Gather", [flat, cx.const(index)], axis=0)


@converts(aten.embedding.default)
def _embedding(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Gather", [cx.value(node.args[0]), cx.value(node.args[1])], axis=0)


@converts(aten.index.Tensor)
def _index(cx: Emitter, node: torch.fx.Node) -> str:
    """``x[:, ..., idx]`` with one integer index tensor: a Gather along that axis. Several (broadcast
    together): a GatherND of their stacked values over the indexed axes moved to the front; the
    result's broadcast dims then stand where the indexed axes were when those are adjacent, first
    otherwise (PyTorch's and numpy's rule)."""
    given = [k for k, i in enumerate(node.args[1]) if i is not None]
    idx = [node.args[1][k] for k in given]
    if any(tensor_vals(i)[0].dtype not in (torch.int64, torch.int32) for i in idx):
        raise GraphError("indexing with a boolean mask")
    x = cx.value(node.args[0])
    if len(given) == 1:
        return cx.one("Gather", [x, cx.value(idx[0])], axis=given[0])
    rank = rank_of(node.args[0])
    rest = [k for k in range(rank) if k not in given]
    if given != list(range(len(given))):
        x = cx.one("Transpose", [x], perm=given + rest)
    shape = list(torch.broadcast_shapes(*[tensor_vals(i)[0].shape for i in idx]))
    cols = [
        cx.one("Reshape", [cx.one("Expand", [cx.typed(i, "int64"), cx.const(shape)]), cx.const(shape + [1])])
        for i in idx
    ]
    y = cx.one("GatherND", [x, cx.one("Concat", cols, axis=len(shape))])
    first = given[0]
    if first == 0 or given != list(range(first, first + len(given))):
        return y  # the broadcast dims first
    b = len(shape)  # adjacent from ``first``: the dims before it back in front
    perm = list(range(b, b + first)) + list(range(b)) + list(range(b + first, b + len(rest)))
    return cx.one("Transpose", [y], perm=perm)


@converts(aten.index_select.default)
def _index_select(cx: Emitter, node: torch.fx.Node) -> str:
    return cx.one("Gather", [cx.value(node.args[0]), cx.value(node.args[2])], axis=int(node.args[1]))


@converts(aten.gather.default)
def _gather(cx: Emitter, node: torch.fx.Node) -> str:
    """``torch.gather``: GatherElements, the input first cut to the index's extent on the other axes
    (torch lets the index be smaller there; ONNX reads them at the same positions)."""
    x, dim, index = node.args[0], int(node.args[1]), node.args[2]
    rank = rank_of(x)
    dim %= max(rank, 1)
    have, want = list(tensor_vals(x)[0].shape), list(tensor_vals(index)[0].shape)
    data = cx.value(x)
    cut = [a for a in range(rank) if a != dim and want[a] < have[a]]
    if cut:
        ends = cx.const([want[a] for a in cut])
        data = cx.one("Slice", [data, cx.const([0] * len(cut)), ends, cx.const(cut)])
    return cx.one("GatherElements", [data, cx.typed(index, "int64")], axis=dim)


@converts(aten.constant_pad_nd.default)
def _pad(cx: Emitter, node: torch.fx.Node) -> str:
    x, pad = node.args[0], [int(p) for p in node.args[1]]
    rank = rank_of(x)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists (begin, end) pairs from the last dim backwards
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    dt = out_dtype(node)
    return cx.one(
        "Pad", [cx.value(x), cx.const(begins + ends), cx.const(arg(node, 2, "value", 0), dt)], mode="constant"
    )


_FILL = {aten.full_like.default: None, aten.zeros_like.default: 0, aten.ones_like.default: 1}


@converts(*_FILL)
def _fill_like(cx: Emitter, node: torch.fx.Node) -> str:
    value = _FILL[node.target]
    value = arg(node, 1, "fill_value") if value is None else value
    return cx.const(np.full(out_shape(node), value), out_dtype(node))


@converts(
    aten.full.default,
    aten.scalar_tensor.default,
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.zeros.default,
    aten.ones.default,
)
def _created(cx: Emitter, node: torch.fx.Node) -> str:
    """A tensor made from the node's static arguments alone: computed by PyTorch now, a constant."""
    kwargs = {k: v for k, v in node.kwargs.items() if k != "pin_memory"}
    value = node.target(*node.args, **{**kwargs, "device": "cpu"})
    return cx.const(as_numpy(value), out_dtype(node))


@converts(operator.getitem)
def _getitem(cx: Emitter, node: torch.fx.Node) -> str:
    src, i = node.args
    names = cx.names[src]
    if not names[i]:
        raise GraphError(f"output {i} of {src.target} (only its first output is compiled)")
    return names[i]


# composite operators kept whole (not decomposed) because ONNX names them as one operator too
PRESERVED = (aten.linear.default, aten.matmul.default, aten.hardswish.default, aten.hardsigmoid.default)

# outputs of a multi-output node that a region may read (others must stay unread)
READABLE_OUTPUTS = {
    aten._native_batch_norm_legit_no_training.default: {0},
    aten.native_layer_norm.default: {0},
    aten.native_group_norm.default: {0},
    aten.max_pool2d_with_indices.default: {0},
    aten.max_pool3d_with_indices.default: {0},
}


def supported(node: torch.fx.Node) -> str | None:
    """Why an fx ``call_function`` node cannot be compiled, or None when it can (as far as its operator
    and element types tell; the operator definitions may still refuse attributes, see ``partition``)."""
    if node.target not in CONVERTERS:
        return f"no converter for {node.target}"
    if node.target is operator.getitem:
        src = node.args[0]
        allowed = READABLE_OUTPUTS.get(getattr(src, "target", None))
        if allowed is not None and node.args[1] not in allowed:
            return f"output {node.args[1]} of {src.target}"
        return None
    allowed = READABLE_OUTPUTS.get(node.target)
    if allowed is not None:
        for user in node.users:
            if user.target is not operator.getitem or user.args[1] not in allowed:
                return f"{node.target}: an output that is not compiled is read"
    vals = tensor_vals(node)
    if allowed is not None:
        vals = [v for i, v in enumerate(vals) if i in allowed]
    if not vals:
        return "produces no tensor"
    ins = [a for a in node.all_input_nodes]
    try:
        every = vals + [t for a in ins for t in tensor_vals(a)]
        for v in every:
            static_type(v)
            if v.device.type not in ("cpu", "cuda"):
                return f"a tensor on {v.device}"
    except GraphError as err:
        return str(err)
    if len({v.device.type for v in every}) > 1:  # a region runs on one device (its target)
        return "tensors on the CPU and the GPU"
    return None
