"""Named workloads (``tune.py --op NAME --shape ...``) that are graph operators: each is a one-node
(or small) subgraph built through the operator definitions, the same path as a model's fused
subgraphs, so tuning a named op and tuning a model that computes it write records under one key.

The dense family (``X @ W^T``) has no one-node form in the graph IR (a model's Gemm becomes a
MatMul with a pre-transposed weight) and stays in :mod:`autotune.te.library`."""

from __future__ import annotations

from typing import Any

from autotune.te.registry import register
from autotune.te.workload import Workload

from .ir import GraphError, Node, TensorType
from .ops import op_def
from .subgraph import OP_NAME, build_workload, reference

F32 = "float32"


def _input(shape: tuple[int, ...], name: str) -> dict[str, Any]:
    return {"shape": list(shape), "dtype": F32, "range": [-1.0, 1.0], "name": name}


def one_node(
    name: str, op: str, attrs: dict, shapes: list[tuple[int, ...]], params: dict, names: str = ""
) -> Workload:
    """The workload of a single graph node over fresh inputs of ``shapes`` (named by ``names``)."""
    return graph_workload(
        name, [(op, attrs, [["in", i] for i in range(len(shapes))], name)], shapes, params, names
    )


def graph_workload(
    name: str,
    nodes: list[tuple[str, dict, list]],
    shapes: list[tuple[int, ...]],
    params: dict,
    names: str = "",
) -> Workload:
    """The workload of a small subgraph (nodes as (op, attrs, args, stage name); the last node's output
    is the result; inputs named by ``names``) whose float32 reference doubles as the benchmark baseline.

    The stage names are those the named workloads always had, so their existing records (whose
    schedule steps name stages) still apply."""
    spec = {
        "op": OP_NAME,
        "name": name,
        "params": [[k, v] for k, v in params.items()],  # pairs: the order survives sorted-key JSON
        "inputs": [
            _input(s, n) for s, n in zip(shapes, names.split() or [f"in{i}" for i in range(len(shapes))])
        ],
        "nodes": [
            {"op": op, "attrs": attrs, "args": args, "name": stage} for op, attrs, args, stage in nodes
        ],
    }
    _check_types(spec)
    wl = build_workload(spec)
    wl.baseline = lambda *arrays: reference(spec, *arrays)
    return wl


def _check_types(spec: dict) -> None:
    """Type the nodes with their definitions: a shape they cannot take is a ValueError naming why."""
    types = [TensorType(tuple(d["shape"]), d["dtype"]) for d in spec["inputs"]]
    values: list[TensorType] = []
    for j, nd in enumerate(spec["nodes"]):
        args = [types[i] if kind == "in" else values[i] for kind, i in nd["args"]]
        node = Node(nd["op"], [f"a{k}" for k in range(len(args))], [f"n{j}"], dict(nd["attrs"]), nd["op"])
        try:
            values.append(op_def(nd["op"]).infer(node, args, [None] * len(args))[0])
        except GraphError as err:
            raise ValueError(str(err).split(": ", 1)[-1]) from None


def _pads(p: int) -> list[int]:
    return [p, p, p, p]


@register("matmul", ["m", "n", "k"], "C[m,n] = A[m,k] @ B[k,n]")
def matmul(m: int, n: int, k: int) -> Workload:
    return one_node("matmul", "MatMul", {}, [(m, k), (k, n)], locals(), "A B")


@register("batch_matmul", ["b", "m", "n", "k"], "C[b] = A[b] @ B[b]")
def batch_matmul(b: int, m: int, n: int, k: int) -> Workload:
    return one_node("batch_matmul", "MatMul", {}, [(b, m, k), (b, k, n)], locals(), "A B")


def _conv_attrs(kh: int, kw: int, stride: int, pad: int, dilation: int, groups: int, nhwc: bool) -> dict:
    attrs: dict[str, Any] = {
        "kernel_shape": [kh, kw],
        "strides": [stride, stride],
        "pads": _pads(pad),
        "dilations": [dilation, dilation],
        "group": groups,
    }
    return dict(attrs, layout="NHWC") if nhwc else attrs


def _check_groups(c: int, f: int, groups: int) -> None:
    if groups < 1 or c % groups or f % groups:
        raise ValueError(f"channels {c} and filters {f} not divisible by groups {groups}")


