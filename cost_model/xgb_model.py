"""XGBoost cost model: a pairwise ranker (or a regressor) on per-group normalized throughput."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .model import BaseModel, Sample, training_arrays


class XGBModel(BaseModel):
    """Gradient-boosted trees; ``objective`` "rank:pairwise" learns the order of candidates within
    each group (workload x target), which is what the search needs and what transfers across groups
    whose absolute speeds differ. "reg:squarederror" regresses the normalized throughput instead."""

    name = "xgb"

    def __init__(self, objective: str = "rank:pairwise", rounds: int = 60, eta: float = 0.3,
                 max_depth: int = 6, max_bin: int = 64, seed: int = 0, nthread: int = 1,
                 pair_method: str = "mean", pairs: int = 8) -> None:
        super().__init__()
        self.init = {"objective": objective, "rounds": rounds, "eta": eta, "max_depth": max_depth,
                     "max_bin": max_bin, "seed": seed, "nthread": nthread, "pair_method": pair_method,
                     "pairs": pairs}
        self.booster: Any = None

    def _params(self) -> dict[str, Any]:
        p = {
            "objective": self.init["objective"],
            "eta": self.init["eta"],
            "max_depth": self.init["max_depth"],
            "max_bin": self.init["max_bin"],
            "min_child_weight": 1,
            "subsample": 1.0,
            "tree_method": "hist",
            "seed": self.init["seed"],
            "nthread": self.init["nthread"],
            "verbosity": 0,
        }
        if p["objective"].startswith("rank:"):
            # "mean": `pairs` pairs sampled per candidate (the whole order); "topk": each of the top
            # `pairs` of a group against all others. Float relevance labels are fine for rank:pairwise
            p.update({"lambdarank_pair_method": self.init["pair_method"],
                      "lambdarank_num_pair_per_sample": self.init["pairs"]})
        return p

    def fit(self, records: Sequence[Sample]) -> None:
        import xgboost as xgb

        X, y, g, w = training_arrays(records)
        if len(X) < 2 or np.ptp(y) == 0:
            self.trained = False
            return
        Xs = self._select(X, fit=True)
        ranking = self.init["objective"].startswith("rank:")
        if ranking:  # one weight per group
            dtrain = xgb.DMatrix(Xs, label=y, qid=g)
            dtrain.set_weight(w[np.r_[0, np.flatnonzero(np.diff(g)) + 1]])
        else:
            dtrain = xgb.DMatrix(Xs, label=y, weight=w)
        self.booster = xgb.train(self._params(), dtrain, num_boost_round=self.init["rounds"])
        self.trained = True

    def _predict(self, X: np.ndarray) -> np.ndarray:
        # in place: the same scores as through a DMatrix, without building one for every batch of
        # annealing candidates (which cost more than the prediction)
        return np.asarray(self.booster.inplace_predict(X), dtype=np.float64)

    def _meta(self) -> dict[str, Any]:
        return {"init": self.init}

    def _payload(self) -> bytes:
        return bytes(self.booster.save_raw("json"))

    def _restore(self, payload: bytes, meta: dict[str, Any]) -> None:
        import xgboost as xgb

        self.booster = xgb.Booster(params={"nthread": self.init["nthread"]})
        self.booster.load_model(bytearray(payload))
