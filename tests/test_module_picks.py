"""Module picks: the record each task takes in a model, chosen by timing inside the module at the
end of tuning, stored in the database and taken by compile while it holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from autotune.graph import compile_model, zoo  # noqa: E402
from autotune.graph.compiler import prepare  # noqa: E402
from autotune.graph.rerank import module_key, picks_hold, store_picks  # noqa: E402
from autotune.search.tune import register  # noqa: E402
from autotune.target import cpu_target  # noqa: E402
from records import MeasurementRecord, TuningDatabase, config_key  # noqa: E402
from schedules import make_space  # noqa: E402

MLP = "zoo:mlp?batch=2,inputs=16,hidden=32,classes=8"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("modules"))


def _records(db: TuningDatabase, prepared, target, per_task: int = 3) -> dict[str, list[dict]]:  # noqa: ANN001
    """Up to ``per_task`` distinct made-up records per task (fewer where its space is smaller), the
    first the fastest; their configs, best first."""
    rng = np.random.default_rng(5)
    out = {}
    for t in prepared.tasks:
        space = make_space(t.workload, target)
        register(db, t.workload, target)
        configs: dict[str, dict] = {}
        for _ in range(50):
            cfg = space.sample(rng)
            if len(configs) < per_task:
                configs.setdefault(config_key(cfg), cfg)
        for i, cfg in enumerate(configs.values()):
            steps = [st.to_dict() for st in space.steps(cfg)]
            db.add_measurement(MeasurementRecord(t.key, target.key, cfg, steps, ((i + 1) * 1e-5,), None,
                                                 verified=True))
        out[t.key] = list(configs.values())
    return out


def _pick(prepared, target, task, config: dict, best: dict, at: float = 1.0) -> dict:  # noqa: ANN001
    return {"module_key": module_key(prepared), "target_key": target.key, "workload_key": task.key,
            "config_key": config_key(config), "best_config_key": config_key(best), "module_s": 1e-6,
            "best_module_s": 2e-6, "model": "mlp", "created_at": at}


def _check(module) -> None:  # noqa: ANN001
    feeds = module.random_inputs(np.random.default_rng(3))
    sess = ort.InferenceSession(zoo.make_model(MLP).SerializeToString(), providers=["CPUExecutionProvider"])
    for o, r in zip(module.run(feeds), sess.run(None, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max())))


def test_compile_takes_a_stored_pick_only_while_the_best_is_unchanged(tmp_path: Path, cache: str) -> None:
    target, prepared = cpu_target(), prepare(MLP, "NHWC")
    with TuningDatabase(tmp_path / "p.db") as db:
        configs = _records(db, prepared, target)
        first, second = prepared.tasks[0], prepared.tasks[1]
        db.put_module_picks([
            _pick(prepared, target, first, configs[first.key][2], configs[first.key][0]),  # holds
            _pick(prepared, target, second, configs[second.key][1], configs[second.key][2]),  # stale
        ])
        module = compile_model(prepared, target, db, cache_dir=cache, verbose=False)
        taken = {c.task.key: c.config for c in module.choices}
        assert taken[first.key] == configs[first.key][2]
        assert taken[second.key] == configs[second.key][0]  # made against another best: void
        assert module.summary.picked == [first.label]
        _check(module)
        again = compile_model(prepared, target, db, cache_dir=cache, verbose=False)
        assert [c.config for c in again.choices] == [c.config for c in module.choices]
        # a new fastest record of the first task makes its pick void
        space = make_space(first.workload, target)
        rng = np.random.default_rng(9)
        cfg = next(c for c in (space.sample(rng) for _ in range(50)) if config_key(c) not in
                   {config_key(x) for x in configs[first.key]})
        steps = [s.to_dict() for s in space.steps(cfg)]
        db.add_measurement(MeasurementRecord(first.key, target.key, cfg, steps, (1e-6,), None, verified=True))
        after = compile_model(prepared, target, db, cache_dir=cache, verbose=False)
        assert next(c.config for c in after.choices if c.task.key == first.key) == cfg
        assert after.summary.picked == []


def test_store_picks_times_the_module_and_the_picks_then_hold(tmp_path: Path, cache: str) -> None:
    target, prepared = cpu_target(), prepare(MLP, "NHWC")
    with TuningDatabase(tmp_path / "s.db") as db:
        configs = _records(db, prepared, target)
        assert not picks_hold(prepared, target, db, 3)
        done = store_picks(prepared, target, db, 3, cache_dir=cache)
        rows = db.module_picks(module_key(prepared), target.key)
        # one row per task with runner-ups (the three products at least)
        assert {r["workload_key"] for r in rows} == {k for k, c in configs.items() if len(c) > 1}
        assert len(rows) >= 3
        for r in rows:
            best = configs[r["workload_key"]]
            assert r["best_config_key"] == config_key(best[0])
            assert r["config_key"] in {config_key(c) for c in best}
            assert r["module_s"] > 0 and r["best_module_s"] > 0
            if r["config_key"] != r["best_config_key"]:  # a runner-up only when clearly faster
                assert r["module_s"] < r["best_module_s"]
        changed = {r["workload_key"] for r in rows if r["config_key"] != r["best_config_key"]}
        assert sorted(t.label for t in prepared.tasks if t.key in changed) == done.changed
        assert picks_hold(prepared, target, db, 3)
        module = compile_model(prepared, target, db, cache_dir=cache, verbose=False)
        assert sorted(module.summary.picked) == done.changed
        _check(module)


def test_tune_model_stores_picks_once_and_a_rerun_keeps_them(tmp_path: Path) -> None:
    def tune() -> dict:
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune.py"), "--model", MLP,
                            "--trials", "12", "--db", str(tmp_path / "t.db"), "--json", "--no-progress",
                            "--rerank", "2"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    first = tune()
    assert first["module_picks"]["reranked"] and first["module_picks"]["k"] == 2
    with TuningDatabase(tmp_path / "t.db", readonly=True) as db:
        stored = db.module_picks()
    assert stored and len(stored) == first["module_picks"]["tasks"]
    again = tune()
    assert again["module_picks"] == {"k": 2, "reranked": False}
    with TuningDatabase(tmp_path / "t.db", readonly=True) as db:
        assert db.module_picks() == stored