@register(
    "conv2d",
    ["n", "c", "h", "w", "f", "kh", "kw", "stride", "pad"],
    "NCHW conv2d (+ optional dilation, groups)",
    optional={"dilation": 1, "groups": 1},
)
def conv2d(n, c, h, w, f, kh, kw, stride, pad, dilation=1, groups=1) -> Workload:  # noqa: ANN001
    _check_groups(c, f, groups)
    attrs = _conv_attrs(kh, kw, stride, pad, dilation, groups, False)
    return one_node(
        "conv2d", "Conv", attrs, [(n, c, h, w), (f, c // groups, kh, kw)], locals(), "data weight"
    )


@register(
    "conv2d_nhwc",
    ["n", "h", "w", "c", "f", "kh", "kw", "stride", "pad"],
    "NHWC conv2d, HWIO weights (+ optional dilation, groups)",
    optional={"dilation": 1, "groups": 1},
)
def conv2d_nhwc(n, h, w, c, f, kh, kw, stride, pad, dilation=1, groups=1) -> Workload:  # noqa: ANN001
    _check_groups(c, f, groups)
    attrs = _conv_attrs(kh, kw, stride, pad, dilation, groups, True)
    return one_node(
        "conv2d_nhwc", "Conv", attrs, [(n, h, w, c), (kh, kw, c // groups, f)], locals(), "data weight"
    )


@register(
    "depthwise_conv2d",
    ["n", "c", "h", "w", "kh", "kw", "stride", "pad"],
    "depthwise NCHW conv2d, weights [c,1,kh,kw]",
)
def depthwise_conv2d(n, c, h, w, kh, kw, stride, pad) -> Workload:  # noqa: ANN001
    attrs = _conv_attrs(kh, kw, stride, pad, 1, c, False)
    return one_node(
        "depthwise_conv2d", "Conv", attrs, [(n, c, h, w), (c, 1, kh, kw)], locals(), "data weight"
    )


def _pool(name: str, op: str, n: int, c: int, h: int, w: int, k: int, stride: int, pad: int) -> Workload:
    if pad < 0 or pad >= k:
        raise ValueError(f"pad {pad} must be in [0, kernel {k})")
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": _pads(pad)}
    params = {"n": n, "c": c, "h": h, "w": w, "k": k, "stride": stride, "pad": pad}
    return one_node(name, op, attrs, [(n, c, h, w)], params, "data")


@register("max_pool2d", ["n", "c", "h", "w", "k", "stride", "pad"], "NCHW max pool, k x k window")
def max_pool2d(n, c, h, w, k, stride, pad) -> Workload:  # noqa: ANN001
    return _pool("max_pool2d", "MaxPool", n, c, h, w, k, stride, pad)


@register(
    "avg_pool2d",
    ["n", "c", "h", "w", "k", "stride", "pad"],
    "NCHW average pool, k x k window; padding excluded from the count (ONNX count_include_pad=0)",
)
def avg_pool2d(n, c, h, w, k, stride, pad) -> Workload:  # noqa: ANN001
    return _pool("avg_pool2d", "AveragePool", n, c, h, w, k, stride, pad)


@register("global_avg_pool2d", ["n", "c", "h", "w"], "NCHW global average pool -> [n,c,1,1]")
def global_avg_pool2d(n: int, c: int, h: int, w: int) -> Workload:
    return one_node("global_avg_pool2d", "GlobalAveragePool", {}, [(n, c, h, w)], locals(), "data")


@register("softmax", ["rows", "cols"], "softmax over the last axis")
def softmax(rows: int, cols: int) -> Workload:
    return one_node("softmax", "Softmax", {"axis": -1}, [(rows, cols)], locals(), "x")


@register("layernorm", ["rows", "cols"], "layer norm over the last axis with gamma, beta; eps=1e-5")
def layernorm(rows: int, cols: int) -> Workload:
    attrs = {"axis": -1, "epsilon": 1e-5}
    return one_node(
        "layernorm", "LayerNormalization", attrs, [(rows, cols), (cols,), (cols,)], locals(), "x gamma beta"
    )


@register("relu", ["n"], "relu over a vector")
def relu(n: int) -> Workload:
    return one_node("relu", "Relu", {}, [(n,)], locals(), "x")


@register("gelu", ["n"], "exact (erf) gelu over a vector")
def gelu(n: int) -> Workload:
    return one_node("gelu", "Gelu", {}, [(n,)], locals(), "x")


@register("add", ["n"], "a + b over vectors")
def add(n: int) -> Workload:
    return one_node("add", "Add", {}, [(n,), (n,)], locals(), "a b")


@register("mul", ["n"], "a * b over vectors")
def mul(n: int) -> Workload:
    return one_node("mul", "Mul", {}, [(n,), (n,)], locals(), "a b")


@register("bias_add_relu", ["m", "n"], "relu(x + bias[n]), fused")
def bias_add_relu(m: int, n: int) -> Workload:
    nodes = [("Add", {}, [["in", 0], ["in", 1]], "bias_add"), ("Relu", {}, [["node", 0]], "relu")]
    return graph_workload("bias_add_relu", nodes, [(m, n), (n,)], locals(), "x bias")


@register("add_relu_mul", ["m", "n"], "relu(a + b) * c, one fused elementwise chain")
def add_relu_mul(m: int, n: int) -> Workload:
    nodes = [
        ("Add", {}, [["in", 0], ["in", 1]], "add"),
        ("Relu", {}, [["node", 0]], "relu"),
        ("Mul", {}, [["node", 1], ["in", 2]], "add_relu_mul"),
    ]
    return graph_workload("add_relu_mul", nodes, [(m, n), (m, n), (m, n)], locals(), "a b c")
