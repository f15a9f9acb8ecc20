"""Search spaces: knobs, constraints, sampling, enumeration, neighbours and encoding.

A config is a plain dict (knob name -> JSON value) so it stores as canonical JSON in the records
database; the space's generator turns a config into schedule steps.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from autotune.schedule import Step

Config = dict


def prime_factors(n: int) -> dict[int, int]:
    """``n``'s prime factorisation {prime: exponent}, by trial division up to sqrt(n)."""
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (from its factorisation: O(sqrt n), not O(n))."""
    divs = [1]
    for p, e in prime_factors(n).items():
        divs = [d * p**k for d in divs for k in range(e + 1)]
    return sorted(divs)


@lru_cache(maxsize=4096)
def factorizations(n: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """All ordered ``parts``-tuples of positive integers whose product is ``n`` (computed once per
    (n, parts): sampling a space reads them for every draw)."""
    if parts == 1:
        return ((n,),)
    return tuple((d,) + rest for d in divisors(n) for rest in factorizations(n // d, parts - 1))


@dataclass(frozen=True)
class SplitKnob:
    """Tile sizes of one loop: a factorization of ``extent`` into ``parts`` levels (outer first)."""

    name: str
    extent: int
    parts: int

    @property
    def options(self) -> tuple[tuple[int, ...], ...]:
        return factorizations(self.extent, self.parts)

    def encode(self, value: Sequence[int]) -> list[float]:
        return [math.log2(v) for v in value]


@dataclass(frozen=True)
class ChoiceKnob:
    """One of a few values; ``before``: the value a config recorded before the knob existed stands
    for (what the code did then), None where there is none."""

    name: str
    choices: tuple
    before: object = None

    @property
    def options(self) -> tuple:
        return self.choices

    def encode(self, value: object) -> list[float]:
        return [float(self.choices.index(value))]


Knob = SplitKnob | ChoiceKnob


@dataclass
class SearchSpace:
    """Knobs + constraints + a function from config to schedule steps."""

    name: str
    knobs: list[Knob]
    to_steps: Callable[[Config], list[Step]]
    constraints: list[tuple[str, Callable[[Config], bool]]] = field(default_factory=list)
    version: int = 1
    # rule-based configs for a task with no records, best first (schedules.defaults)
    rules: Callable[[SearchSpace], Iterable[Config]] | None = field(default=None, compare=False)
    # the space with every tiled axis factoring its own extent (no overlapping tiles): the one
    # records measured before padded extents existed were drawn from (None: the same space)
    unpadded: Callable[[], SearchSpace] | None = field(default=None, compare=False)

    def without(self, names: set[str]) -> SearchSpace:
        """The space with the named knobs removed: configs no longer carry them and the steps take
        their value when absent (a knob added later defaults to what the code did before it)."""
        if not names:
            return self
        return replace(self, knobs=[k for k in self.knobs if k.name not in names])

    def as_measured(self, configs: Iterable[Config]) -> SearchSpace:
        """The space ``configs`` were drawn from: this one, or where their tile sizes factor the
        axes' own extents (measured before padded extents existed), the unpadded one; knobs the
        configs lack removed (``without``)."""
        configs = list(configs)
        space = self
        splits = [k for k in self.knobs if isinstance(k, SplitKnob)]
        if self.unpadded is not None and any(
            k.name in c and math.prod(c[k.name]) != k.extent for c in configs for k in splits
        ):
            space = self.unpadded()
        recorded = set().union(*(c.keys() for c in configs))
        return space.without({k.name for k in space.knobs} - recorded)

    def _options(self) -> list[tuple]:
        return [k.options for k in self.knobs]

    @property
    def raw_size(self) -> int:
        """Product of the knob option counts (before constraints)."""
        return math.prod(len(o) for o in self._options())

    def is_valid(self, config: Config) -> bool:
        return self._well_formed(config) and self._allowed(config)

    def _allowed(self, config: Config) -> bool:
        """The constraints hold (for a config made of knob options, which is well formed)."""
        return all(check(config) for _, check in self.constraints)

    def violated(self, config: Config) -> list[str]:
        if not self._well_formed(config):
            return ["knob values"]
        return [name for name, check in self.constraints if not check(config)]

    def _well_formed(self, config: Config) -> bool:
        """Every knob present with one of its options (a hand-written config may not be)."""
        for k in self.knobs:
            if k.name not in config:
                return False
            v = config[k.name]
            if isinstance(k, SplitKnob):
                if not isinstance(v, (list, tuple)) or len(v) != k.parts or math.prod(v) != k.extent:
                    return False
                if any(not isinstance(x, int) or x < 1 for x in v):
                    return False
            elif v not in k.choices:
                return False
        return True

    def _make(self, values: Sequence) -> Config:
        return {k.name: (list(v) if isinstance(v, tuple) else v) for k, v in zip(self.knobs, values)}

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in a fixed order (grid search)."""
        for values in itertools.product(*self._options()):
            cfg = self._make(values)
            if self._allowed(cfg):
                yield cfg

    def size(self, limit: int = 50_000) -> int:
        """Number of valid configs (exact when the raw space is at most ``limit``, else estimated
        from 20,000 samples)."""
        if self.raw_size <= limit:
            return sum(1 for _ in self)
        rng = np.random.default_rng(0)
        hits = sum(self._allowed(self._random(rng)) for _ in range(20_000))
        return int(self.raw_size * hits / 20_000)

    def _random(self, rng: np.random.Generator) -> Config:
        opts = self._options()
        return self._make([o[int(rng.integers(len(o)))] for o in opts])

    def sample(self, rng: np.random.Generator, max_tries: int = 10_000) -> Config:
        """A uniformly drawn valid config (rejection sampling)."""
        for _ in range(max_tries):
            cfg = self._random(rng)
            if self._allowed(cfg):
                return cfg
        raise RuntimeError(f"space {self.name}: no valid config found in {max_tries} samples")

    def default_configs(self) -> list[Config]:
        """The valid configs the space's rules propose for an untuned task, best first and without
        repeats (knobs removed by ``without`` dropped); a deterministic function of the workload's
        shape and the target, never a sample."""
        if self.rules is None:
            raise RuntimeError(f"space {self.name}: no default rules")
        names = {k.name for k in self.knobs}
        out: list[Config] = []
        for proposal in self.rules(self):
            cfg = {k: v for k, v in proposal.items() if k in names}
            if cfg not in out and self.is_valid(cfg):
                out.append(cfg)
        if not out:
            raise RuntimeError(f"space {self.name}: its rules propose no valid config")
        return out

    def default_config(self) -> Config:
        """The schedule an untuned task compiles with: the rules' best valid config."""
        return self.default_configs()[0]

    def neighbours(self, config: Config) -> list[Config]:
        """Valid configs that differ from ``config`` in one knob."""
        out = []
        for i, knob in enumerate(self.knobs):
            for opt in knob.options:
                value = list(opt) if isinstance(opt, tuple) else opt
                if value == config[knob.name]:
                    continue
                cfg = dict(config)
                cfg[knob.name] = value
                if self.is_valid(cfg):
                    out.append(cfg)
            del i
        return out

    def completed(self, config: Config) -> Config:
        """A recorded config with the knobs added since it was recorded set to what the code did
        then (``ChoiceKnob.before``); knobs without such a value are left missing."""
        missing = {k.name: k.before for k in self.knobs if k.name not in config
                   and isinstance(k, ChoiceKnob) and k.before is not None}
        return {**config, **missing} if missing else config

    def encode(self, config: Config) -> np.ndarray:
        """A fixed-length numeric vector of a config (knob values, log2 for tile sizes)."""
        parts: list[float] = []
        config = self.completed(config)
        for k in self.knobs:
            v = config[k.name]
            parts += k.encode(tuple(v) if isinstance(v, list) else v)
        return np.asarray(parts, dtype=np.float64)

    def steps(self, config: Config) -> list[Step]:
        return self.to_steps(config)
