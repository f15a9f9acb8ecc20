"""DaskMeasurer: measures one workload's candidates on a Dask cluster. ``submit`` queues a batch
(one build task per building thread, one run task per candidate; earlier batches first, a batch's
runs before later builds) and returns at once; ``completed`` yields results as they arrive. ``measure`` is the
synchronous form the local path's WorkloadMeasurer also has (confirmation uses it)."""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..measure import ErrorKind, RunOptions
from ..schedule import Step
from ..search.measure_batch import Trial, prepare_task
from ..target import Target
from ..te import Workload
from .cluster import (
    ClusterError,
    build_hosts,
    build_threads,
    measure_resource,
    measuring_workers,
    offered_targets,
    require_measuring_workers,
)
from .tasks import Ran, Session, build_candidates, run_candidate

NO_WORKER_GRACE_S = 20.0  # runs waiting this long with no worker that can measure them: give up
POLL_S = 0.5
MAX_REBUILDS = 2  # builds redone after dying workers took them (or their results) with them
DEFAULT_DEPTH = 3  # batches in flight with one runner: one running, one building, one proposed


class RunSlots:
    """Runs in flight on one cluster's measuring workers, counted across every measurer that shares
    it (a model's tasks measured at once): never more than one a measuring worker."""

    def __init__(self) -> None:
        self.busy = 0


@dataclass
class _Candidate:
    batch: Any
    order: int  # submission order: runs start in it (earlier batches first)
    config: dict
    steps: list[Step]
    build: Any = None  # the future of the build task it is part of
    index: int = 0  # its place in that task's candidates
    run: Any = None  # its run future, once a runner slot was free
    rebuilds: int = 0


