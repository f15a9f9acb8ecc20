"""Task scheduler for tuning a whole model under one trial budget (after Ansor, section 6).

The objective is the model's estimated latency ``f = sum_i w_i * g_i`` (``w_i`` the task's weight,
``g_i`` its best measured latency). Every task first gets one batch (round-robin warm-up); then each
round goes to the task whose next batch is expected to lower ``f`` most, by the approximate gradient

    df/dt_i ~= w_i * (alpha * (g_i(t_i) - g_i(t_i - dt)) / dt  +  (1 - alpha) * (-g_i(t_i) / t_i))

(the recent improvement rate, blended with the optimistic guess that doubling the trials could take
the latency to zero), with an epsilon-greedy random pick now and then. A task with no valid
schedule yet is tried first; one whose space is exhausted is dropped.

Where an operator can be computed in several forms (a convolution directly or as Winograd), only one
form is compiled: ``choices`` lists, per operator, each form's tasks with their calls. The
objective counts ``min`` over the forms of their cost, and a task's weight in the gradient is its
calls outside any choice plus, per choice, its calls in each form times that form's share of a
soft minimum over the forms' costs: ``exp(-(cost - best) / (temperature * best))``, normalised. A
form clearly slower than the best stops drawing trials (the random picks still reach it); forms
close to each other are tuned side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Collection, Sequence

import numpy as np


@dataclass
class TaskState:
    """What the scheduler knows about one task."""

    weight: float
    trials: int = 0
    best_s: float = math.inf
    history: list[tuple[int, float]] = field(default_factory=list)  # (trials, best) after each round
    rounds: int = 0
    exhausted: bool = False

    @property
    def cost(self) -> float:
        return self.weight * self.best_s


Form = Sequence[tuple[int, int]]  # (task index, calls) of one way to compute an operator


class GradientScheduler:
    """Picks which task gets the next batch of trials."""

    def __init__(
        self,
        weights: list[float],
        batch_size: int = 8,
        alpha: float = 0.2,
        epsilon: float = 0.05,
        seed: int = 0,
        max_failed_rounds: int = 3,
        choices: Sequence[Sequence[Form]] = (),
        temperature: float = 0.1,
    ) -> None:
        """``weights``: each task's calls outside ``choices`` (its operators' alternative forms)."""
        self.tasks = [TaskState(float(w)) for w in weights]
        self.choices = [[list(f) for f in forms] for forms in choices]
        self.temperature = temperature
        self.batch_size = batch_size
        self.alpha = alpha
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        self.max_failed_rounds = max_failed_rounds

    def observe(self, i: int, trials: int, best_s: float, exhausted: bool = False) -> None:
        """Record the state of task ``i`` (measurements in the DB, best latency) after a round
        (or, before any round, what an earlier session left in the DB)."""
        t = self.tasks[i]
        t.trials, t.best_s = trials, best_s
        t.history.append((trials, best_s))
        t.exhausted = t.exhausted or exhausted

    def finished_round(self, i: int) -> None:
        self.tasks[i].rounds += 1

    def active(self) -> list[int]:
        return [
            i
            for i, t in enumerate(self.tasks)
            if not t.exhausted and not (math.isinf(t.best_s) and t.rounds >= self.max_failed_rounds)
        ]

    def _form_cost(self, form: Form) -> float:
        return sum(calls * self.tasks[i].best_s for i, calls in form)

    def _shares(self, forms: list[Form]) -> list[float]:
        """Each form's share of the soft minimum of the forms' costs (even while none is known)."""
        costs = [self._form_cost(f) for f in forms]
        best = min(costs)
        if math.isinf(best):
            return [1.0 / len(forms)] * len(forms)
        scale = self.temperature * best if best > 0 else 1.0
        raw = [0.0 if math.isinf(c) else math.exp(-(c - best) / scale) for c in costs]
        return [r / sum(raw) for r in raw]

    def weight(self, i: int) -> float:
        """Task ``i``'s calls, those in alternative forms counted by the forms' shares."""
        w = self.tasks[i].weight
        for forms in self.choices:
            for share, form in zip(self._shares(forms), forms):
                w += share * sum(calls for j, calls in form if j == i)
        return w

    def estimated_latency(self) -> float:
        """``sum w_i * g_i`` over the calls outside choices, plus each choice's fastest form (inf
        while a task that counts has no valid schedule)."""
        return sum(t.cost for t in self.tasks if t.weight) + sum(
            min(self._form_cost(f) for f in forms) for forms in self.choices
        )

    def gradient(self, i: int) -> float:
        t = self.tasks[i]
        if math.isinf(t.best_s) or t.trials == 0:
            return -math.inf
        back = 0.0
        if len(t.history) >= 2:
            (t0, g0), (t1, g1) = t.history[-2], t.history[-1]
            if t1 > t0 and not math.isinf(g0):
                back = (g1 - g0) / (t1 - t0)
        forward = -t.best_s / t.trials
        return self.weight(i) * (self.alpha * back + (1.0 - self.alpha) * forward)

    def next_task(self, busy: Collection[int] = ()) -> int | None:
        """The task to give the next batch to, or None when every task is done (or, with ``busy``,
        the tasks whose batches are still being measured, the only ones left)."""
        active = [i for i in self.active() if i not in busy]
        if not active:
            return None
        warm = [i for i in active if self.tasks[i].rounds == 0 and self.tasks[i].trials < self.batch_size]
        if warm:
            return warm[0]
        if len(active) > 1 and self.rng.random() < self.epsilon:
            return int(active[int(self.rng.integers(len(active)))])
        return min(active, key=lambda i: (self.gradient(i), i))
