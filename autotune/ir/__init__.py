"""Loop-nest IR, lowering, simplification and passes."""

from .lower import lower
from .nodes import Buffer, PrimFunc
from .passes import optimize

__all__ = ["Buffer", "PrimFunc", "lower", "optimize"]
