"""Cost model: IR features, the XGBoost ranker and the scikit-learn baseline, model files."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
import pytest

from autotune.target import cpu_target
from autotune.te import make_workload
from cost_model import (
    NUM_FEATURES,
    Sample,
    extract,
    extract_batch,
    feature_names,
    load_model,
    make_model,
    normalized_throughput,
    spearman,
)
from cost_model.features import ACCESS, ACCESS_SLOTS, ARITH, GLOBAL, GPU, LOOPS, MEMORY
from schedules import make_space

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matmul():
    wl = make_workload("matmul", "64,64,64")
    target = cpu_target()
    space = make_space(wl, target)
    lanes = target.vector_lanes  # 8 with AVX2, 16 with AVX-512: one vector of j per row
    base = {"tile_i": [2, 2, 4, 4], "tile_j": [1, 2, 32 // lanes, lanes], "tile_k": [16, 4],
            "parallel_depth": 1, "pack": "none", "unroll": 0, "registers": 0}
    assert space.is_valid(base), space.violated(base)
    return wl, target, space, base


def _feature(name: str, x: np.ndarray) -> float:
    return float(x[feature_names().index(name)])


def test_features_fixed_length_finite_and_documented(matmul) -> None:
    wl, target, space, base = matmul
    names = feature_names()
    assert len(names) == NUM_FEATURES == len(set(names))
    rng = np.random.default_rng(1)
    configs = [base] + [space.sample(rng) for _ in range(5)]
    X = extract_batch(wl, [space.steps(c) for c in configs], target)
    assert X.shape == (6, NUM_FEATURES) and np.all(np.isfinite(X))
    assert len({row.tobytes() for row in X}) > 1, "different schedules must give different features"
    # another op (a different IR shape) has the same length
    conv = make_workload("conv2d", "1,4,8,8,8,3,3,1,1")
    cs = make_space(conv, target)
    assert extract(conv, cs.steps(cs.sample(rng)), target).shape == (NUM_FEATURES,)
    doc = (ROOT / "docs" / "cost_model.md").read_text()
    documented = set(re.findall(r"`([a-zA-Z_0-9.]+)`", doc))
    slots = ARITH + LOOPS + GPU + MEMORY + ACCESS_SLOTS + ACCESS + GLOBAL  # access slots: <access>.<field>
    missing = [n for n in slots if n not in documented]
    assert not missing, f"docs/cost_model.md does not list {missing}"


def test_two_schedules_differ_and_annotations_show_up(matmul) -> None:
    wl, target, space, base = matmul
    plain = dict(base, unroll=0)
    unrolled = dict(base, unroll=1)
    assert space.is_valid(unrolled)
    a = extract(wl, space.steps(plain), target)
    b = extract(wl, space.steps(unrolled), target)
    assert not np.array_equal(a, b)
    # the update store (most flops) is store0: unrolled only in b, vectorized and parallel in both
    assert _feature("store0.unroll_product", a) == 0 and _feature("store0.unroll_product", b) > 0
    assert _feature("store0.vec_len", a) == pytest.approx(math.log2(1 + base["tile_j"][3]))
    assert _feature("store0.parallel_product", a) > 0 and _feature("store0.inner_vectorize", a) == 1
    assert _feature("store0.flops", a) == pytest.approx(math.log2(1 + wl.flops))
    # GPU slots exist and are zero on the CPU
    for slot in ("blockIdx_x", "threadIdx_x", "shared_bytes", "register_bytes"):
        assert _feature(f"store0.{slot}", a) == 0
    # packing an operand adds a store and local bytes
    packed = dict(base, pack="B")
    if space.is_valid(packed):
        c = extract(wl, space.steps(packed), target)
        assert _feature("global.num_stores", c) > _feature("global.num_stores", a)


def test_extraction_time_is_reported(matmul) -> None:
    wl, target, space, _ = matmul
    rng = np.random.default_rng(2)
    steps = [space.steps(space.sample(rng)) for _ in range(32)]
    t0 = time.perf_counter()
    X = extract_batch(wl, steps, target)
    dt = (time.perf_counter() - t0) / len(steps)
    print(f"\nfeature extraction: {1000 * dt:.2f} ms per candidate, ~{512 * dt:.1f} s per batch of 512")
    assert np.all(np.isfinite(X))


def _synthetic(n_groups: int = 3, n: int = 60, seed: int = 0) -> list[Sample]:
    """Cost falls with feature 0 (and a group-specific scale): a clear ranking to learn."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_groups):
        for _ in range(n):
            x = np.zeros(NUM_FEATURES)
            x[:6] = rng.uniform(0, 10, 6)  # feature 0 matters, 1..5 are noise, the rest constant
            cost = (1.0 + g) * 2.0 ** (-0.5 * x[0]) * rng.uniform(0.95, 1.05)
            out.append(Sample(x, f"g{g}", cost))
    out.append(Sample(rng.uniform(0, 10, NUM_FEATURES), "g0", math.inf))  # a failed build
    return out


