"""Reaching a Dask cluster: connect to a running scheduler, or start a LocalCluster on this host
whose workers measure this host's target. Workers declare what they can measure as Dask worker
resources named by ``measure_resource``."""

from __future__ import annotations

import logging
from typing import Any

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
