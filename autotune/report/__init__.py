"""``autotune report``: one self-contained HTML page about a tuning database (tuning curves, the
chosen schedules as loop nests, a model's estimated latency against the budget, errors by kind, the
targets' provenance)."""

from .collect import Report, collect, model_curve
from .page import render_page

__all__ = ["Report", "collect", "model_curve", "render_page"]
