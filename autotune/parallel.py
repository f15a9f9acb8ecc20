"""``fork_map``: map a function over items in forked worker processes when the machine has cores to
spare. The function and its context are set before the fork, so only items and results are
pickled (schedules, spaces and workloads hold closures that would not pickle)."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Callable, Sequence

MIN_CORES = 4  # below this the build pool already keeps every core busy: map serially
_JOB: tuple[Callable[[Any, Any], Any], Any] | None = None


def _call(item: Any) -> Any:
    fn, ctx = _JOB  # type: ignore[misc]
    return fn(ctx, item)


def fork_map(fn: Callable[[Any, Any], Any], ctx: Any, items: Sequence[Any], min_items: int = 4) -> list[Any]:
    """``[fn(ctx, x) for x in items]``, spread over forked processes on machines with at least
    ``MIN_CORES`` cores (results must pickle; ``fn`` should catch what it wants to keep going)."""
    global _JOB
    cores = os.cpu_count() or 1
    forkable = "fork" in multiprocessing.get_all_start_methods()
    if len(items) < min_items or cores < MIN_CORES or not forkable:
        return [fn(ctx, x) for x in items]
    _JOB = (fn, ctx)
    try:
        workers = min(cores, len(items))
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(_call, items, chunksize=max(1, len(items) // (4 * workers)))
    finally:
        _JOB = None