class DaskMeasurer:
    """Measure configs of ``workload`` on ``target`` through ``client`` (a dask.distributed Client).

    Runs need the worker resource ``resource`` (default ``measure_resource(target)``); raises
    ClusterError at once when no worker declares it, and from ``completed`` when none has for
    ``NO_WORKER_GRACE_S`` while runs wait. Builds are queued freely; a run is submitted only when
    its build is done and a runner is free (one run per measuring worker at a time), so a worker
    that dies was running exactly one candidate: that one is run again elsewhere, and a candidate
    whose run two dying workers held is an error (``runtime_crash``: the kernel, not the worker;
    the scheduler's allowed-failures of 1). Builds lost with dying workers are redone."""

    pipelined = True

    def __init__(self, client: Any, workload: Workload, target: Target, run_options: RunOptions | None = None,
                 seed: int | None = None, resource: str | None = None, depth: int | None = None,
                 no_worker_grace_s: float = NO_WORKER_GRACE_S, build_on: list[str] | None | str = "find",
                 slots: RunSlots | None = None) -> None:
        self.client, self.workload, self.target = client, workload, target
        self.resource = resource or measure_resource(target)
        self.no_worker_grace_s = no_worker_grace_s
        self.runners = len(require_measuring_workers(client, target, self.resource))
        self.slots = slots or RunSlots()
        # hosts whose workers may build (None: any; "find": asked of the cluster)
        self.build_on = build_hosts(client, target) if build_on == "find" else build_on
        self.builders = build_threads(self.client, self.build_on)
        # one more batch in flight per further runner, so that every runner's queue stays non-empty
        self.depth = depth or DEFAULT_DEPTH + self.runners - 1
        task = prepare_task(workload, target, run_options, seed, label=f"dask-{id(self)}")
        self.options = task.options
        # a task, not scattered data: a worker that dies holding it costs a recomputation, not the session
        self._session = client.submit(_hold, Session(workload, target, task), pure=False, priority=1)
        self.seconds = {"render": 0.0, "build": 0.0, "run": 0.0}  # summed over workers
        self.runs_by_pid: dict[int, int] = {}  # runner worker pid -> runs it made
        self.build_tasks = 0  # build tasks submitted (each builds a batch's share for one building thread)
        self._building: dict[Any, list[_Candidate]] = {}  # build future -> its candidates
        self._built: list[_Candidate] = []  # built, waiting for a runner
        self._running: dict[Any, _Candidate] = {}  # run future -> candidate
        self._order = itertools.count()
        self._batch_no = itertools.count()
        self._starved_since: float | None = None

    def submit(self, configs: list[dict], steps: list[list[Step]], batch: Any = None) -> Any:
        """Queue a batch; ``batch`` (default: a new number) comes back with each of its results."""
        n = next(self._batch_no)
        batch = n if batch is None else batch
        cands = [_Candidate(batch, next(self._order), cfg, st) for cfg, st in zip(configs, steps)]
        per = -(-len(cands) // self.builders)  # one build task per building thread and batch
        for i in range(0, len(cands), per):
            self._start_build(cands[i:i + per])
        return batch

    @property
    def in_flight(self) -> int:
        return sum(map(len, self._building.values())) + len(self._built) + len(self._running)

    def completed(self) -> Iterator[tuple[Any, Trial]]:
        """(batch, trial) of every candidate that finished since the last call; waits until at least
        one has when any are pending."""
        for _, batch, trial in wait_any([self]):
            yield batch, trial

    def pending(self) -> list[Any]:
        """The futures this measurer waits on (builds and runs in flight)."""
        return [*self._building, *self._running]

    def poll(self) -> list[tuple[Any, Trial]]:
        """(batch, trial) of the candidates finished by now, without waiting (``wait_any`` waits for
        several measurers); queued runs are started as runners free up."""
        finished = self._collect([f for f in self.pending() if f.done()])
        self._start_runs()
        return finished

    def _collect(self, done: Any) -> list[tuple[Any, Trial]]:
        finished: list[tuple[Any, Trial]] = []
        for fut in done:
            if fut in self._building:
                self._after_build(fut, self._building.pop(fut), finished)
            elif fut in self._running:
                self.slots.busy -= 1
                self._after_run(fut, self._running.pop(fut), finished)
        if finished:
            self._starved_since = None
            self._start_runs()  # the freed runners' next candidates first, then the caller's work
        return finished

    def measure(self, configs: list[dict], steps: list[list[Step]]) -> Iterator[Trial]:
        """Measure one batch and wait for it (nothing else may be in flight)."""
        self.submit(configs, steps)
        while self.in_flight:
            for _, trial in self.completed():
                yield trial

    def close(self) -> None:
        """Cancel what is still queued and drop the session's data on the cluster."""
        pending = [*self._building, *self._running, *{c.build for c in self._built}]
        if pending:
            self.client.cancel(pending)
        self.slots.busy -= len(self._running)
        self._building.clear()
        self._built.clear()
        self._running.clear()
        self._session.release()

    # -- internals ------------------------------------------------------------

    def _start_build(self, cands: list[_Candidate]) -> None:
        fut = self.client.submit(build_candidates, self._session, [c.steps for c in cands], pure=False,
                                 priority=-cands[0].order, workers=self.build_on)
        self.build_tasks += 1
        for i, c in enumerate(cands):
            c.build, c.index = fut, i
        self._building[fut] = cands

    def _start_runs(self) -> None:
        self._built.sort(key=lambda c: c.order)
        while self._built and self.slots.busy < self.runners:
            c = self._built.pop(0)
            self.slots.busy += 1
            c.run = self.client.submit(run_candidate, self._session, c.build, c.index, pure=False,
                                       resources={self.resource: 1}, priority=1)
            self._running[c.run] = c

    def _after_build(self, fut: Any, cands: list[_Candidate], finished: list) -> None:
        from distributed import KilledWorker

        if fut.status == "finished":
            self._built.extend(cands)
            return
        try:
            fut.result()
        except KilledWorker:
            again = [c for c in cands if c.rebuilds < MAX_REBUILDS]  # queued on workers that died
            finished.extend((c.batch, self._error(c, ErrorKind.BUILD_ERROR, "workers died building it"))
                            for c in cands if c.rebuilds >= MAX_REBUILDS)
            for c in again:
                c.rebuilds += 1
            if again:
                self._start_build(again)
        except Exception as err:  # noqa: BLE001 - a candidate's own failures come back as data
            raise _cluster_failure("build", err) from None

    def _after_run(self, fut: Any, c: _Candidate, finished: list) -> None:
        from distributed import KilledWorker

        try:
            ran: Ran = fut.result()
        except KilledWorker as err:
            if err.task != fut.key and c.rebuilds < MAX_REBUILDS:  # its build was lost, not its run
                c.rebuilds += 1
                self._start_build([c])
                return
            msg = f"two workers died while running it (the kernel, not the worker): {err}"
            finished.append((c.batch, self._error(c, ErrorKind.RUNTIME_CRASH, msg)))
            return
        except Exception as err:  # noqa: BLE001 - a candidate's own failures come back as data
            raise _cluster_failure("run", err) from None
        b, r = ran.built, ran.result
        self.seconds["render"] += b.render_s
        self.seconds["build"] += b.build_s
        if r is None:
            finished.append((c.batch, Trial(c.config, c.steps, (), b.error_kind, b.error_msg, b.build_s)))
            return
        self.seconds["run"] += r.run_s
        self.runs_by_pid[ran.worker_pid] = self.runs_by_pid.get(ran.worker_pid, 0) + 1
        kind = r.error_kind.value if r.error_kind is not None else None
        finished.append((c.batch, Trial(c.config, c.steps, tuple(r.costs), kind, r.error_msg, b.build_s)))

    @staticmethod
    def _error(c: _Candidate, kind: ErrorKind, msg: str) -> Trial:
        return Trial(c.config, c.steps, (), kind.value, msg, 0.0)

    def check_workers(self) -> None:
        """ClusterError once no worker has been able to measure the target for a while."""
        workers = measuring_workers(self.client, self.resource)
        if workers:
            self.runners = len(workers)  # (workers may join or leave)
            self.builders = build_threads(self.client, self.build_on)
            self._starved_since = None
            return
        now = time.monotonic()
        if self._starved_since is None:
            self._starved_since = now
        elif now - self._starved_since > self.no_worker_grace_s:
            raise ClusterError(f"no worker of the cluster can measure {self.target.kind} target "
                               f"{self.target.key} (resource {self.resource}) any more; "
                               f"{self.in_flight} candidates unmeasured, their claims released")


def wait_any(measurers: list[DaskMeasurer]) -> list[tuple[DaskMeasurer, Any, Trial]]:
    """(measurer, batch, trial) of what finished on any of ``measurers`` (which share one client),
    waiting until something has; with nothing finished for a while, each checks that workers that
    can measure its target remain."""
    from distributed import wait

    while True:
        for m in measurers:
            m._start_runs()
        pending = [f for m in measurers for f in m.pending()]
        done: Any = ()
        if pending:
            try:
                done, _ = wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:  # (wait raises where it times out)
                pass
        found = [(m, batch, trial) for m in measurers for batch, trial in m.poll()]
        if found or not any(m.in_flight for m in measurers):
            return found
        if not done:  # nothing at all finished for a while (a finished build is progress)
            for m in measurers:
                m.check_workers()


def _cluster_failure(stage: str, err: Exception) -> ClusterError:
    """A task that raised: the cluster (its software, a worker's set-up), not the candidate, whose
    errors the tasks return as results; the run stops rather than record every candidate as failed."""
    first = (str(err).strip().splitlines() or [""])[0]
    return ClusterError(f"a {stage} task failed on the cluster ({type(err).__name__}: {first}); do the "
                        "scheduler and every worker have this autotune and dask installed?")


def _hold(session: Session) -> Session:
    return session


@contextmanager
def cluster_measurers(kind: str, run_options: RunOptions | None, address: str | None, workers: int | None,
                      ) -> Iterator[list[tuple[Target, Callable[[Workload], DaskMeasurer]]]]:
    """Connect to the cluster at ``address``, or start a LocalCluster of ``workers`` processes that
    measure this host's target of ``kind``, and give per target to tune (the cluster's targets of
    ``kind``, every one it offers for ``"all"``, as its workers resolve them) a maker of one
    DaskMeasurer per workload. Every measurer and the client (and a cluster started here) are closed
    on the way out. ClusterError (one line) where the cluster cannot be reached, dask is not
    installed, or no worker can measure such a target."""
    from ..backends import backend_for
    from .cluster import close, connect

    if address is None:
        if kind == "all":
            raise ClusterError("--target all tunes the targets a cluster's workers offer: it needs --cluster")
        here = backend_for(kind).resolve()
        client = connect(None, workers, resource=measure_resource(here),
                         runner_envs=here.backend.runner_envs())
    else:
        client = connect(address)
    made: list[DaskMeasurer] = []
    try:
        targets = [here] if address is None else offered_targets(client, kind)
        for t in targets:
            require_measuring_workers(client, t, measure_resource(t))
        hosts = {t.key: build_hosts(client, t) for t in targets}
    except BaseException:
        close(client)
        raise

    def maker(target: Target) -> Callable[[Workload], DaskMeasurer]:
        slots = RunSlots()  # the target's runners, shared by the measurers of its tasks

        def make(workload: Workload) -> DaskMeasurer:
            made.append(DaskMeasurer(client, workload, target, run_options, build_on=hosts[target.key],
                                     slots=slots))
            return made[-1]
        make.pipelined = True  # type: ignore[attr-defined]  # (model tuning keeps several in flight)
        return make

    try:
        yield [(t, maker(t)) for t in targets]
    finally:
        for m in made:
            m.close()
        close(client)
