"""Reaching a Dask cluster: connect to a running scheduler, or start a LocalCluster on this host
whose workers measure this host's target. Workers declare what they can measure as Dask worker
resources named by ``measure_resource``."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

ALLOWED_FAILURES = 1  # a task that was running on 2 workers that died is failed (KilledWorker)
CONNECT_TIMEOUT_S = 10.0
# worker settings the measuring workers need: they start their own runner processes, which a
# daemonic process may not have
WORKER_CONFIG = {
    "distributed.worker.daemon": False,
    "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
}


class ClusterError(RuntimeError):
    """The cluster cannot be reached or cannot measure the target (one line)."""


def measure_resource(target: Any) -> str:
    """The worker resource runs of ``target`` need: ``measure-<kind>``, or ``measure-<kind>-<label>``
    for a target whose fingerprint carries a ``label`` (two kinds of machine of one kind of target,
    each with its own records)."""
    label = target.fingerprint.get("label")
    return f"measure-{target.kind}" + (f"-{label}" if label else "")


def connect(address: str | None = None, workers: int | None = None, resource: str = "measure-cpu",
            runner_envs: list[dict[str, str]] | None = None, threads_per_worker: int = 1) -> Any:
    """A dask.distributed Client: of the scheduler at ``address``, or of a new LocalCluster of
    ``workers`` worker processes (``threads_per_worker`` threads each). With ``runner_envs`` (the
    target backend's: a GPU each) one worker per runner declares ``resource`` and gets that
    environment, the others only build; without (a CPU, whose runners take turns), every worker
    declares it. The caller closes it (and its cluster, ``client.cluster``): ``close``."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:  # the [dask] extra is missing
        raise ClusterError('measuring on a cluster needs dask: pip install "dask[distributed]"') from None

    if address is not None:
        try:
            return Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as err:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: {err}") from None
    if not workers or workers < 1:
        raise ClusterError("a local cluster needs at least one worker")
    logging.getLogger("distributed").setLevel(logging.WARNING)  # its start and stop lines are noise here
    dask.config.set(WORKER_CONFIG)  # for good: the nannies read it again to restart a worker that died
    cluster = LocalCluster(n_workers=0, threads_per_worker=threads_per_worker, processes=True,
                           dashboard_address=None, silence_logs=40)
    envs = (runner_envs if runner_envs is not None else [{}] * workers)[:workers]
    for i in range(workers):
        spec = dict(cluster.new_spec, options=dict(cluster.new_spec["options"]))
        if i < len(envs):
            spec["options"].update(resources={resource: 1}, env=envs[i])
        cluster.worker_spec[f"{'measure' if i < len(envs) else 'build'}-{i}"] = spec
    cluster.scale(workers)
    client = Client(cluster)
    client.wait_for_workers(workers)
    return client


def measuring_workers(client: Any, resource: str) -> list[str]:
    """Addresses of the workers that declare ``resource`` now."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return sorted(addr for addr, w in info.items() if w.get("resources", {}).get(resource, 0) > 0)


def _kind_and_label(resource: str) -> tuple[str, str]:
    """``measure-<kind>[-<label>]`` -> (kind, label)."""
    from ..backends import kinds

    rest = resource.removeprefix("measure-")
    for kind in sorted(kinds(), key=len, reverse=True):
        if rest == kind or rest.startswith(kind + "-"):
            return kind, rest[len(kind) + 1:]
    raise ClusterError(f"a worker declares {resource}, a target kind this autotune does not know")


def _target_here(resource: str) -> Any:
    """This worker's target for the resource it declares (runs on the worker)."""
    from ..backends import backend_for
    from ..target import make_target

    kind, label = _kind_and_label(resource)
    target = backend_for(kind).resolve()
    return make_target(kind, {**target.fingerprint, "label": label}) if label else target


def offered_targets(client: Any, kind: str) -> list[Any]:
    """The targets the cluster's workers measure: one per ``measure-*`` resource they declare (of
    ``kind``, or of every kind for ``"all"``), each as a worker that declares it resolves it, so the
    records are keyed by the machines that measure them, not by the client's. ClusterError (one line)
    where none is offered."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    offered = sorted({r for w in info.values() for r, n in w.get("resources", {}).items()
                      if r.startswith("measure-") and n > 0})
    wanted = [r for r in offered if kind == "all" or _kind_and_label(r)[0] == kind]
    if not wanted:
        what, res = ("any target", "measure-<kind>") if kind == "all" else (f"{kind} targets",
                                                                             f"measure-{kind}")
        raise ClusterError(f"no worker of the cluster can measure {what}: none declares a {res} resource "
                           "(see README, 'Tuning on a cluster')")
    targets = []
    for resource in wanted:
        addr = measuring_workers(client, resource)[0]
        try:
            targets.append(client.run(_target_here, resource, workers=[addr])[addr])
        except Exception as err:  # noqa: BLE001 - the worker's set-up, in one line
            first = (str(err).strip().splitlines() or [""])[0]
            raise ClusterError(f"the worker {addr} could not describe its {resource} target "
                               f"({type(err).__name__}: {first})") from None
    return targets


def build_hosts(client: Any, target: Any) -> list[str] | None:
    """Where builds for ``target`` may be made: anywhere (None) where its backend's builds are
    portable; else the hosts (a worker's restarts keep its host, not its address) whose machine is
    the target's (the same fingerprint, label aside)."""
    if not target.backend.builds_for_own_host:
        return None
    want = {k: v for k, v in target.fingerprint.items() if k != "label"}
    here = client.run(_host_fingerprint, target.kind)
    if all(fp == want for fp in here.values()):
        return None  # every worker's host is such a machine: no restriction needed
    workers = sorted({urlsplit(addr).hostname or addr for addr, fp in here.items() if fp == want})
    if not workers:
        raise ClusterError(f"no worker of the cluster runs on a {target.describe()} host, where its "
                           f"builds (for the building host's own CPU) must be made")
    return workers


def build_threads(client: Any, hosts: list[str] | None) -> int:
    """How many builds the cluster can make at once now: the threads of the workers on ``hosts``
    (``build_hosts``'s answer; None: every worker); at least 1."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(w.get("nthreads", 1) for addr, w in info.items()
                      if hosts is None or (urlsplit(addr).hostname or addr) in hosts))


def _host_fingerprint(kind: str) -> dict:
    from ..backends import backend_for

    return backend_for(kind).resolve().fingerprint


def require_measuring_workers(client: Any, target: Any, resource: str) -> list[str]:
    """measuring_workers, or ClusterError (one line) where there are none."""
    workers = measuring_workers(client, resource)
    if not workers:
        raise ClusterError(f"no worker of the cluster can measure {target.kind} target {target.key}: none "
                           f"declares the resource {resource} (see README, 'Tuning on a cluster')")
    return workers


def close(client: Any) -> None:
    """Close a client and, if this process started it, its LocalCluster."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()
