"""scikit-learn baseline: a random forest (or gradient boosting) regressor on normalized
throughput, so the choice of XGBoost ranking is measured against something simpler."""

from __future__ import annotations

import pickle
from typing import Any, Sequence

import numpy as np

from .model import BaseModel, Sample, training_arrays


class SklearnModel(BaseModel):
    """``kind`` "forest" (RandomForestRegressor) or "gbr" (GradientBoostingRegressor). Model files
    hold a pickle: load only files you wrote."""

    name = "sklearn"

    def __init__(self, kind: str = "forest", n_estimators: int = 64, seed: int = 0) -> None:
        super().__init__()
        if kind not in ("forest", "gbr"):
            raise ValueError(f"unknown sklearn model kind {kind!r}; valid: forest, gbr")
        self.init = {"kind": kind, "n_estimators": n_estimators, "seed": seed}
        self.estimator: Any = None

    def fit(self, records: Sequence[Sample]) -> None:
        X, y, _, w = training_arrays(records)
        if len(X) < 2 or np.ptp(y) == 0:
            self.trained = False
            return
        Xs = self._select(X, fit=True)
        if self.init["kind"] == "forest":
            from sklearn.ensemble import RandomForestRegressor

            est = RandomForestRegressor(n_estimators=self.init["n_estimators"], max_features=0.5,
                                        random_state=self.init["seed"], n_jobs=1)
        else:
            from sklearn.ensemble import GradientBoostingRegressor

            est = GradientBoostingRegressor(n_estimators=self.init["n_estimators"], max_depth=4,
                                            random_state=self.init["seed"])
        self.estimator = est.fit(Xs, y, sample_weight=w)
        self.trained = True

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.estimator.predict(X), dtype=np.float64)

    def _meta(self) -> dict[str, Any]:
        return {"init": self.init}

    def _payload(self) -> bytes:
        return pickle.dumps(self.estimator)

    def _restore(self, payload: bytes, meta: dict[str, Any]) -> None:
        self.estimator = pickle.loads(payload)  # noqa: S301 - our own model files only
