"""The operator registry and what every operator definition shares.

An operator is defined once, by a class registered with :func:`register`, holding everything the
compiler knows about it: its kind (how it fuses), the attribute values it supports (``check``), type
and shape inference (``infer``), a numpy implementation (constant folding, the reference interpreter,
subgraph references) and, for operators that become kernels, its tensor-expression builder (``te``).

Kinds:
  anchor     a reduction with data reuse (Conv, MatMul): one per fused kernel, tiled
  elemwise   elementwise with numpy broadcasting: fused into a producer's epilogue or chained
  injective  index remapping that costs a copy (Transpose, Concat, Slice, Gather): fused as a
             consumer's prologue
  reduce     a reduction without reuse (Softmax, norms, pools, ReduceSum): its own kernel,
             elementwise consumers fused after it
  alias      no data movement (Reshape, Flatten, Squeeze, Unsqueeze, Identity): a view of the
             input's storage
  fold       only meaningful on constants (Constant, Shape, Range...): folded at import
  rewrite    removed by a pass before fusion (Gemm, BatchNormalization, Split)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import numpy as np

from autotune.te.expr import SUB_BYTE_DTYPES

from ..ir import GraphError, Node, TensorType

ANCHOR, ELEMWISE, INJECTIVE, REDUCE, ALIAS, FOLD, REWRITE = (
    "anchor",
    "elemwise",
    "injective",
    "reduce",
    "alias",
    "fold",
    "rewrite",
)

Types = Sequence["TensorType | None"]
Consts = Sequence["np.ndarray | None"]
# a te builder's operand: a te tensor, a scalar folded into the expression, or an omitted input
Arg = Union[Any, float, int, None]

# element types a compiled kernel reads and writes (bool is one byte, as in numpy; the sub-byte
# integers one byte each, as ml_dtypes holds them: only converted by Cast and moved, never computed on)
INT_KERNEL_DTYPES = ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8")
KERNEL_DTYPES = ("float32", *INT_KERNEL_DTYPES, "bool", *SUB_BYTE_DTYPES)


@dataclass(frozen=True)
class OpDef:
    """How the compiler handles one operator type."""

    name: str
    kind: str
    infer: Callable[[Node, Types, Consts], list[TensorType]]
    numpy: Callable[[Node, list[np.ndarray]], list[np.ndarray]]
    check: Callable[[Node], str | None] = lambda node: None  # an unsupported attribute, or None
    te: Callable[[dict, Sequence[Arg], str], Any] | None = None  # attrs, operands, name -> te.Tensor
    internal: bool = False  # made by the compiler's passes only; never accepted from a model
    # operand position -> attribute name: constant operands (axes, pads, starts...) that a pass moves
    # into the node's attributes as ``_<name>`` before fusion, so kernels see them as parameters
    const_operands: dict[int, str] = field(default_factory=dict)
    # output position -> how many leading operands computing that output alone reads (an operator
    # with several outputs becomes one kernel per output: ``passes.one_output_per_node``)
    output_operands: dict[int, int] = field(default_factory=dict)
    # output positions whose value depends only on the operands' shapes and constant operands (Shape,
    # EyeLike, Dropout's mask): constants, whatever the run-time operands hold
    shape_only_outputs: tuple[int, ...] = ()
    # its torch mapping: core ATen overloads (``packet.overload``, as ``torch.export`` leaves them)
    # that are this operator on the same operands -> how the torch frontend reads their arguments
    # (``unary``, ``binary``, ``compare``, ``reduce``; ``!compare``: the operator's negation).
    # ATen operators that become several of these (``linear``, ``convolution``) are the frontend's.
    aten: dict[str, str] = field(default_factory=dict)
    # operand positions the te reads as tensors (their shape, or elements by index), None for every
    # operand: a one-element constant there reaches the kernel as an input, not folded to a literal
    tensor_operands: tuple[int, ...] | None = ()

    def takes_literal(self, pos: int) -> bool:
        """Whether a one-element constant at operand ``pos`` may reach the te as a literal."""
        return self.tensor_operands is not None and pos not in self.tensor_operands


OPS: dict[str, OpDef] = {}


def register(
    name: str, kind: str, check: Callable[[Node], str | None] | None = None, internal: bool = False
) -> Callable[[type], type]:
    """Class decorator: the class's static ``infer``, ``numpy`` and (optional) ``te`` define ``name``."""

    def wrap(cls: type) -> type:
        OPS[name] = OpDef(
            name,
            kind,
            cls.infer,
            cls.numpy,
            check or (lambda node: None),
            getattr(cls, "te", None),
            internal,
            dict(getattr(cls, "const_operands", {})),
            dict(getattr(cls, "output_operands", {})),
            tuple(getattr(cls, "shape_only_outputs", ())),
            dict(getattr(cls, "aten", {})),
            getattr(cls, "tensor_operands", ()),
        )
        return cls

    return wrap


def op_def(op: str) -> OpDef:
    if op not in OPS:
        raise GraphError(f"unsupported operator {op}")
    return OPS[op]


