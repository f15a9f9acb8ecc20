"""The tuner interface and the two model-free strategies (random, grid)."""

from __future__ import annotations

from typing import Callable, Iterator, Protocol, Sequence

import numpy as np

from records import config_key
from schedules import Config, SearchSpace

from .context import TuneContext


class Tuner(Protocol):
    """Proposes configs to measure and learns from their results."""

    name: str

    def next_batch(self, n: int) -> list[Config]:
        """Up to ``n`` new configs (fewer, or none, when the space is exhausted)."""
        ...

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        """Results of measured configs (seconds; ``inf`` for errors)."""
        ...


class RandomTuner:
    """Uniform samples of the valid space, never repeating a config already seen."""

    name = "random"

    def __init__(
        self, space: SearchSpace, seed: int = 0, exclude: set[str] | None = None, max_misses: int = 2000
    ) -> None:
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.seen = set(exclude or ())
        self.max_misses = max_misses

    def next_batch(self, n: int) -> list[Config]:
        out: list[Config] = []
        misses = 0
        while len(out) < n and misses < self.max_misses:
            cfg = self.space.sample(self.rng)
            key = config_key(cfg)
            if key in self.seen:
                misses += 1
                continue
            self.seen.add(key)
            out.append(cfg)
        return out

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        del costs  # random search does not learn; configs measured elsewhere are not proposed
        self.seen.update(config_key(c) for c in configs)


class GridTuner:
    """Every valid config in the space's fixed order (exhaustive search)."""

    name = "grid"

    def __init__(self, space: SearchSpace, seed: int = 0, exclude: set[str] | None = None) -> None:
        del seed  # the order is fixed
        self.iter: Iterator[Config] = iter(space)
        self.exclude = set(exclude or ())

    def next_batch(self, n: int) -> list[Config]:
        out: list[Config] = []
        for cfg in self.iter:
            if config_key(cfg) in self.exclude:
                continue
            out.append(cfg)
            if len(out) == n:
                break
        return out

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        del costs  # configs measured elsewhere are skipped
        self.exclude.update(config_key(c) for c in configs)


def _model_strategy(model: str, transfer: bool) -> Callable[..., Tuner]:
    """Model-guided tuners (autotune.search.xgb_tuner), imported on first use: xgboost is heavy."""

    def make(
        space: SearchSpace, seed: int = 0, exclude: set[str] | None = None, context: TuneContext | None = None
    ) -> Tuner:
        from .xgb_tuner import make_model_tuner

        return make_model_tuner(model, transfer)(space, seed=seed, exclude=exclude, context=context)

    make.needs_context = True  # type: ignore[attr-defined]
    return make


STRATEGIES = {
    "random": RandomTuner,
    "grid": GridTuner,
    "xgb": _model_strategy("xgb", True),  # transfer from other records in the DB unless turned off
    "xgb-no-transfer": _model_strategy("xgb", False),
    "sklearn": _model_strategy("sklearn", True),
}


def make_tuner(
    strategy: str, space: SearchSpace, seed: int, exclude: set[str], context: TuneContext | None = None
) -> Tuner:
    """A tuner by strategy name; ``context`` (a TuneContext) is what model-guided tuners need."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(sorted(STRATEGIES))}")
    factory = STRATEGIES[strategy]
    if getattr(factory, "needs_context", False):
        return factory(space, seed=seed, exclude=exclude, context=context)
    return factory(space, seed=seed, exclude=exclude)
