"""An auto-tuning tensor compiler: tensor expressions, schedule search, measured kernels."""

__version__ = "0.1.0"
