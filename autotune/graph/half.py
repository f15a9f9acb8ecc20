"""Models stored in 16-bit floats (float16, bfloat16), computed in float32.

A model exported after ``.half()`` or ``.bfloat16()``, or converted to float16 keeping float32
inputs and outputs (a Cast to float16 after each input, one back before each output), holds its
weights and computes every value in a 16-bit float. The CPU kernels compute in float32, so the
import reads such a model as its float32 twin: 16-bit weights and constants widened (exactly: every
float16 and bfloat16 value is a float32), the values, inputs and outputs declared 16-bit declared
float32, and every cast or dtype attribute that names a 16-bit float naming float32. The module then
computes in float32 from the stored weights, takes 16-bit or float32 input arrays, and rounds the
outputs the model declares 16-bit to that type once, at the end (``Graph.declared_outputs``):
within the 16-bit type's rounding of an evaluation in that type all the way, and closer to the
model's exact value.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from autotune.te.workload import numpy_dtype

_DTYPE_ATTRS = ("to", "dtype")  # Cast's target; EyeLike's, the random generators' element type


@functools.cache
def _narrow() -> dict[int, str]:
    """ONNX element type -> the name of the 16-bit float types read as float32."""
    from onnx import TensorProto

    return {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


def declared(values: Any) -> dict[int, str]:
    """Position -> 16-bit float type of the ``ValueInfoProto`` s (a graph's inputs or outputs) that
    declare one."""
    narrow = _narrow()
    return {j: narrow[vi.type.tensor_type.elem_type] for j, vi in enumerate(values)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in narrow}


def widen(model: Any) -> tuple[Any, int]:
    """``model`` (a ModelProto) as its float32 twin, and the number of 16-bit tensors and type
    declarations widened: a rewritten copy, or ``model`` itself when it has none."""
    import onnx

    count = _graph(model.graph, change=False)
    if not count:
        return model, 0
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _graph(wide.graph, change=True)
    return wide, count


def as_declared(graph: Any, outputs: list[np.ndarray]) -> list[np.ndarray]:
    """``outputs`` (of ``graph``, computed in float32) with those the model declares 16-bit rounded
    to that type."""
    for j, dtype in graph.declared_outputs:
        outputs[j] = np.asarray(outputs[j]).astype(numpy_dtype(dtype))
    return outputs


def _graph(g: Any, change: bool) -> int:
    from onnx import TensorProto

    n = 0
    for vi in (*g.input, *g.output, *g.value_info):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type in _narrow():
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

    if a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i in _narrow():
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
    """A 16-bit float TensorProto (rewritten in place as the float32 tensor of the same values)."""
    from onnx import numpy_helper

    if t.data_type not in _narrow():
        return 0
    if change:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    return 1
