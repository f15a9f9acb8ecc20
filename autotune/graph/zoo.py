"""Model zoo for tests and benchmarks, built with ``onnx.helper`` and random weights (no downloads):

- ``mlp``          Gemm + Relu layers, softmax at the end (the embedded default model)
- ``resnet18``     ResNet-18-shaped CNN (conv + batch norm + relu, residual blocks, max / global
                   average pool, a classifier); ``image`` and ``width`` shrink it for tests
- ``bert_layer``   one BERT-base encoder layer (self-attention with an additive mask, GELU in its
                   erf form, LayerNormalization); ``seq``/``hidden``/``heads``/``ffn`` shrink it

``python -m autotune.graph.zoo resnet18 -o resnet18.onnx [--set image=64]`` writes one to a file;
everywhere a model is taken, ``zoo:NAME`` (or ``zoo:NAME?image=64,width=16``) names one.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable

import numpy as np

OPSET = 17
DEFAULT_MODEL = "mlp"


class _Builder:
    """Collects nodes and initializers of one ONNX graph."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, arr: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def weight(self, base: str, shape: tuple[int, ...], fan_in: int, gain: float = 1.0) -> str:
        std = gain / math.sqrt(fan_in)
        return self.const(base, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def uniform(self, base: str, shape: tuple[int, ...], lo: float, hi: float) -> str:
        return self.const(base, self.rng.uniform(lo, hi, size=shape).astype(np.float32))

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> str:
        from onnx import helper

        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0]

    def model(
        self,
        name: str,
        inputs: list[tuple[str, tuple[int, ...]]],
        outputs: list[tuple[str, tuple[int, ...]]],
        opset: int = OPSET,
    ) -> Any:
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(s)) for o, s in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="autotune-zoo"
        )
        model.ir_version = 8
        return model


def mlp(
    batch: int = 16, inputs: int = 256, hidden: int = 512, layers: int = 2, classes: int = 10, seed: int = 0
) -> Any:
    """``layers`` x (Gemm transB=1 + Relu) of width ``hidden``, a Gemm to ``classes``, Softmax;
    input ``x`` [batch, inputs]."""
    b = _Builder(seed)
    sizes = [inputs] + [hidden] * layers + [classes]
    x = "x"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = b.weight("w", (n, k), k, math.sqrt(2.0))
        bias = b.uniform("b", (n,), -0.1, 0.1)
        x = b.node("Gemm", [x, w, bias], transB=1)
        if i < len(sizes) - 2:
            x = b.node("Relu", [x])
    y = b.node("Softmax", [x], axis=-1)
    return b.model("mlp", [("x", (batch, inputs))], [(y, (batch, classes))])


