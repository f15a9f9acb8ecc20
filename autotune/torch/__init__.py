"""PyTorch in: ``torch.compile(model, backend="autotune")`` and compiling or tuning straight from an
``nn.Module`` (``torch.export``), with no ONNX file on the way.

    import autotune.torch
    fast = torch.compile(model.eval(), backend="autotune", options={"db": "tuning.db"})
    compiled = autotune.torch.compile(model.eval(), (x,), db="tuning.db")
    autotune.torch.tune(model.eval(), (x,), trials=200, db="tuning.db")

Core ATen operators become the graph IR's ONNX-named operators (``aten``), so a model's subgraphs
share database keys whether they came from ONNX or from PyTorch. What the compiler does not support
runs in eager PyTorch (``partition``); tensors cross the boundary without copies on the CPU. Shapes
are specialized (see ``backend``). Inference only. ``torch`` is imported only in this package.
"""

from .backend import CompiledTorchModule, Options, autotune_backend, compile, register, tune
from .partition import CompiledRegion, PartitionReport

register()

__all__ = [
    "CompiledRegion",
    "CompiledTorchModule",
    "Options",
    "PartitionReport",
    "autotune_backend",
    "compile",
    "register",
    "tune",
]
