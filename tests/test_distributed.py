"""Measurement on a real Dask LocalCluster of worker processes: the same seed measures the same
configs as the local path (one workload, and a model through tune.py); a worker killed by PID
mid-run loses nothing and measures nothing twice; runs of a second (labelled) target go only to its
own worker; a cluster that cannot measure the target is one line and exit status 2. Skipped without
dask. Tiny workloads, one OpenMP thread, quick timing options: about 40 s on two busy cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from autotune.distributed import ClusterError, DaskMeasurer, connect, measure_resource  # noqa: E402
from autotune.distributed.cluster import close  # noqa: E402
from autotune.measure import Builder, CpuRunner, RunOptions  # noqa: E402
from autotune.search import TuneOptions, tune_workload  # noqa: E402
from autotune.target import cpu_target, make_target  # noqa: E402
from autotune.te import make_workload  # noqa: E402
from records import TuningDatabase, config_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = ("invalid_schedule", "build_error", "build_timeout")  # error kinds of candidates never run
QUICK = RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0)


def _options(trials: int, seed: int = 0) -> TuneOptions:
    return TuneOptions(trials=trials, strategy="random", seed=seed, batch_size=4, progress=False, confirm=0,
                       run=QUICK)


@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    """A LocalCluster of 2 worker processes (one thread, one CPU runner each)."""
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the workers and their runners
    c = connect(workers=2, resource="measure-cpu")
    yield c
    close(c)
    if old is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = old


def _measured(db: TuningDatabase, wl, target) -> list[str]:  # noqa: ANN001
    return [config_key(r.config) for r in db.measurements(wl.key, target.key)]


def _executing(client) -> dict[str, list[str]]:  # noqa: ANN001
    """Worker address -> keys of the tasks it is executing now (not those queued on it)."""

    def executing(dask_worker) -> list[str]:  # noqa: ANN001
        return [str(k) for k, ts in list(dask_worker.state.tasks.items()) if ts.state == "executing"]

    try:
        return client.run(executing)
    except (OSError, TimeoutError):  # a worker died while answering
        return {}


def _tune_in_thread(db_path: Path, wl, target, options: TuneOptions,  # noqa: ANN001
                    m: DaskMeasurer) -> tuple[threading.Thread, list[BaseException]]:
    """tune_workload through ``m`` in a started thread; the list collects what it raised."""
    errors: list[BaseException] = []

    def tune() -> None:
        try:
            with TuningDatabase(db_path) as db:
                tune_workload(wl, target, db, options, None, None, measurer=m)
        except BaseException as err:  # noqa: BLE001 - re-raised by the tests
            errors.append(err)

    thread = threading.Thread(target=tune)
    thread.start()
    return thread, errors


def test_same_seed_measures_the_same_configs_as_the_local_path(client, tmp_path: Path) -> None:  # noqa: ANN001
    wl, target = make_workload("matmul", "16,16,16"), cpu_target()
    with TuningDatabase(tmp_path / "local.db") as db, Builder() as b, CpuRunner() as r:
        tune_workload(wl, target, db, _options(10, seed=5), b, r)
        local = _measured(db, wl, target)
    m = DaskMeasurer(client, wl, target, QUICK)
    with TuningDatabase(tmp_path / "dask.db") as db:
        s = tune_workload(wl, target, db, _options(10, seed=5), None, None, measurer=m)
        remote = _measured(db, wl, target)
    m.close()
    assert len(local) == 10 and sorted(local) == sorted(remote)
    assert s.new_trials == 10 and s.valid == 10 and 0 < s.runner_busy <= 1
    assert sum(m.runs_by_pid.values()) == 10
    assert m.build_tasks == 2 + 2 + 2  # batches of 4, 4 and 2, each shared by the 2 building workers


def test_a_worker_killed_mid_run_loses_nothing_and_measures_nothing_twice(client, tmp_path: Path) -> None:  # noqa: ANN001
    wl, target = make_workload("matmul", "24,24,24"), cpu_target()
    trials = 24
    m = DaskMeasurer(client, wl, target, QUICK)
    db_path = tmp_path / "kill.db"
    thread, errors = _tune_in_thread(db_path, wl, target, _options(trials, seed=2), m)
    pids = client.run(os.getpid)  # worker address -> pid
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        busy = [addr for addr, keys in _executing(client).items()
                if any(str(k).startswith("run_candidate") for k in keys)]
        if busy and m.runs_by_pid:  # results are coming in, and a run is on a worker now
            victim = busy[0]
            os.kill(pids[victim], signal.SIGKILL)
        time.sleep(0.02)
    thread.join(300)
    assert victim is not None, "no run was in progress to kill"
    assert not thread.is_alive(), "the tuning run did not end within 300 s of the kill"
    assert not errors, errors
    with TuningDatabase(db_path) as db:
        keys = _measured(db, wl, target)
        assert not db.claims()  # every claim released
    assert len(keys) == trials and len(set(keys)) == trials  # 0 lost, 0 duplicate
    assert pids[victim] not in client.run(os.getpid).values()  # it really died (the nanny restarted it)


def test_runs_of_a_labelled_target_go_only_to_its_worker(client, tmp_path: Path) -> None:  # noqa: ANN001
    host = cpu_target()
    other = make_target("cpu", {**host.fingerprint, "label": "b"})
    assert measure_resource(other) == "measure-cpu-b" and other.key != host.key
    with pytest.raises(ClusterError, match="measure-cpu-b"):
        DaskMeasurer(client, make_workload("matmul", "16,16,16"), other, QUICK)
    address = client.scheduler.address
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launcher = subprocess.Popen([sys.executable, "-m", "autotune.distributed.workers", address,
                                 "--target", "cpu", "--label", "b"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(client.scheduler_info(n_workers=-1)["workers"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = client.scheduler_info(n_workers=-1)["workers"]
        pid_of = client.run(os.getpid)
        b_pids = {pid_of[a] for a, w in workers.items() if "measure-cpu-b" in w.get("resources", {})}
        assert len(b_pids) == 1
        wl = make_workload("matmul", "16,16,8")
        runs: dict[str, Counter] = {}
        with TuningDatabase(tmp_path / "two.db") as db:
            for name, target in (("b", other), ("host", host)):
                m = DaskMeasurer(client, wl, target, QUICK)
                tune_workload(wl, target, db, _options(8), None, None, measurer=m)
                m.close()
                runs[name] = Counter(m.runs_by_pid)
                assert len(_measured(db, wl, target)) == 8  # each target into its own records
                ran = [r for r in db.measurements(wl.key, target.key) if r.error_kind not in NOT_RUN]
                assert sum(runs[name].values()) == len(ran) > 0, [r.error_msg for r in ran]
        assert set(runs["b"]) == b_pids
        assert runs["host"] and not set(runs["host"]) & b_pids
        # one command for every target the cluster offers, each into its own records
        db_path, wl = tmp_path / "all.db", make_workload("matmul", "16,8,8")
        done = subprocess.run([sys.executable, "scripts/tune.py", "--target", "all", "--cluster", address,
                               "--op", "matmul", "--shape", "16,8,8", "--trials", "4", "--strategy", "random",
                               "--confirm", "0", "--no-progress", "--db", str(db_path)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        with TuningDatabase(db_path) as db:
            assert sorted(t["fingerprint"].get("label", "") for t in db.targets()) == ["", "b"]
            assert {t.key: len(_measured(db, wl, t)) for t in (host, other)} == {host.key: 4, other.key: 4}
    finally:
        launcher.terminate()
        launcher.wait(30)


def test_a_cluster_that_cannot_measure_the_target_is_one_line_exit_2(tmp_path: Path) -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None, processes=False,
                      protocol="tcp") as cluster:
        db = tmp_path / "none.db"
        proc = subprocess.run([sys.executable, "scripts/tune.py", "--op", "matmul", "--shape", "16,16,16",
                               "--trials", "4", "--db", str(db), "--cluster", cluster.scheduler_address],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "measure-cpu" in lines[0] and lines[0].startswith("error:")
    assert not db.exists()  # nothing written


def test_a_candidate_whose_run_two_workers_died_in_is_recorded_as_an_error(client, tmp_path: Path) -> None:  # noqa: ANN001
    wl, target = make_workload("matmul", "24,24,16"), cpu_target()
    slow = RunOptions(repeat=2, min_repeat_ms=300.0, timeout_s=20.0)  # runs long enough to be caught
    options = TuneOptions(trials=6, strategy="random", seed=7, batch_size=3, progress=False, confirm=0,
                          run=slow)
    m = DaskMeasurer(client, wl, target, slow)
    db_path = tmp_path / "twice.db"
    thread, errors = _tune_in_thread(db_path, wl, target, options, m)
    doomed, config, killed = None, None, 0
    deadline = time.monotonic() + 90
    while killed < 2 and time.monotonic() < deadline and thread.is_alive():
        pids = client.run(os.getpid)
        for addr, keys in _executing(client).items():
            runs = [k for k in keys if str(k).startswith("run_candidate")]
            if doomed is None and runs:
                doomed = runs[0]
                config = next(c.config for f, c in list(m._running.items()) if f.key == doomed)
            if doomed in runs and addr in pids:
                os.kill(pids[addr], signal.SIGKILL)  # the worker running it: twice, each a different one
                killed += 1
                time.sleep(0.5)
                break
        time.sleep(0.02)
    thread.join(120)
    assert killed == 2 and not errors, errors
    with TuningDatabase(db_path) as db:
        recs = db.measurements(wl.key, target.key)
    keys = [config_key(r.config) for r in recs]
    assert len(keys) == 6 and len(set(keys)) == 6  # 0 lost, 0 duplicate
    mine = next(r for r in recs if config_key(r.config) == config_key(config))
    assert mine.error_kind == "runtime_crash" and "two workers died" in mine.error_msg
    # Dask blames every task assigned to a dying worker: besides it, at most the one other run in
    # flight (one per runner) can have been queued behind it on both
    assert [r.error_kind for r in recs].count("runtime_crash") <= 2


def test_the_launcher_refuses_a_host_without_gpus_in_one_line() -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU visible: nothing to start
    proc = subprocess.run([sys.executable, "-m", "autotune.distributed.workers", "tcp://127.0.0.1:1",
                           "--target", "cuda"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "GPU" in proc.stderr


def test_a_model_tuned_on_a_local_cluster_measures_what_the_local_path_does(tmp_path: Path) -> None:
    """``tune.py --model --workers 2``: every task's candidates measured on the cluster, the same
    configs as the local path with the same seed, the model's budget exactly."""
    def tune(db: str, *extra: str) -> dict[str, list[str]]:
        cmd = [sys.executable, str(ROOT / "scripts" / "tune.py"), "--model", "zoo:mlp", "--trials", "12",
               "--seed", "3", "--batch-size", "4", "--strategy", "random", "--confirm", "0", "--no-progress",
               "--db", str(tmp_path / db), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        with TuningDatabase(tmp_path / db) as d:
            target = cpu_target()
            keys = {w: sorted(config_key(r.config) for r in d.measurements(w, target.key))
                    for w in (row["key"] for row in d.workloads())}
        return {w: k for w, k in keys.items() if k}

    local, remote = tune("local.db"), tune("dask.db", "--workers", "2")
    assert sum(map(len, local.values())) == 12 and len(local) >= 2
    assert remote == local


def test_a_models_tasks_are_measured_at_once_on_a_cluster(tmp_path: Path) -> None:
    """With ``--workers``, batches of several tasks are in flight together (the next task's batch is
    built while one runs), within the model's budget exactly, no config measured twice."""
    db = tmp_path / "model.db"
    cmd = [sys.executable, str(ROOT / "scripts" / "tune.py"), "--model", "zoo:mlp", "--trials", "24",
           "--seed", "5", "--batch-size", "2", "--strategy", "random", "--confirm", "0", "--no-progress",
           "--json", "--workers", "2", "--db", str(db)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["tasks_in_flight"] >= 2
    with TuningDatabase(db) as d:
        rows = [r for w in d.workloads() for r in d.measurements(w["key"], cpu_target().key)]
    keys = [(r.workload_key, config_key(r.config)) for r in rows]
    assert len(keys) == 24 and len(set(keys)) == 24
