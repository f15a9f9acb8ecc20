"""Model-guided search (``--strategy xgb`` / ``sklearn``): simulated annealing over the space on a
cost model's scores, batches picked greedily with a diversity filter plus epsilon-random configs,
the model retrained after every batch, optionally seeded from other workloads' records (transfer)
and stopped early after a run of trials without improvement."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from records import config_key
from schedules import Config, SearchSpace

from ..parallel import ForkPool, fork_map
from .context import TuneContext


class ModelTuner:
    """A Tuner whose proposals come from a cost model (cost_model.make_model(``model``))."""

    name = "xgb"
    needs_context = True

    def __init__(self, space: SearchSpace, seed: int = 0, exclude: set[str] | None = None,
                 context: TuneContext | None = None, model: str = "xgb", transfer: bool = True, *,
                 eps: float = 0.0, local: float = 0.0, elite: int = 3, chains: int = 32, sa_steps: int = 12,
                 diversity: int = 2, rank_temp: float = 0.0,
                 early_stop: int | None = None, max_transfer: int = 1500, transfer_until: int | None = 64,
                 features: str = "both", model_options: dict | None = None, first: str = "random",
                 own_share: float = 1.0, novel: float = 0.5, novel_first: bool = True,
                 endgame: float = 0.25, rules: bool = True) -> None:
        from cost_model import make_model

        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.seen: set[str] = set(exclude or ())
        self.ctx = context
        self.model = make_model(model, seed=seed, **(model_options or {}))
        # the record label says what was asked for: the strategy's or the context's (--no-transfer)
        wants_transfer = bool(transfer and (context is None or context.transfer))
        if features not in ("ir", "knob", "both"):
            raise ValueError(f"features must be 'ir', 'knob' or 'both', not {features!r}")
        base = model if features == "both" else f"{model}-{features}"
        self.name = base if wants_transfer else f"{base}-no-transfer"
        # "knob": the task's own model reads the space's knob encoding, which learns faster from a
        # task's first samples; knob vectors mean nothing in another workload's space, so transfer
        # works through a separate prior model on IR features, trained on the other workloads'
        # records: it picks the first batch alone, then its score is one more input column of the
        # task's own model (see _train)
        # "both" (the default): the IR model (with transfer) and a knob model of the task's own
        # samples score every candidate; their scores, each standardized over the measured
        # configs, are added. "ir": the IR model alone. Measured in docs/cost_model.md.
        self.feature_kind = features
        self.knob_model: Any = None
        if features == "both":
            self.knob_model = make_model(model, seed=seed, **(model_options or {}))
        self._norms: tuple[tuple[float, float], tuple[float, float]] | None = None
        self.transfer = wants_transfer and context is not None
        self.prior: Any = None  # the transfer prior of knob features (trained on first use)
        if first not in ("random", "diverse"):
            raise ValueError(f"first must be 'random' or 'diverse', not {first!r}")
        self.first = first  # the batches before a model exists: random, or spread over the knobs
        self.eps, self.chains, self.sa_steps, self.diversity = eps, chains, sa_steps, diversity
        self.local, self.elite = local, elite
        self.rank_temp = rank_temp  # > 0: sample picks by rank (weight exp(-rank / (rank_temp * n)))
        self._neighbour_lists: dict[str, list[Config]] = {}
        self.early_stop = early_stop if early_stop is not None else (context.early_stop if context else None)
        self.max_transfer = max_transfer
        self.transfer_until = transfer_until  # own measurements after which transfer data is dropped
        self.own_share = own_share  # the task's own samples weigh this many times all transfer data
        self.novel = novel  # share of the model's picks kept `diversity` knobs from every measured config
        # measure those first: they hit as often as the top picks, and measured first they cut the
        # trials to the target on the replay set (docs/cost_model.md)
        self.novel_first = novel_first
        # the last `endgame` share of the trial budget (context.budget) only exploits: no random or
        # novel picks, and half the model's picks are neighbours of the fastest measured configs
        self.endgame = endgame
        # the first batch of a task starts with the configs its space's rules propose (what an
        # untuned compile takes, best first): every search then holds at least the untuned
        # schedule, and the model learns from good configs early (measured: docs/cost_model.md)
        self.rules = rules
        self._rules_offered = False  # the rules' configs are offered once per tuning session
        self.budget = context.budget if context is not None else None
        self._codes_of = [{_hashable(o): j for j, o in enumerate(k.options)} for k in space.knobs]
        self.cache: dict[str, np.ndarray | None] = (
            context.feature_cache if context is not None and context.feature_cache is not None else {})
        self.options = [[list(o) if isinstance(o, tuple) else o for o in k.options] for k in space.knobs]
        self.measured: list[tuple[Config, float]] = []
        self.best_cost = math.inf
        self.since_best = 0
        self.pool: list[Config] = []  # annealing states carried from batch to batch
        self._transfer_samples: list | None = None
        self._lowering: ForkPool | None = None  # the workers of the batch being proposed
        self._dirty = True
        self.trained = False
        self.stopped = False
        self._load_history()

    # --- data -------------------------------------------------------------------------------------
    def _load_history(self) -> None:
        """Earlier measurements of this task in the DB (a resumed session) are training data."""
        if self.ctx is None or self.ctx.db is None:
            return
        names = [k.name for k in self.space.knobs]
        for rec in self.ctx.db.measurements(self.ctx.workload.key, self.ctx.target.key):
            config = self.space.completed(rec.config)  # (recorded before a knob was added)
            if any(n not in config for n in names):  # a space that named its knobs otherwise
                self.seen.add(config_key(rec.config))
                continue
            self.measured.append((config, rec.mean_s))
            self.seen |= {config_key(rec.config), config_key(config)}
            self.best_cost = min(self.best_cost, rec.mean_s)

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        """Feature rows of configs: IR features (cached; NaN rows where lowering fails), or knob
        encodings followed, where there is a transfer prior, by its score (no context: knobs)."""
        if self.ctx is None or self.feature_kind == "knob":  # (no workload to lower: knobs too)
            knobs = np.stack([self.space.encode(c) for c in configs]) if configs else np.zeros((0, 0))
            prior = self._prior_scores(configs)
            return knobs if prior is None else np.column_stack([knobs, prior])
        return self.ir_features(configs)

    def ir_features(self, configs: Sequence[Config]) -> np.ndarray:
        """IR feature rows of configs (cached; NaN rows where lowering fails)."""
        from cost_model.features import NUM_FEATURES

        out = np.full((len(configs), NUM_FEATURES), np.nan)
        todo = {config_key(c): c for c in configs if config_key(c) not in self.cache}
        if todo:  # lowering is pure Python: spread over the cores (the batch's pool if open)
            items = list(todo.values())
            if self._lowering is not None:
                rows = self._lowering.map(items)
            else:
                rows = fork_map(_features_or_none, self._lowering_job(), items)
            for k, f in zip(todo, rows):
                self.cache[k] = f
        for i, c in enumerate(configs):
            f = self.cache[config_key(c)]
            if f is not None:
                out[i] = f
        return out

    def _lowering_job(self) -> tuple:
        """What a worker needs to lower a config of this task for its features."""
        return self.ctx.workload, self.space, self.ctx.target

    def transfer_samples(self) -> list:
        """Samples of other workloads / targets (loaded once; [] when transfer is off)."""
        if self._transfer_samples is None:
            self._transfer_samples = []
            if self.transfer:
                if self.ctx.transfer_samples is not None:
                    self._transfer_samples = list(self.ctx.transfer_samples)
                elif self.ctx.db is not None:
                    from cost_model.dataset import samples_from_db

                    self._transfer_samples = samples_from_db(
                        self.ctx.db, exclude=[(self.ctx.workload.key, self.ctx.target.key)],
                        limit=self.max_transfer, seed=self.seed, cache=self.ctx.transfer_cache)
        return self._transfer_samples

    def _prior_scores(self, configs: Sequence[Config]) -> np.ndarray | None:
        """The transfer prior's scores of configs (knob features with transfer data), else None;
        -inf where the schedule does not lower."""
        if self.feature_kind != "knob" or self.ctx is None or not self.transfer_samples():
            return None
        if self.prior is None:
            from cost_model import make_model

            self.prior = make_model("xgb", seed=self.seed)
            self.prior.fit(self.transfer_samples())
        if not configs:
            return np.zeros(0)
        X = self.ir_features(configs)
        ok = ~np.isnan(X).any(axis=1)
        out = np.full(len(configs), -np.inf)
        if ok.any():
            out[ok] = self.prior.predict(X[ok])
        return out

    def _train(self) -> None:
        from cost_model import Sample

        self._dirty = False
        own = []
        if self.measured:
            X = self.features([c for c, _ in self.measured])
            own = [Sample(x, "self", cost) for x, (_, cost) in zip(X, self.measured)]
        if self.feature_kind == "knob" and self.ctx is not None:
            # the task's own samples only (transfer data lives in the prior); before any, the prior
            # alone ranks the first batch
            if not any(math.isfinite(c) for _, c in self.measured):
                self.trained = self._prior_scores([]) is not None
                return
            self.model.fit(own)
            self.trained = bool(getattr(self.model, "trained", True))
            return
        transfer = self.transfer_samples()
        if self.transfer_until is not None and len(own) >= self.transfer_until:
            transfer = []  # enough data of the task itself: other workloads would only blur it
        if own and transfer:  # the task at hand weighs own_share times all transfer data together
            w = max(1.0, self.own_share * len(transfer) / len(own))
            own = [Sample(s.features, s.group, s.cost_s, w) for s in own]
        if self.ctx is None and not any(math.isfinite(c) for _, c in self.measured):
            self.trained = False
            return
        self.model.fit(own + transfer)
        self.trained = bool(getattr(self.model, "trained", True))
        if self.knob_model is not None and self.ctx is not None:  # (no context: knobs already)
            self._fit_knob_model()

    def _fit_knob_model(self) -> None:
        """The second model of ``features="both"``: knob encodings of the task's own samples; the
        means and spreads of both models' scores over the measured configs put them on one scale."""
        from cost_model import Sample

        self._norms = None
        done = [(c, cost) for c, cost in self.measured if math.isfinite(cost)]
        if len(done) < 2:
            return
        configs = [c for c, _ in self.measured]
        knobs = np.stack([self.space.encode(c) for c in configs])
        self.knob_model.fit([Sample(x, "self", cost) for x, (_, cost) in zip(knobs, self.measured)])
        if not getattr(self.knob_model, "trained", True):
            return
        scores = [self.model.predict(self.ir_features(configs)), self.knob_model.predict(knobs)]
        norms = []
        for sc in scores:
            sc = sc[np.isfinite(sc)]
            norms.append((float(sc.mean()), float(sc.std()) or 1.0) if len(sc) > 1 else (0.0, 1.0))
        self._norms = (norms[0], norms[1])

    # --- search -----------------------------------------------------------------------------------
    def _random_unseen(self, n: int, taken: set[str], max_misses: int = 500) -> list[Config]:
        out: list[Config] = []
        misses = 0
        while len(out) < n and misses < max_misses:
            cfg = self.space.sample(self.rng)
            k = config_key(cfg)
            if k in self.seen or k in taken:
                misses += 1
                continue
            taken.add(k)
            out.append(cfg)
        return out

    def _diverse_unseen(self, n: int, taken: set[str], pool: int = 16) -> list[Config]:
        """``n`` unseen configs spread over the knob encoding: from ``pool * n`` random ones, each
        pick the farthest (Euclidean) from those already picked or measured."""
        cands = self._random_unseen(pool * n, set(taken))
        if len(cands) <= n:
            taken.update(config_key(c) for c in cands)
            return cands
        x = np.stack([self.space.encode(c) for c in cands])
        span = x.max(axis=0) - x.min(axis=0)
        x = x / np.where(span > 0, span, 1.0)
        near = np.full(len(cands), np.inf)
        for c, _ in self.measured:
            v = self.space.encode(c) / np.where(span > 0, span, 1.0)
            near = np.minimum(near, np.linalg.norm(x - v, axis=1))
        out: list[Config] = []
        i = int(self.rng.integers(len(cands))) if not np.isfinite(near).any() else int(np.argmax(near))
        while len(out) < n:
            out.append(cands[i])
            taken.add(config_key(cands[i]))
            near = np.minimum(near, np.linalg.norm(x - x[i], axis=1))
            near[i] = -np.inf
            i = int(np.argmax(near))
        return out

    def _neighbour(self, cfg: Config) -> Config:
        """A random valid config one knob away (falls back to the space's full neighbour list)."""
        knobs = self.space.knobs
        for _ in range(16):
            i = int(self.rng.integers(len(knobs)))
            opts = self.options[i]
            if len(opts) < 2:
                continue
            value = opts[int(self.rng.integers(len(opts)))]
            if value == cfg[knobs[i].name]:
                continue
            new = dict(cfg)
            new[knobs[i].name] = value
            if self.space.is_valid(new):
                return new
        full = self.space.neighbours(cfg)
        return full[int(self.rng.integers(len(full)))] if full else cfg

    def _score(self, configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.zeros(0)
        if self.feature_kind == "knob" and not any(math.isfinite(c) for _, c in self.measured):
            prior = self._prior_scores(configs)  # nothing of the task measured yet
            if prior is not None:
                return prior
        scores = self.model.predict(self.features(configs))  # -inf where a feature is missing
        if self._norms is None:
            return scores
        (m_ir, s_ir), (m_knob, s_knob) = self._norms
        knob = self.knob_model.predict(np.stack([self.space.encode(c) for c in configs]))
        return (scores - m_ir) / s_ir + (knob - m_knob) / s_knob

    def _anneal(self) -> list[tuple[float, Config]]:
        """Simulated annealing from the carried states, the best measured configs and random ones;
        returns every unseen config visited with its score, best first."""
        starts = list(self.pool)
        best = sorted((c for c in self.measured if math.isfinite(c[1])), key=lambda t: t[1])
        starts += [c for c, _ in best[: max(1, self.chains // 4)]]
        starts += [self.space.sample(self.rng) for _ in range(max(0, self.chains - len(starts)))]
        points = starts[: self.chains]
        scores = self._score(points)
        found: dict[str, tuple[float, Config]] = {}

        def note(cfgs: Sequence[Config], sc: np.ndarray) -> None:
            for c, s in zip(cfgs, sc):
                k = config_key(c)
                if k not in self.seen and np.isfinite(s):
                    found[k] = (float(s), c)

        note(points, scores)
        for step in range(self.sa_steps):
            temp = max(1e-3, 1.0 - step / self.sa_steps)
            proposals = [self._neighbour(p) for p in points]
            ps = self._score(proposals)
            note(proposals, ps)
            finite = np.concatenate([scores[np.isfinite(scores)], ps[np.isfinite(ps)]])
            scale = float(finite.std()) if len(finite) > 1 and finite.std() > 0 else 1.0
            with np.errstate(over="ignore", invalid="ignore"):
                gain = np.where(np.isfinite(ps), (ps - scores) / (scale * temp), -np.inf)
                accept = (gain > 0) | (self.rng.random(len(points)) < np.exp(np.minimum(gain, 0)))
            for i in np.flatnonzero(accept):
                points[i], scores[i] = proposals[i], ps[i]
        self.pool = points
        return sorted(found.values(), key=lambda t: -t[0])

    def _local_candidates(self) -> list[tuple[float, Config]]:
        """Unseen neighbours of the best measured configs, best-scored first: the model decides which
        neighbour, but the batch keeps probing around what measured fastest (the model may rank the
        true best below a plateau of near-ties)."""
        best = sorted((c for c in self.measured if math.isfinite(c[1])), key=lambda t: t[1])[: self.elite]
        cands: dict[str, Config] = {}
        for cfg, _ in best:
            key = config_key(cfg)
            if key not in self._neighbour_lists:
                self._neighbour_lists[key] = self.space.neighbours(cfg)
            for nb in self._neighbour_lists[key]:
                k = config_key(nb)
                if k not in self.seen:
                    cands[k] = nb
        configs = list(cands.values())
        scores = self._score(configs)
        return sorted(((float(s), c) for s, c in zip(scores, configs) if np.isfinite(s)), key=lambda t: -t[0])

    def _codes(self, cfg: Config) -> np.ndarray:
        """Each knob's option index in ``cfg`` (-1 for a value the space lacks: an older space's)."""
        knobs = self.space.knobs
        return np.array([m.get(_hashable(cfg.get(k.name)), -1) for m, k in zip(self._codes_of, knobs)])

    def _take(self, ranked: list[tuple[float, Config]], k: int, taken: set[str], picked: list[Config],
              away: Sequence[Config] = ()) -> None:
        """Append up to ``k`` of ``ranked`` (best first) to ``picked``: first those at least
        ``diversity`` knobs from every pick and every config of ``away``, then whatever ranks best."""
        far = [np.stack([self._codes(c) for c in away])] if away else []
        near = [self._codes(p) for p in picked]
        goal = len(picked) + k
        for pass_ in (0, 1):
            for _, c in ranked:
                if len(picked) >= goal:
                    return
                key = config_key(c)
                if key in taken:
                    continue
                code = self._codes(c)  # knobs that differ: entries unequal to a row of far / near
                if pass_ == 0 and any(int((rows != code).sum(axis=-1).min()) < self.diversity
                                      for rows in (*far, *near)):
                    continue
                taken.add(key)
                picked.append(c)
                near.append(code)

    def next_batch(self, n: int) -> list[Config]:
        """Up to ``n`` unmeasured configs; the candidates it lowers for their features share one
        pool of forked workers (``autotune.parallel``)."""
        if self.ctx is None:
            return self._next_batch(n)
        with ForkPool(_features_or_none, self._lowering_job()) as pool:
            self._lowering = pool
            try:
                return self._next_batch(n)
            finally:
                self._lowering = None

    def _next_batch(self, n: int) -> list[Config]:
        if self.early_stop is not None and self.since_best >= self.early_stop and self.measured:
            self.stopped = True
            return []
        if self._dirty:
            self._train()
        taken: set[str] = set()
        picked: list[Config] = self._rule_configs(n, taken)
        rest = n - len(picked)
        late = bool(self.endgame and self.budget and len(self.measured) >= (1 - self.endgame) * self.budget)
        eps, novel, local = (0.0, 0.0, max(self.local, 0.5)) if late else (self.eps, self.novel, self.local)
        n_random = rest if not self.trained else int((self.rng.random(rest) < eps).sum())
        if n_random < rest:
            n_local = min(rest - n_random, int(round(local * rest)))
            for _, c in (self._local_candidates()[:n_local] if n_local > 0 else []):
                taken.add(config_key(c))
                picked.append(c)
            ranked = self._anneal()
            if self.rank_temp > 0 and len(ranked) > 1:
                # sample an order by rank: strict top-n exploits a model that is only roughly right
                w = np.exp(-np.arange(len(ranked)) / (self.rank_temp * len(ranked)))
                order = self.rng.choice(len(ranked), size=len(ranked), replace=False, p=w / w.sum())
                ranked = [ranked[i] for i in order]
            n_model = n - n_random - len(picked)
            n_novel = int(round(novel * n_model))
            self._take(ranked, n_model - n_novel, taken, picked)
            if n_novel:  # the rest away from every measured config: a jump to another basin
                top = len(picked)
                self._take(ranked, n_novel, taken, picked, away=[c for c, _ in self.measured])
                if self.novel_first:
                    picked = picked[top:] + picked[:top]
        if not self.trained and self.first == "diverse":
            picked += self._diverse_unseen(n - len(picked), taken)
        picked += self._random_unseen(n - len(picked), taken)
        if len(picked) < n and self.space.raw_size <= 200_000:
            # rejection sampling keeps missing: the space is nearly used up, so walk it
            for cfg in self.space:
                if len(picked) >= n:
                    break
                k = config_key(cfg)
                if k not in self.seen and k not in taken:
                    taken.add(k)
                    picked.append(cfg)
        self.seen.update(taken)
        return picked

    def _rule_configs(self, n: int, taken: set[str]) -> list[Config]:
        """Up to ``n`` of the rules' configs not yet measured, once per tuning session (none where
        the task already has measurements of its own, or the space has no rules)."""
        if not self.rules or self._rules_offered or self.measured or self.space.rules is None:
            return []
        self._rules_offered = True
        try:
            proposed = self.space.default_configs()[:n]
        except RuntimeError:  # rules that propose no valid config: the search starts as before
            return []
        out = []
        for cfg in proposed:
            k = config_key(cfg)
            if k not in self.seen and k not in taken:
                taken.add(k)
                out.append(cfg)
        return out

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        for c, cost in zip(configs, costs):
            self.seen.add(config_key(c))
            self.measured.append((c, float(cost)))
            if cost < self.best_cost:
                self.best_cost = float(cost)
                self.since_best = 0
            else:
                self.since_best += 1
        self._dirty = True


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _features_or_none(job: tuple, config: Config) -> np.ndarray | None:
    """Features of one config (None where the schedule does not lower: it scores -inf)."""
    from cost_model.features import extract

    workload, space, target = job
    try:
        return extract(workload, space.steps(config), target)
    except Exception:  # noqa: BLE001 - an illegal schedule scores -inf, nothing more
        return None


def make_model_tuner(model: str, transfer: bool) -> Any:
    """A factory with the ``make_tuner`` call signature, for the STRATEGIES table."""

    def make(space: SearchSpace, seed: int = 0, exclude: set[str] | None = None,
             context: TuneContext | None = None) -> ModelTuner:
        opts = dict(context.options) if context is not None else {}
        return ModelTuner(space, seed=seed, exclude=exclude, context=context, model=model,
                          transfer=transfer, **opts)

    make.needs_context = True  # type: ignore[attr-defined]
    return make