def test_normalized_throughput_per_group_and_failures() -> None:
    s = [Sample(np.zeros(2), "a", 2.0), Sample(np.zeros(2), "a", 1.0), Sample(np.zeros(2), "b", 10.0),
         Sample(np.zeros(2), "b", math.inf)]
    assert normalized_throughput(s).tolist() == [0.5, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("name", ["xgb", "sklearn"])
def test_model_fit_predict_save_load(name: str, tmp_path: Path) -> None:
    train = _synthetic()
    model = make_model(name)
    assert np.all(model.predict(np.zeros((2, NUM_FEATURES))) == 0), "untrained: no preference"
    model.fit(train)
    rng = np.random.default_rng(5)
    X = np.zeros((40, NUM_FEATURES))
    X[:, :6] = rng.uniform(0, 10, (40, 6))
    pred = model.predict(X)
    assert spearman(pred, X[:, 0]) > 0.8, "higher feature 0 means faster"
    better, worse = X[0].copy(), X[0].copy()
    better[0], worse[0] = 9.5, 0.5
    s_better, s_worse = model.predict(np.stack([better, worse]))
    assert s_better > s_worse
    bad = X[:2].copy()
    bad[1, 3] = np.nan
    assert model.predict(bad)[1] == -np.inf, "missing features rank last"
    path = tmp_path / f"{name}.json"
    model.save(path)
    again = load_model(path)
    assert type(again) is type(model)
    np.testing.assert_allclose(again.predict(X), pred, rtol=1e-6)


def test_xgb_scores_in_place_as_through_a_dmatrix() -> None:
    """Scoring skips building a DMatrix per call (annealing scores a dozen small batches); the
    scores are exactly xgboost's through one."""
    import xgboost as xgb

    model = make_model("xgb")
    model.fit(_synthetic())
    X = np.random.default_rng(7).uniform(0, 10, (33, NUM_FEATURES))
    ours = model.predict(X)
    through = model.booster.predict(xgb.DMatrix(model._select(X)))
    assert np.ptp(ours) > 0 and np.array_equal(ours, through.astype(np.float64))


def test_xgb_pair_construction_reaches_xgboost_and_survives_save_load(tmp_path: Path) -> None:
    import json

    model = make_model("xgb", pair_method="topk", pairs=4)
    model.fit(_synthetic())
    objective = json.loads(model.booster.save_config())["learner"]["objective"]["lambdarank_param"]
    assert (objective["lambdarank_pair_method"], objective["lambdarank_num_pair_per_sample"]) == ("topk", "4")
    model.save(tmp_path / "m.json")
    again = load_model(tmp_path / "m.json")
    assert (again.init["pair_method"], again.init["pairs"]) == ("topk", 4)
    assert make_model("xgb")._params()["lambdarank_pair_method"] == "mean", "the default samples evenly"


def test_load_rejects_other_files(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a cost-model file"):
        load_model(p)


def test_ranker_on_real_features_prefers_vectorized_register_tiles(matmul) -> None:
    """Train on measured-like records of one workload: the ranker orders unseen configs of the same
    kind correctly (a sanity check that the IR features carry the signal)."""
    wl, target, space, _ = matmul
    rng = np.random.default_rng(3)
    configs = [space.sample(rng) for _ in range(80)]
    X = extract_batch(wl, [space.steps(c) for c in configs], target)

    def cost(c: dict) -> float:  # a stand-in for hardware: bigger register tiles are faster
        return 1.0 / (c["tile_i"][3] * c["tile_j"][3])

    samples = [Sample(x, "m", cost(c)) for x, c in zip(X[:60], configs[:60])]
    model = make_model("xgb")
    model.fit(samples)
    pred = model.predict(X[60:])
    truth = [1.0 / cost(c) for c in configs[60:]]
    assert spearman(pred, truth) > 0.6


def test_transfer_samples_of_a_db_are_lowered_once_per_cache(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The tasks of one model's tuning each read the DB's other records for transfer: with a shared
    cache each record is lowered once, and the samples are the same as without it."""
    import cost_model.dataset as dataset
    from autotune.search.tune import register
    from records import MeasurementRecord, TuningDatabase

    target = cpu_target()
    db = TuningDatabase(tmp_path / "t.db")
    rng = np.random.default_rng(3)
    for spec in ("64,64,64", "32,48,16"):
        wl = make_workload("matmul", spec)
        register(db, wl, target)
        space = make_space(wl, target)
        for _ in range(3):
            cfg = space.sample(rng)
            steps = [s.to_dict() for s in space.steps(cfg)]
            cost = (float(rng.uniform(1e-5, 1e-4)),)
            db.add_measurement(MeasurementRecord(wl.key, target.key, cfg, steps, cost, None, verified=True))
    calls = []
    real = dataset.extract
    monkeypatch.setattr(dataset, "extract", lambda *a: calls.append(1) or real(*a))
    plain = dataset.samples_from_db(db)
    assert len(calls) == 6 == len(plain)
    cache: dict = {}
    first = dataset.samples_from_db(db, cache=cache)
    one = make_workload("matmul", "64,64,64").key
    again = dataset.samples_from_db(db, exclude=[(one, target.key)], cache=cache)
    assert len(calls) == 12 and len(again) == 3  # the second call lowered nothing
    assert [(s.group, s.cost_s) for s in first] == [(s.group, s.cost_s) for s in plain]
    assert all(np.array_equal(a.features, b.features, equal_nan=True) for a, b in zip(first, plain))
    assert {s.group for s in again} < {s.group for s in first}
