"""DaskMeasurer: measures one workload's candidates on a Dask cluster. ``submit`` queues a batch
(one build task and one run task per candidate, earlier batches first, a batch's runs before later
builds) and returns at once; ``completed`` yields results as they arrive. ``measure`` is the
synchronous form the local path's WorkloadMeasurer also has (confirmation uses it)."""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..measure import ErrorKind, RunOptions
from ..schedule import Step
from ..search.measure_batch import Trial, prepare_task
from ..target import Target
from ..te import Workload
from .cluster import ClusterError, measure_resource, measuring_workers, require_measuring_workers
from .tasks import Ran, Session, build_candidate, run_candidate

NO_WORKER_GRACE_S = 20.0  # runs waiting this long with no worker that can measure them: give up
POLL_S = 0.5
DEFAULT_DEPTH = 3  # batches in flight with one runner: one running, one building, one proposed


class DaskMeasurer:
    """Measure configs of ``workload`` on ``target`` through ``client`` (a dask.distributed Client).

    Runs need the worker resource ``resource`` (default ``measure_resource(target)``); raises
    ClusterError at once when no worker declares it, and from ``completed`` when none has for
    ``NO_WORKER_GRACE_S`` while runs wait. A candidate whose run was on two workers that died is
    an error (``runtime_crash``); one that lost a single worker is run again on another."""

    pipelined = True

    def __init__(self, client: Any, workload: Workload, target: Target, run_options: RunOptions | None = None,
                 seed: int | None = None, resource: str | None = None, depth: int | None = None,
                 no_worker_grace_s: float = NO_WORKER_GRACE_S) -> None:
        self.client, self.workload, self.target = client, workload, target
        self.resource = resource or measure_resource(target)
        self.no_worker_grace_s = no_worker_grace_s
        self.runners = len(require_measuring_workers(client, target, self.resource))
        # one more batch in flight per further runner, so that every runner's queue stays non-empty
        self.depth = depth or DEFAULT_DEPTH + self.runners - 1
        task = prepare_task(workload, target, run_options, seed, label=f"dask-{id(self)}")
        self.options = task.options
        # a task, not scattered data: a worker that dies holding it costs a recomputation, not the session
        self._session = client.submit(_hold, Session(workload, target, task), pure=False, priority=1)
        self.seconds = {"render": 0.0, "build": 0.0, "run": 0.0}  # summed over workers
        self.runs_by_pid: dict[int, int] = {}  # runner worker pid -> runs it made
        self._pending: dict[Any, tuple[Any, dict, list[Step]]] = {}  # run future -> (batch, config, steps)
        self._batch_no = itertools.count()
        self._starved_since: float | None = None

    def submit(self, configs: list[dict], steps: list[list[Step]], batch: Any = None) -> Any:
        """Queue a batch; ``batch`` (default: a new number) comes back with each of its results."""
        n = next(self._batch_no)
        batch = n if batch is None else batch
        for cfg, st in zip(configs, steps):
            built = self.client.submit(build_candidate, self._session, st, pure=False, priority=-2 * n)
            ran = self.client.submit(run_candidate, self._session, built, pure=False, priority=1 - 2 * n,
                                     resources={self.resource: 1})
            self._pending[ran] = (batch, cfg, st)
        return batch

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def completed(self) -> Iterator[tuple[Any, Trial]]:
        """(batch, trial) of every candidate that finished since the last call; waits until at least
        one has when any are pending."""
        from distributed import wait

        while self._pending:
            try:
                done, _ = wait(list(self._pending), timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:  # (wait raises where it times out)
                done = set()
            if done:
                self._starved_since = None
                for fut in done:
                    batch, cfg, st = self._pending.pop(fut)
                    yield batch, self._trial(fut, cfg, st)
                return
            self._check_workers()

    def measure(self, configs: list[dict], steps: list[list[Step]]) -> Iterator[Trial]:
        """Measure one batch and wait for it (nothing else may be in flight)."""
        self.submit(configs, steps)
        while self._pending:
            for _, trial in self.completed():
                yield trial

    def close(self) -> None:
        """Cancel what is still queued and drop the session's data on the cluster."""
        if self._pending:
            self.client.cancel(list(self._pending))
            self._pending.clear()
        self._session.release()

    def _trial(self, fut: Any, cfg: dict, st: list[Step]) -> Trial:
        from distributed import KilledWorker

        try:
            ran: Ran = fut.result()
        except KilledWorker as err:
            return Trial(cfg, st, (), ErrorKind.RUNTIME_CRASH.value,
                         f"two workers died while measuring it (the kernel, not the worker): {err}", 0.0)
        except Exception as err:  # noqa: BLE001 - a task's own failure is this candidate's error
            return Trial(cfg, st, (), ErrorKind.RUNTIME_ERROR.value, f"{type(err).__name__}: {err}", 0.0)
        b, r = ran.built, ran.result
        self.seconds["render"] += b.render_s
        self.seconds["build"] += b.build_s
        if r is None:
            return Trial(cfg, st, (), b.error_kind, b.error_msg, b.build_s)
        self.seconds["run"] += r.run_s
        self.runs_by_pid[ran.worker_pid] = self.runs_by_pid.get(ran.worker_pid, 0) + 1
        kind = r.error_kind.value if r.error_kind is not None else None
        return Trial(cfg, st, tuple(r.costs), kind, r.error_msg, b.build_s)

    def _check_workers(self) -> None:
        if measuring_workers(self.client, self.resource):
            self._starved_since = None
            return
        now = time.monotonic()
        if self._starved_since is None:
            self._starved_since = now
        elif now - self._starved_since > self.no_worker_grace_s:
            raise ClusterError(f"no worker of the cluster can measure {self.target.kind} target "
                               f"{self.target.key} (resource {self.resource}) any more; "
                               f"{len(self._pending)} candidates unmeasured, their claims released")


def _hold(session: Session) -> Session:
    return session


@contextmanager
def cluster_measurers(target: Target, run_options: RunOptions | None, address: str | None,
                      workers: int | None) -> Iterator[Callable[[Workload], DaskMeasurer]]:
    """Connect to the cluster at ``address`` (or start a LocalCluster of ``workers`` processes that
    measure ``target``) and give a maker of one DaskMeasurer per workload; every measurer and the
    client (and a cluster started here) are closed on the way out. ClusterError (one line) where the
    cluster cannot be reached, dask is not installed, or no worker can measure the target."""
    from .cluster import close, connect

    resource = measure_resource(target)
    client = connect(address, workers, resource=resource)
    try:
        require_measuring_workers(client, target, resource)
    except ClusterError:
        close(client)
        raise
    made: list[DaskMeasurer] = []

    def make(workload: Workload) -> DaskMeasurer:
        made.append(DaskMeasurer(client, workload, target, run_options))
        return made[-1]

    try:
        yield make
    finally:
        for m in made:
            m.close()
        close(client)
