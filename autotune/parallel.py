"""Forked worker processes for the pure-Python work of a search (lowering candidates for their
features, rendering them for the compiler) on machines with a core to spare. The function and its
context are handed to the workers at the fork, so only items and results are pickled (schedules,
spaces and workloads hold closures that would not pickle).

A search's phases take turns: the model proposes, then candidates render, then gcc builds them on
every core, then they run. While the model proposes or candidates render nothing else runs, so
those maps use every core; ``ForkPool`` keeps its workers for several maps (an annealing search
scores a few hundred candidates in a dozen steps: one fork for all of them)."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Callable, Sequence

MIN_CORES = 2  # with fewer, map serially
_JOB: tuple[Callable[[Any, Any], Any], Any] | None = None


def _set_job(fn: Callable[[Any, Any], Any], ctx: Any) -> None:
    global _JOB
    _JOB = (fn, ctx)


def _call(item: Any) -> Any:
    fn, ctx = _JOB  # type: ignore[misc]
    return fn(ctx, item)


class ForkPool:
    """``map(items)`` is ``[fn(ctx, x) for x in items]``, spread over worker processes forked on
    first need (one per core, at most ``max_workers``) and kept until ``close`` (or the end of a
    ``with`` block); serial on a machine with fewer than ``MIN_CORES`` cores or for fewer than
    ``min_items`` items. Results must pickle; ``fn`` should catch what it wants to keep going."""

    def __init__(self, fn: Callable[[Any, Any], Any], ctx: Any, min_items: int = 4,
                 max_workers: int | None = None) -> None:
        self.fn, self.ctx, self.min_items, self.max_workers = fn, ctx, min_items, max_workers
        self._pool: Any = None
        self._workers = 0

    def map(self, items: Sequence[Any]) -> list[Any]:
        cores = os.cpu_count() or 1
        forkable = "fork" in multiprocessing.get_all_start_methods()
        if len(items) < self.min_items or cores < MIN_CORES or not forkable:
            return [self.fn(self.ctx, x) for x in items]
        if self._pool is None:
            self._workers = min(cores, self.max_workers or cores)
            self._pool = multiprocessing.get_context("fork").Pool(
                self._workers, initializer=_set_job, initargs=(self.fn, self.ctx))
        chunk = max(1, len(items) // (4 * self._workers))
        return self._pool.map(_call, items, chunksize=chunk)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None and exc[0] is not None:
            self._pool.terminate()
        self.close()


def fork_map(fn: Callable[[Any, Any], Any], ctx: Any, items: Sequence[Any], min_items: int = 4) -> list[Any]:
    """``[fn(ctx, x) for x in items]`` through a ``ForkPool`` of its own (no more workers than
    items)."""
    with ForkPool(fn, ctx, min_items, max_workers=len(items)) as pool:
        return pool.map(items)
