"""The cost-model interface, training samples and label normalization, and model files."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from .features import FEATURE_VERSION, NUM_FEATURES

MODEL_FORMAT = "autotune-cost-model"


@dataclass(frozen=True)
class Sample:
    """One measured candidate: its features, the group it is ranked within (one workload on one
    target), its cost in seconds (``inf`` when it failed); ``weight`` scales its group in training."""

    features: np.ndarray
    group: str
    cost_s: float
    weight: float = 1.0


def normalized_throughput(samples: Sequence[Sample]) -> np.ndarray:
    """Labels in [0, 1]: per group, best cost / cost (1 for the group's best, 0 for failures)."""
    best: dict[str, float] = {}
    for s in samples:
        if math.isfinite(s.cost_s) and s.cost_s > 0:
            best[s.group] = min(best.get(s.group, math.inf), s.cost_s)
    out = np.zeros(len(samples))
    for i, s in enumerate(samples):
        if s.group in best and math.isfinite(s.cost_s) and s.cost_s > 0:
            out[i] = best[s.group] / s.cost_s
    return out


def training_arrays(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, group ids, weights) sorted by group, without rows whose features are missing (NaN) and without
    groups that hold no successful measurement (nothing to rank there)."""
    y_all = normalized_throughput(samples)
    keep_groups = {s.group for s, y in zip(samples, y_all) if y > 0}
    rows = [i for i, s in enumerate(samples)
            if s.group in keep_groups and s.features is not None and np.all(np.isfinite(s.features))]
    gid: dict[str, int] = {}
    for i in rows:
        gid.setdefault(samples[i].group, len(gid))
    rows.sort(key=lambda i: gid[samples[i].group])
    if not rows:
        return np.zeros((0, NUM_FEATURES)), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0)
    X = np.stack([samples[i].features for i in rows]).astype(np.float64)
    y = y_all[rows]
    g = np.array([gid[samples[i].group] for i in rows], dtype=np.int64)
    w = np.array([samples[i].weight for i in rows], dtype=np.float64)
    return X, y, g, w


def as_matrix(candidates: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Candidates as a 2-D float array (one feature row each)."""
    X = np.asarray(candidates, dtype=np.float64)
    return X.reshape(1, -1) if X.ndim == 1 else X


class CostModel(Protocol):
    """Scores candidates: a higher score means a faster kernel (only the order matters)."""

    name: str

    def fit(self, records: Sequence[Sample]) -> None:
        """Train on measured samples (replaces what was learnt before)."""
        ...

    def predict(self, candidates: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """One score per feature row; ``-inf`` for rows with missing features."""
        ...

    def save(self, path: str | Path) -> None:
        """Write the trained model to one file."""
        ...


class BaseModel:
    """Shared pieces: constant-column pruning, NaN handling, the file container."""

    name = "base"

    def __init__(self) -> None:
        self.columns: np.ndarray | None = None  # feature columns that vary in the training data
        self.trained = False

    def _select(self, X: np.ndarray, fit: bool = False) -> np.ndarray:
        if fit:
            varies = np.ptp(X, axis=0) > 0 if len(X) else np.zeros(X.shape[1], dtype=bool)
            self.columns = np.flatnonzero(varies) if varies.any() else np.arange(X.shape[1])
        assert self.columns is not None
        return X[:, self.columns]

    def predict(self, candidates: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        X = as_matrix(candidates)
        out = np.full(len(X), -np.inf)
        ok = np.all(np.isfinite(X), axis=1)
        if not self.trained:
            out[ok] = 0.0
            return out
        if ok.any():
            out[ok] = self._predict(self._select(X[ok]))
        return out

    def _predict(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # --- files ----------------------------------------------------------------------------------
    def _payload(self) -> bytes:
        raise NotImplementedError

    def _restore(self, payload: bytes, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _meta(self) -> dict[str, Any]:
        return {}

    def save(self, path: str | Path) -> None:
        doc = {
            "format": MODEL_FORMAT,
            "kind": self.name,
            "feature_version": FEATURE_VERSION,
            "num_features": NUM_FEATURES,
            "trained": self.trained,
            "columns": None if self.columns is None else self.columns.tolist(),
            "meta": self._meta(),
            "payload": base64.b64encode(self._payload()).decode() if self.trained else None,
        }
        Path(path).write_text(json.dumps(doc))

    @classmethod
    def load(cls, path: str | Path) -> BaseModel:
        """Read a model file written by :meth:`save` (of this class or, via the base class, any)."""
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != MODEL_FORMAT:
            raise ValueError(f"{path}: not a cost-model file")
        if doc["feature_version"] != FEATURE_VERSION or doc["num_features"] != NUM_FEATURES:
            raise ValueError(f"{path}: features v{doc['feature_version']} ({doc['num_features']}), "
                             f"this code extracts v{FEATURE_VERSION} ({NUM_FEATURES}); retrain")
        kind = doc["kind"]
        from . import MODELS

        target_cls = MODELS.get(kind) if cls is BaseModel else cls
        if target_cls is None or target_cls.name != kind:
            raise ValueError(f"{path}: holds a {kind!r} model")
        model = target_cls(**doc["meta"].get("init", {}))
        model.columns = None if doc["columns"] is None else np.asarray(doc["columns"], dtype=np.int64)
        model.trained = bool(doc["trained"])
        if model.trained:
            model._restore(base64.b64decode(doc["payload"]), doc["meta"])
        return model


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0
        i = j + 1
    return ranks
