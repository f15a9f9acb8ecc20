"""Models stored in float16, computed in float32.

A model exported after ``.half()``, or converted to float16 keeping float32 inputs and outputs (a
Cast to float16 after each input, one back before each output), holds its weights and computes
every value in float16. The CPU kernels compute in float32, so the import reads such a model as
its float32 twin: float16 weights and constants widened (exactly: every float16 is a float32),
the values, inputs and outputs declared float16 declared float32, and every cast or dtype
attribute that names float16 naming float32. The module then computes in float32 from the stored
weights, takes float16 or float32 input arrays, and rounds the outputs the model declares float16
to float16 once, at the end (``Graph.float16_outputs``): within float16's rounding of what
onnxruntime computes in float16 all the way, and closer to the model's exact value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_DTYPE_ATTRS = ("to", "dtype")  # Cast's target; EyeLike's, the random generators' element type


def widen_float16(model: Any) -> tuple[Any, int]:
    """``model`` (a ModelProto) as its float32 twin, and the number of float16 tensors and type
    declarations widened: a rewritten copy, or ``model`` itself when it mentions no float16."""
    import onnx

    count = _graph(model.graph, change=False)
    if not count:
        return model, 0
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _graph(wide.graph, change=True)
    return wide, count


def as_declared(graph: Any, outputs: list[np.ndarray]) -> list[np.ndarray]:
    """``outputs`` (of ``graph``, computed in float32) with those the model declares float16 rounded
    to float16."""
    for j in graph.float16_outputs:
        outputs[j] = np.asarray(outputs[j]).astype(np.float16)
    return outputs


def _graph(g: Any, change: bool) -> int:
    from onnx import TensorProto

    n = 0
    for vi in (*g.input, *g.output, *g.value_info):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type == TensorProto.FLOAT16:
            if change:
                tt.elem_type = TensorProto.FLOAT
            n += 1
    for t in g.initializer:
        n += _tensor(t, change)
    for node in g.node:
        for a in node.attribute:
            n += _attribute(a, change)
    return n


def _attribute(a: Any, change: bool) -> int:
    from onnx import AttributeProto, TensorProto

    if a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i == TensorProto.FLOAT16:
        if change:
            a.i = TensorProto.FLOAT
        return 1
    if a.type == AttributeProto.TENSOR:
        return _tensor(a.t, change)
    if a.type == AttributeProto.TENSORS:
        return sum(_tensor(t, change) for t in a.tensors)
    if a.type == AttributeProto.GRAPH:
        return _graph(a.g, change)
    if a.type == AttributeProto.GRAPHS:
        return sum(_graph(g, change) for g in a.graphs)
    return 0


def _tensor(t: Any, change: bool) -> int:
    """A float16 TensorProto (rewritten in place as the float32 tensor of the same values)."""
    from onnx import TensorProto, numpy_helper

    if t.data_type != TensorProto.FLOAT16:
        return 0
    if change:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    return 1
