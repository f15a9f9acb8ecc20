"""Start this host's measuring workers for a Dask scheduler: one ``dask worker`` process per visible
GPU (CUDA_VISIBLE_DEVICES set to that one GPU, resource ``measure-cuda``), or one CPU measuring
worker (resource ``measure-cpu``) plus any number of build-only workers. Runs until interrupted,
then stops its workers.

    python -m autotune.distributed.workers tcp://scheduler:8786 --target cuda
    python -m autotune.distributed.workers tcp://scheduler:8786 --target cpu --build-workers 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

from .cluster import WORKER_CONFIG

GPU_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus() -> list[str]:
    """The GPUs this host shows: CUDA_VISIBLE_DEVICES where set, else the indices nvidia-smi lists."""
    listed = os.environ.get(GPU_ENV)
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(i) for i, _ in enumerate(ln for ln in out.splitlines() if ln.startswith("GPU "))]


def worker_env(gpu: str | None = None) -> dict[str, str]:
    """The environment of a measuring worker: non-daemonic (its runner is a child process), and
    the one GPU it owns."""
    env = dict(os.environ)
    for key, value in WORKER_CONFIG.items():
        env["DASK_" + key.upper().replace(".", "__").replace("-", "_")] = str(value)
    if gpu is not None:
        env[GPU_ENV] = gpu
    return env


def worker_command(scheduler: str, name: str, nthreads: int, resource: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--name", name,
           "--nthreads", str(nthreads), "--nworkers", "1", "--no-dashboard"]
    return cmd + (["--resources", f"{resource}=1"] if resource else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autotune.distributed.workers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scheduler", help="the scheduler's address, e.g. tcp://10.0.0.1:8786")
    p.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--label", default="", help="the target's label (a second kind of machine of one "
                   "target kind: its resource is measure-<kind>-<label>)")
    p.add_argument("--build-workers", type=int, default=0, help="extra workers that only build")
    p.add_argument("--threads", type=int, default=0, help="threads of each measuring worker (its "
                   "other threads build); default 1 for the CPU, cores / GPUs for CUDA")
    args = p.parse_args(argv)
    resource = f"measure-{args.target}" + (f"-{args.label}" if args.label else "")
    host = os.uname().nodename
    procs: list[subprocess.Popen] = []

    def start(name: str, threads: int, res: str | None, gpu: str | None = None) -> None:
        procs.append(subprocess.Popen(worker_command(args.scheduler, f"{host}-{name}", threads, res),
                                      env=worker_env(gpu)))

    if args.target == "cuda":
        gpus = visible_gpus()
        if not gpus:
            print("error: no visible GPU on this host (CUDA_VISIBLE_DEVICES, nvidia-smi -L)", file=sys.stderr)
            return 2
        for g in gpus:
            start(f"gpu{g}", args.threads or max(1, (os.cpu_count() or 1) // len(gpus)), resource, g)
    else:
        start("cpu", args.threads or 1, resource)
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