def _conv_bn(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
    w = b.weight("conv_w", (cout, cin, k, k), cin * k * k, math.sqrt(2.0))
    y = b.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    bn = [
        b.uniform("bn_scale", (cout,), 0.5, 1.0),
        b.uniform("bn_bias", (cout,), -0.1, 0.1),
        b.uniform("bn_mean", (cout,), -0.1, 0.1),
        b.uniform("bn_var", (cout,), 0.5, 1.5),
    ]
    y = b.node("BatchNormalization", [y, *bn], epsilon=1e-5)
    return b.node("Relu", [y]) if relu else y


def resnet18(
    batch: int = 1, image: int = 224, width: int = 64, num_classes: int = 1000, seed: int = 0
) -> Any:
    """ResNet-18: 7x7/2 stem, 3x3/2 max pool, 4 stages x 2 basic blocks (widths w, 2w, 4w, 8w),
    global average pool, Flatten, Gemm; input ``data`` [batch, 3, image, image]."""
    b = _Builder(seed)
    x = _conv_bn(b, "data", 3, width, 7, 2, True)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        cout = width * mult
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = _conv_bn(b, x, cin, cout, 3, stride, True)
            y = _conv_bn(b, y, cout, cout, 3, 1, False)
            short = _conv_bn(b, x, cin, cout, 1, stride, False) if (stride != 1 or cin != cout) else x
            x = b.node("Relu", [b.node("Add", [y, short])])
            cin = cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    w = b.weight("fc_w", (num_classes, cin), cin)
    x = b.node("Gemm", [x, w, b.uniform("fc_b", (num_classes,), -0.1, 0.1)], transB=1)
    return b.model("resnet18", [("data", (batch, 3, image, image))], [(x, (batch, num_classes))])


def bert_layer(
    seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, batch: int = 1, seed: int = 0
) -> Any:
    """A BERT encoder layer as exported from PyTorch: inputs ``hidden`` [batch, seq, hidden] and an
    additive attention ``mask`` [batch, 1, 1, seq]; GELU in its Div/Erf/Add/Mul/Mul form."""
    b = _Builder(seed)
    d = hidden // heads
    x = "hidden"

    def linear(inp: str, k: int, n: int) -> str:
        return b.node(
            "Add", [b.node("MatMul", [inp, b.weight("w", (k, n), k)]), b.uniform("b", (n,), -0.1, 0.1)]
        )

    def heads_of(t: str, perm: list[int]) -> str:
        shape = b.const("shape", np.array([batch, seq, heads, d], dtype=np.int64))
        return b.node("Transpose", [b.node("Reshape", [t, shape])], perm=perm)

    q = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
    k = heads_of(linear(x, hidden, hidden), [0, 2, 3, 1])
    v = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
    scores = b.node(
        "Div", [b.node("MatMul", [q, k]), b.const("sqrt_d", np.array(math.sqrt(d), dtype=np.float32))]
    )
    probs = b.node("Softmax", [b.node("Add", [scores, "mask"])], axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.const("shape", np.array([batch, seq, hidden], dtype=np.int64))])
    attn = b.node("Add", [linear(ctx, hidden, hidden), x])

    def layernorm(t: str) -> str:
        return b.node(
            "LayerNormalization",
            [t, b.uniform("ln_g", (hidden,), 0.5, 1.5), b.uniform("ln_b", (hidden,), -0.1, 0.1)],
            axis=-1,
            epsilon=1e-12,
        )

    h1 = layernorm(attn)
    f = linear(h1, hidden, ffn)
    erf = b.node("Erf", [b.node("Div", [f, b.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))])])
    gelu = b.node(
        "Mul",
        [
            b.node("Mul", [f, b.node("Add", [erf, b.const("one", np.array(1.0, dtype=np.float32))])]),
            b.const("half", np.array(0.5, dtype=np.float32)),
        ],
    )
    out = layernorm(b.node("Add", [linear(gelu, ffn, hidden), h1]))
    inputs = [("hidden", (batch, seq, hidden)), ("mask", (batch, 1, 1, seq))]
    return b.model("bert_layer", inputs, [(out, (batch, seq, hidden))])


MODELS: dict[str, Callable[..., Any]] = {"mlp": mlp, "resnet18": resnet18, "bert_layer": bert_layer}


def parse_spec(spec: str) -> tuple[str, dict[str, int]]:
    """``"zoo:resnet18?image=64,width=16"`` (or without ``zoo:``) -> ("resnet18", {...})."""
    text = spec[4:] if spec.startswith("zoo:") else spec
    name, _, rest = text.partition("?")
    if name not in MODELS:
        raise ValueError(f"unknown zoo model {name!r}; zoo models: {', '.join(MODELS)}")
    params: dict[str, int] = {}
    for item in filter(None, rest.split(",")):
        k, sep, v = item.partition("=")
        if not sep or not v.strip().lstrip("-").isdigit():
            raise ValueError(f"zoo parameter {item!r} must look like name=integer")
        params[k.strip()] = int(v)
    return name, params


def make_model(spec: str) -> Any:
    """The ONNX ModelProto of a zoo spec (``mlp``, ``zoo:bert_layer?seq=32`` ...)."""
    name, params = parse_spec(spec)
    try:
        return MODELS[name](**params)
    except TypeError as err:
        raise ValueError(f"zoo model {name}: {err}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autotune.graph.zoo", description="Write a zoo model as ONNX.")
    p.add_argument("model", help=f"one of {', '.join(MODELS)}, optionally NAME?key=value,...")
    p.add_argument("-o", "--output", required=True, help="ONNX file to write")
    args = p.parse_args(argv)
    try:
        model = make_model(args.model)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import onnx

    onnx.save(model, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
