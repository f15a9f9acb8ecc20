"""The graph compiler: ONNX models -> graph IR -> passes -> fused subgraphs -> tuned kernels ->
one compiled module (see docs/graph.md).

    from autotune.graph import compile_model
    module = compile_model("model.onnx", db=TuningDatabase("tuning.db"))
    outputs = module.run({"input": x})
"""

from .compiler import CompiledModule, CompileSummary, Prepared, compile_model, load_model, prepare
from .frontend import ModelImportError, UnsupportedModelError, from_onnx
from .ir import Graph, GraphError, Node, TensorType
from .passes import optimize

__all__ = [
    "CompileSummary",
    "CompiledModule",
    "Graph",
    "GraphError",
    "ModelImportError",
    "Node",
    "Prepared",
    "TensorType",
    "UnsupportedModelError",
    "compile_model",
    "from_onnx",
    "load_model",
    "optimize",
    "prepare",
]
