"""Cost models over features of the lowered IR: an XGBoost ranker and a scikit-learn baseline.

``features.extract(workload, steps, target)`` gives a candidate's fixed-length feature vector;
a :class:`CostModel` is trained on :class:`Sample` records (``fit``), scores feature rows
(``predict``: higher is faster) and round-trips through one file (``save`` / :func:`load_model`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .features import FEATURE_VERSION, NUM_FEATURES, extract, extract_batch, feature_names
from .model import BaseModel, CostModel, Sample, normalized_throughput, spearman
from .sklearn_model import SklearnModel
from .xgb_model import XGBModel

MODELS: dict[str, type[BaseModel]] = {"xgb": XGBModel, "sklearn": SklearnModel}


def make_model(name: str, **options: Any) -> BaseModel:
    """A fresh model by name: "xgb" or "sklearn"."""
    if name not in MODELS:
        raise ValueError(f"unknown cost model {name!r}; valid: {', '.join(MODELS)}")
    return MODELS[name](**options)


def load_model(path: str | Path) -> BaseModel:
    """Read any model file written by ``save``."""
    return BaseModel.load(path)


__all__ = ["FEATURE_VERSION", "MODELS", "NUM_FEATURES", "BaseModel", "CostModel", "Sample", "SklearnModel",
           "XGBModel", "extract", "extract_batch", "feature_names", "load_model", "make_model",
           "normalized_throughput", "spearman"]
