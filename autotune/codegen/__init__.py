"""Renderers from the loop-nest IR to source code."""

from .c_base import CStyleRenderer
from .cpu import CpuRenderer
from .cuda import CudaRenderer

__all__ = ["CStyleRenderer", "CpuRenderer", "CudaRenderer"]
