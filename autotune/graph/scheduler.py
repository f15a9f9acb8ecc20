"""Task scheduler for tuning a whole model under one trial budget (after Ansor, section 6).

The objective is the model's estimated latency ``f = sum_i w_i * g_i`` (``w_i`` the task's weight,
``g_i`` its best measured latency). Every task first gets one batch (round-robin warm-up); then each
round goes to the task whose next batch is expected to lower ``f`` most, by the approximate gradient

    df/dt_i ~= w_i * (alpha * (g_i(t_i) - g_i(t_i - dt)) / dt  +  (1 - alpha) * (-g_i(t_i) / t_i))

(the recent improvement rate, blended with the optimistic guess that doubling the trials could take
the latency to zero), with an epsilon-greedy random pick now and then. A task with no valid
schedule yet is tried first; one whose space is exhausted is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Collection

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
    ) -> None:
        self.tasks = [TaskState(float(w)) for w in weights]
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

    def estimated_latency(self) -> float:
        """``sum w_i * g_i`` (inf while a task has no valid schedule)."""
        return sum(t.cost for t in self.tasks)

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
        return t.weight * (self.alpha * back + (1.0 - self.alpha) * forward)

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
