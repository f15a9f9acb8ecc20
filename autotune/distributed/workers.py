"""Start this host's measuring workers for a Dask scheduler: one ``dask worker`` process per visible
GPU (CUDA_VISIBLE_DEVICES set to that one GPU, resource ``measure-cuda``), or CPU measuring
workers (resource ``measure-cpu``; they build, and take turns running kernels) plus any number of
build-only workers. Runs until interrupted, then stops its workers.

    python -m autotune.distributed.workers tcp://scheduler:8786 --target cuda
    python -m autotune.distributed.workers tcp://scheduler:8786 --target cpu --workers 4
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from ..backends import backend_for, kinds
from .cluster import WORKER_CONFIG


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: non-daemonic (its runner is a child process), plus ``extra``
    (a runner's own, e.g. the one GPU it sees)."""
    env = dict(os.environ)
    for key, value in WORKER_CONFIG.items():
        env["DASK_" + key.upper().replace(".", "__").replace("-", "_")] = str(value)
    return {**env, **(extra or {})}


def worker_command(scheduler: str, name: str, nthreads: int, resource: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--name", name,
           "--nthreads", str(nthreads), "--nworkers", "1", "--no-dashboard"]
    return cmd + (["--resources", f"{resource}=1"] if resource else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autotune.distributed.workers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scheduler", help="the scheduler's address, e.g. tcp://10.0.0.1:8786")
    p.add_argument("--target", default="cpu", choices=kinds())
    p.add_argument("--label", default="", help="the target's label (a second kind of machine of one "
                   "target kind: its resource is measure-<kind>-<label>)")
    p.add_argument("--workers", type=int, default=1, help="CPU: measuring workers of one thread, that "
                   "build and take turns running kernels (default 1)")
    p.add_argument("--build-workers", type=int, default=0, help="extra workers that only build")
    p.add_argument("--threads", type=int, default=0, help="threads of each measuring worker (its "
                   "other threads build); default 1 for the CPU, cores / GPUs for CUDA")
    args = p.parse_args(argv)
    resource = f"measure-{args.target}" + (f"-{args.label}" if args.label else "")
    host = os.uname().nodename
    procs: list[subprocess.Popen] = []

    def start(name: str, threads: int, res: str | None, env: dict[str, str] | None = None) -> None:
        procs.append(subprocess.Popen(worker_command(args.scheduler, f"{host}-{name}", threads, res),
                                      env=worker_env(env)))

    envs = backend_for(args.target).runner_envs()  # one measuring worker per GPU
    if envs is None:  # a CPU: its measuring workers take turns running kernels
        envs = [{}] * args.workers
    if not envs:
        print(f"error: this host has nothing to measure {args.target} kernels on (no visible GPU: "
              "CUDA_VISIBLE_DEVICES, nvidia-smi -L)", file=sys.stderr)
        return 2
    for i, env in enumerate(envs):
        # a CPU worker: one thread (it builds between runs); a GPU's worker builds on its other threads
        threads = args.threads or (1 if not env else max(1, (os.cpu_count() or 1) // len(envs)))
        start(f"{args.target}{i}", threads, resource, env)
    for i in range(args.build_workers):
        start(f"build{i}", 1, None)
    print(f"started {len(procs)} workers for {args.scheduler} ({resource})", flush=True)

    def stop(*_: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        while any(proc.poll() is None for proc in procs):
            time.sleep(1.0)
    except KeyboardInterrupt:
        stop()
    for proc in procs:
        proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
