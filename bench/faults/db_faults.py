#!/usr/bin/env python3
"""Fault figures of the shared tuning database, through scripts/tune.py as a user runs it; prints
one JSON summary (--out also writes it to a file).

- tuners: two, then four ``tune.py`` processes started together on one DB file for the same
  workload and budget (the same seed, so they propose the same configs): configs measured twice,
  rows lost (measurements a tuner reported that the DB does not hold), trials stored vs the budget,
  confirmations per finalist.
- kills: kill -9 of a tuning run at random moments (during the search, and during confirmation),
  each followed by a rerun that resumes, the budget raised every few runs so the search and the
  confirmation start again; then a last rerun to the end: rows lost, duplicates, integrity, every
  finalist confirmed.
- hog: a CPU hog (busy processes, one per core) started in the middle of the confirmation (once its
  first round is committed); then, quietly, the chosen config and every finalist re-measured
  interleaved (7 rounds): the chosen config's time against the fastest finalist's, and whether its
  runs are slower in the statistical sense (one-sided Mann-Whitney U, p < 0.05).

Kernels run with one OpenMP thread (OMP_NUM_THREADS=1) unless --threads says otherwise: on a shared
machine, threaded kernels' timings swing by orders of magnitude with other jobs' load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scipy.stats import mannwhitneyu  # noqa: E402

from records import CONFIRM_LABEL, TuningDatabase, config_key  # noqa: E402

TUNE = [sys.executable, str(ROOT / "scripts" / "tune.py")]


def tune_cmd(db: Path, op: str, shape: str, trials: int, seed: int = 0, confirm: int = 3) -> list[str]:
    return TUNE + ["--op", op, "--shape", shape, "--trials", str(trials), "--strategy", "random",
                   "--seed", str(seed), "--batch-size", "2", "--confirm", str(confirm), "--db", str(db),
                   "--no-progress", "--json"]


def rows(db: Path) -> list[tuple]:
    """(id, config_key, tuner, costs, created_at) of every measurement, by id."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(
            "SELECT id, config_key, tuner, costs, created_at FROM measurements ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def db_state(db: Path, confirm: int, rounds: int = 2) -> dict:
    """Duplicates, search trials, finalists and their confirmations, integrity, claims left."""
    every = rows(db)
    search = [r[1] for r in every if r[2] != CONFIRM_LABEL]
    with TuningDatabase(db, readonly=True) as d:
        first = d.measurements()[0] if every else None
        finalists, counts = [], {}
        if first is not None:
            finalists = [config_key(r.config) for r in d.search_top(first.workload_key, first.target_key,
                                                                     confirm)]
            counts = d.confirmations(first.workload_key, first.target_key)
        live = sum(c["live"] for c in d.claims())
        integrity = d.db.execute("PRAGMA integrity_check").fetchone()[0]
    return {
        "search_trials": len(search),
        "configs_measured_twice": len(search) - len(set(search)),
        "finalists": len(finalists),
        "finalists_confirmed": sum(counts.get(k, 0) == rounds for k in finalists),
        "confirmations": sum(counts.values()),
        "live_claims_left": live,
        "integrity": integrity,
    }