# --- helpers shared by the definitions ----------------------------------------------------------
class AttrNode:
    """The slice of a graph Node that attribute helpers read, made from a kernel's attributes (constant
    operands already moved into attributes, see ``OpDef.const_operands``)."""

    def __init__(self, op: str, attrs: dict, name: str) -> None:
        self.op, self.attrs, self.name, self.outputs, self.inputs = op, attrs, name, [name], [name]


def operand(node: Any, consts: Consts, i: int, key: str) -> np.ndarray | None:
    """Constant operand ``i`` of a node (or, in a kernel, the attribute ``_<key>`` it was moved to);
    None when omitted; GraphError when given but not constant."""
    if f"_{key}" in node.attrs:
        v = node.attrs[f"_{key}"]
        return None if v is None else np.asarray(v)
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    if len(consts) <= i or consts[i] is None:
        raise GraphError(f"{node.op} node {node.name!r}: {key} must be a constant known at compile time")
    return np.asarray(consts[i])


def output_positions(node: Any) -> list[int]:
    """The output positions a node computes: the one its ``_output`` attribute names (a node made
    by ``passes.one_output_per_node``), else every position it has."""
    if "_output" in node.attrs:
        return [int(node.attrs["_output"])]
    return list(range(len(node.outputs)))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; GraphError if they do not broadcast."""
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise GraphError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def same(t: TensorType | None) -> TensorType:
    if t is None:
        raise GraphError("a required input is missing")
    return t


def norm_axis(axis: int, ndim: int, what: str) -> int:
    """``axis`` in ``[0, ndim)`` (negative counts from the end); GraphError when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise GraphError(f"{what}: axis {axis} out of range for rank {ndim}")
    return axis % max(ndim, 1)


def float_only(node: Node, types: Types) -> None:
    """Reject operands that are not float32 (ops whose kernels are float arithmetic)."""
    for i, t in zip(node.inputs, types):
        if t is not None and t.dtype != "float32":
            raise GraphError(
                f"{node.op} node {node.name!r}: input {i!r} is {t.dtype}; only float32 is compiled"
            )


def need_const(node: Node, consts: Consts, i: int, what: str) -> np.ndarray:
    """Input ``i`` as a constant known at compile time, or GraphError."""
    if len(consts) <= i or consts[i] is None:
        raise GraphError(f"{node.op} node {node.name!r}: {what} must be a constant known at compile time")
    return np.asarray(consts[i])


def optional_const(node: Node, consts: Consts, i: int, what: str) -> np.ndarray | None:
    """Input ``i`` as a constant, None when omitted; GraphError when given but not constant."""
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    return need_const(node, consts, i, what)


def fold_only(node: Node, consts: Consts, n: int | None = None) -> None:
    """Reject a node whose first ``n`` (default: all given) inputs are not all constants."""
    given = [c for i, c in enumerate(consts[: n if n is not None else len(consts)]) if node.inputs[i]]
    if any(c is None for c in given):
        raise GraphError(f"{node.op} node {node.name!r} is only supported on constants (shape computations)")


def infer_by_numpy(node: Node, consts: Consts) -> list[TensorType]:
    """Types of a node on constant inputs, by running its numpy definition."""
    outs = op_def(node.op).numpy(node, [None if c is None else np.asarray(c) for c in consts])
    return [TensorType(tuple(o.shape), str(o.dtype)) for o in outs]


def kernel_dtype(node: Node, t: TensorType, what: str = "output") -> TensorType:
    """``t``, or GraphError when a kernel cannot hold its element type."""
    if t.dtype not in KERNEL_DTYPES:
        raise GraphError(
            f"{node.op} node {node.name!r}: {what} is {t.dtype}; kernels compute {', '.join(KERNEL_DTYPES)}"
        )
    return t


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Run one node with numpy."""
    return op_def(node.op).numpy(node, list(inputs))  # type: ignore[arg-type]


# older operator types the frontend imports as the operator they became (e.g. Upsample as Resize)
IMPORTED_AS: dict[str, str] = {}


def supported_ops() -> list[str]:
    """Operator types accepted from a model (internal ops excluded, older forms included)."""
    return sorted({k for k, v in OPS.items() if not v.internal} | set(IMPORTED_AS))


def attr_problem(node: Node) -> str | None:
    """Why this node's attributes are not supported, or None."""
    return op_def(node.op).check(node)


def build_te(op: str, attrs: dict, args: Sequence[Arg], name: str) -> Any:
    """The te tensor of one graph node."""
    fn = op_def(op).te
    if fn is None:
        raise GraphError(f"no tensor-expression builder for {op} (it should have been rewritten or folded)")
    return fn(attrs, args, name)


def describe_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe attributes (numpy values become lists / scalars)."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, np.ndarray):
            out[k] = v.tolist()
        elif isinstance(v, (np.integer, np.floating)):
            out[k] = v.item()
        elif isinstance(v, (list, tuple)):
            out[k] = [x.item() if isinstance(x, (np.integer, np.floating)) else x for x in v]
        else:
            out[k] = v
    return out