def run_tuners(n: int, where: Path, trials: int, op: str, shape: str) -> dict:
    db = where / f"tuners{n}.db"
    procs = [subprocess.Popen(tune_cmd(db, op, shape, trials), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate(timeout=900) for p in procs]
    reports = []
    for p, (out, err) in zip(procs, outs):
        last = out.strip().splitlines()[-1] if out.strip() else "{}"
        reports.append({"exit": p.returncode, **{k: v for k, v in json.loads(last).items()
                                                  if k in ("trials", "new_trials", "confirmations")},
                        "stderr": err.strip().splitlines()[-1:]})
    state = db_state(db, confirm=3)
    claimed_new = sum(r.get("new_trials", 0) for r in reports)
    return {
        "tuners": n,
        "budget": trials,
        **state,
        "rows_lost": claimed_new - state["search_trials"],
        "total_trials_equals_budget": state["search_trials"] == trials,
        "per_tuner": reports,
    }


def run_kills(where: Path, kills: int, op: str, shape: str, rng: random.Random) -> dict:
    db = where / "kills.db"
    seen: dict[int, tuple] = {}
    lost = 0
    done_kills = during_confirm = finished_first = 0
    trials = 6
    log = []
    for cycle in range(4 * kills):
        if done_kills >= kills:
            break
        if cycle % 3 == 0:
            trials += 4  # more search, new finalists, a new confirmation
        before = rows(db)
        in_confirm = rng.random() < 0.5
        proc = subprocess.Popen(tune_cmd(db, op, shape, trials), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        searched = sum(r[2] != CONFIRM_LABEL for r in before)
        # a search moment: after a random number of this run's new trials; a confirmation moment:
        # once the search is complete, after a random short delay
        in_confirm = in_confirm or searched >= trials - 1
        after_new = rng.randint(1, max(1, trials - searched - 1))
        moment = None
        while proc.poll() is None:
            search = sum(r[2] != CONFIRM_LABEL for r in rows(db))
            if in_confirm and search >= trials:
                moment = "confirmation"
            elif not in_confirm and search >= searched + after_new:
                moment = "search" if search < trials else "confirmation"
            if moment:
                time.sleep(rng.uniform(0.0, 1.0) if moment == "confirmation" else rng.uniform(0.0, 0.2))
                if proc.poll() is not None:
                    moment = None
                    break
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.02)
        after = rows(db)
        if moment and proc.returncode == -signal.SIGKILL:
            done_kills += 1
            during_confirm += moment == "confirmation"
        else:
            finished_first += 1
        ids = {r[0]: r for r in after}
        lost += sum(1 for i, r in seen.items() if ids.get(i) != r)
        seen.update(ids)
        log.append({"trials": trials, "killed": bool(moment), "moment": moment,
                    "rows_before": len(before), "rows_after": len(after)})
    reruns, refusals = 0, []
    while True:  # the last resume; rerun as its warning says where load made confirmation refuse
        final = subprocess.run(tune_cmd(db, op, shape, trials), capture_output=True, text=True,
                               timeout=900)
        said = [ln for ln in final.stderr.splitlines() if "timing shifted" in ln]
        if not said or reruns == 3:
            break
        refusals += said
        reruns += 1
    ids = {r[0]: r for r in rows(db)}
    lost += sum(1 for i, r in seen.items() if ids.get(i) != r)
    state = db_state(db, confirm=3)
    return {
        "kills": done_kills,
        "kills_during_confirmation": during_confirm,
        "runs_that_finished_before_their_kill": finished_first,
        "budget": trials,
        "final_exit": final.returncode,
        "reruns_after_a_refused_confirmation": reruns,
        "refusals": refusals,
        "rows_lost": lost,
        **state,
        "every_finalist_confirmed": state["finalists_confirmed"] == state["finalists"],
        "cycles": log,
    }


def hog(cores: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]


def quiet_times(db: Path, op: str, shape: str, configs: list[dict], rounds: int = 7) -> list[list[float]]:
    """Seconds of each config, measured interleaved ``rounds`` times on this machine."""
    from autotune.measure import Builder, CpuRunner, RunOptions
    from autotune.search.measure_batch import WorkloadMeasurer
    from autotune.target import cpu_target
    from autotune.te import make_workload
    from schedules import make_space

    wl, target = make_workload(op, shape), cpu_target()
    space = make_space(wl, target)
    times: list[list[float]] = [[] for _ in configs]
    with Builder() as builder, CpuRunner() as runner:
        m = WorkloadMeasurer(wl, target, builder, runner, RunOptions(repeat=5, min_repeat_ms=20.0))
        order = list(range(len(configs)))
        for _ in range(rounds):
            random.shuffle(order)
            batch = [configs[i] for i in order]
            for i, t in zip(order, m.measure(batch, [space.steps(c) for c in batch])):
                times[i].append(t.mean_s)
    return times


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def run_hogs(where: Path, op: str, shape: str, trials: int, runs: int) -> dict:
    """``runs`` hog runs, each on a fresh DB, and how the chosen configs compare."""
    each = [run_hog(where / f"hog{i}.db", op, shape, trials) for i in range(runs)]
    ratios = [r["chosen_over_best_finalist"] for r in each]
    return {
        "runs": runs,
        "chosen_always_a_finalist": all(r["chosen_is_a_finalist"] for r in each),
        "chosen_over_best_finalist": ratios,
        "chosen_not_slower": sum(x <= 1.0 for x in ratios),  # the chosen is the fastest quietly
        # chosen slower by less than the quiet re-measurement's own noise (median spread of its runs)
        "chosen_within_quiet_noise": sum(x <= 1.0 + median(r["quiet_spread"]) for x, r in zip(ratios, each)),
        # slower in the statistical sense: its quiet runs slower than the best finalist's
        # (one-sided Mann-Whitney U, p < 0.05); a chosen config that is the best is never slower
        "chosen_significantly_slower": sum(r["chosen_slower_p"] < 0.05 for r in each),
        "after_rerun_over_best_finalist": [r["chosen_after_rerun_over_best_finalist"] for r in each],
        "each": each,
    }


def run_hog(db: Path, op: str, shape: str, trials: int) -> dict:
    proc = subprocess.Popen(tune_cmd(db, op, shape, trials), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    hogs: list[subprocess.Popen] = []
    try:
        while proc.poll() is None and not hogs:
            if any(r[2] == CONFIRM_LABEL for r in rows(db)):
                hogs = hog(os.cpu_count() or 1)  # a confirmation round is in: the next runs under load
            time.sleep(0.02)
        out, err = proc.communicate(timeout=900)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    time.sleep(2.0)
    with TuningDatabase(db, readonly=True) as d:
        first = d.measurements()[0]
        wk, tk = first.workload_key, first.target_key
        chosen = d.best(wk, tk)
        finalists = d.search_top(wk, tk, 3)
        counts = d.confirmations(wk, tk)
    # the hog is gone: the rerun its warning asks for finishes the confirmation
    rerun = subprocess.run(tune_cmd(db, op, shape, trials), capture_output=True, text=True, timeout=900)
    with TuningDatabase(db, readonly=True) as d:
        after = d.best(wk, tk)
        counts_after = d.confirmations(wk, tk)
    configs = [f.config for f in finalists]
    keys = [config_key(c) for c in configs]
    if config_key(chosen.config) not in keys:
        configs.append(chosen.config)
        keys.append(config_key(chosen.config))
    if config_key(after.config) not in keys:
        configs.append(after.config)
        keys.append(config_key(after.config))
    at = keys.index(config_key(chosen.config))
    at_after = keys.index(config_key(after.config))
    runs = quiet_times(db, op, shape, configs)  # each config once, interleaved
    quiet = [median(t) for t in runs]
    best_at = min(range(len(finalists)), key=lambda i: quiet[i])
    confirmed = [f for f in finalists if counts.get(config_key(f.config), 0)]
    best_finalist = min(quiet[: len(finalists)])
    return {
        "budget": trials,
        "hog_processes": len(hogs),
        "hog_started_during_confirmation": bool(hogs),
        "tune_exit": proc.returncode,
        "warnings": [ln for ln in err.splitlines() if "timing shifted" in ln],
        "finalists_confirmed": len(confirmed),
        "chosen_is_a_finalist": any(config_key(chosen.config) == config_key(f.config) for f in finalists),
        "chosen_quiet_s": quiet[at],
        "chosen_quiet_rank": sorted(quiet).index(quiet[at]) + 1,
        "finalists_quiet_s": quiet[: len(finalists)],
        "best_finalist_quiet_s": best_finalist,
        "chosen_over_best_finalist": quiet[at] / best_finalist,
        # p of "the chosen config's quiet runs are slower than the best finalist's" (1.0: it is it)
        "chosen_slower_p": 1.0 if at == best_at else
        float(mannwhitneyu(runs[at], runs[best_at], alternative="greater").pvalue),
        "chosen_quiet_runs_s": runs[at],
        "best_finalist_quiet_runs_s": runs[best_at],
        # the quiet re-measurement's own noise: (slowest - fastest) / median of each config's runs
        "quiet_spread": [(max(t) - min(t)) / median(t) for t in runs],
        "confirmations_per_finalist": [counts.get(config_key(f.config), 0) for f in finalists],
        "rerun_exit": rerun.returncode,
        "rerun_warnings": [ln for ln in rerun.stderr.splitlines() if "timing shifted" in ln],
        "confirmations_per_finalist_after_rerun": [counts_after.get(config_key(f.config), 0)
                                                   for f in finalists],
        "chosen_after_rerun_quiet_rank": sorted(quiet).index(quiet[at_after]) + 1,
        "chosen_after_rerun_over_best_finalist": quiet[at_after] / best_finalist,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="matmul")
    p.add_argument("--shape", default="32,32,32")
    p.add_argument("--trials", type=int, default=16, help="budget of the tuners and the hog run")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the kernels (default 1)")
    p.add_argument("--hog-runs", type=int, default=3, help="runs of the hog scenario (default 3)")
    p.add_argument("--only", choices=("tuners", "kills", "hog"), help="run one scenario")
    p.add_argument("--out", help="also write the JSON summary here")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    rng = random.Random(args.seed)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="db-faults-") as tmp:
        where = Path(tmp)
        summary = {
            "workload": f"{args.op}[{args.shape}]",
            "omp_threads": args.threads,
            "cores": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        }
        scenarios = {
            "tuners": lambda: [run_tuners(n, where, args.trials, args.op, args.shape) for n in (2, 4)],
            "kills": lambda: run_kills(where, args.kills, args.op, args.shape, rng),
            "hog": lambda: run_hogs(where, args.op, args.shape, args.trials, args.hog_runs),
        }
        for name, run in scenarios.items():
            if args.only in (None, name):
                summary[name] = run()
    summary["load_average_at_end"] = os.getloadavg()
    summary["elapsed_s"] = round(time.time() - t0, 1)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
