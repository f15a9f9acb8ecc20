"""Row reductions computed row by row (the CPU space's ``row_fused`` knob): softmax and layernorm in
one parallel loop, softmax's exponentials computed once into a row buffer."""

from __future__ import annotations

import pytest

from autotune import te
from autotune.program import build_program
from schedules import make_space

# rows of whole vectors, rows with a scalar tail (ViT's 197 tokens), rows shorter than a vector
SHAPES = [("softmax", "6,128"), ("softmax", "6,197"), ("softmax", "9,10"), ("layernorm", "5,96"),
          ("layernorm", "4,37")]


@pytest.mark.parametrize(("op", "shape"), SHAPES, ids=[f"{o}-{s}" for o, s in SHAPES])
def test_every_config_with_and_without_rows_fused_matches_numpy(op: str, shape: str, check_kernel,  # noqa: ANN001
                                                                host_target) -> None:
    wl = te.make_workload(op, shape)
    space = make_space(wl, host_target)
    assert "row_fused" in {k.name for k in space.knobs}
    assert space.default_config()["row_fused"] == 1
    configs = [c for c in space if space.is_valid(c)]
    assert {c["row_fused"] for c in configs} == {0, 1}
    for cfg in configs:
        check_kernel(wl, space.steps(cfg))  # fresh random inputs against the float64 reference


def test_fused_softmax_is_one_parallel_loop_with_its_exponentials_in_a_row_buffer(host_target) -> None:  # noqa: ANN001
    wl = te.make_workload("softmax", "64,197")
    space = make_space(wl, host_target)
    fused = space.default_config()
    apart = {**fused, "row_fused": 0}
    src = build_program(wl, space.steps(fused), host_target).source
    body = src[src.index("void softmax"):]
    assert body.count("omp parallel") == 1 and "_exp[197]" in body and body.count("at_vexp(") == 1
    body = build_program(wl, space.steps(apart), host_target).source
    body = body[body.index("void softmax"):]
    assert "_exp[" not in body and body.count("at_vexp(") >= 2  # inlined into the sum and the scaling


def test_a_softmax_with_too_few_rows_for_the_cores_has_no_row_knob(host_target) -> None:  # noqa: ANN001
    space = make_space(te.make_workload("softmax", "1,1000"), host_target)
    assert "row_fused" not in {k.name for k in space.knobs} or host_target.cores == 1


def test_records_from_before_the_knob_are_tuned_on(tmp_path, kernel_builder, kernel_runner,  # noqa: ANN001
                                                   host_target) -> None:  # noqa: ANN001
    """A layernorm's records made before ``row_fused`` existed (configs without it) seed the
    model-guided tuner, which then measures the rows fused."""
    from autotune.measure import RunOptions
    from autotune.search import TuneOptions, tune_workload
    from autotune.search.tune import register
    from records import MeasurementRecord, TuningDatabase

    wl = te.make_workload("layernorm", "64,96")
    space = make_space(wl, host_target)
    with TuningDatabase(tmp_path / "old.db") as db:
        register(db, wl, host_target)
        for i, vr in enumerate((0, 1, 2)):  # each config as it was recorded: no row_fused
            cfg = {"vector_reduce": vr}
            steps = [s.to_dict() for s in space.steps({**cfg, "row_fused": 0})]
            db.add_measurement(MeasurementRecord(wl.key, host_target.key, cfg, steps, ((i + 2) * 1e-5,), None,
                                                 verified=True))
        options = TuneOptions(trials=6, strategy="xgb", seed=0, batch_size=3, progress=False, confirm=0,
                              run=RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0))
        summary = tune_workload(wl, host_target, db, options, kernel_builder, kernel_runner)
        assert summary.new_trials == 3 and summary.errors == 0
        new = [r.config for r in db.measurements(wl.key, host_target.key) if "row_fused" in r.config]
        assert {c["row_fused"] for c in new} == {1}  # the three unfused ones are known already


def test_records_of_a_space_that_named_its_knobs_otherwise_are_skipped(tmp_path, kernel_builder,  # noqa: ANN001
                                                                       kernel_runner, host_target) -> None:  # noqa: ANN001
    """A record whose config names knobs the space no longer has (an axis renamed since) is left
    out of the model-guided tuner's training data; the tuner failed with a KeyError on it and the
    task was dropped from a model's tuning."""
    from autotune.measure import RunOptions
    from autotune.search import TuneOptions, tune_workload
    from autotune.search.tune import register
    from records import MeasurementRecord, TuningDatabase

    wl = te.make_workload("layernorm", "64,96")
    space = make_space(wl, host_target)
    with TuningDatabase(tmp_path / "renamed.db") as db:
        register(db, wl, host_target)
        steps = [s.to_dict() for s in space.steps(space.default_config())]
        for i in range(12):
            db.add_measurement(MeasurementRecord(wl.key, host_target.key, {"tile_z0": [i + 1, 64]}, steps,
                                                 ((i + 1) * 1e-5,), None, verified=True))
        options = TuneOptions(trials=15, strategy="xgb", seed=0, batch_size=3, progress=False, confirm=0,
                              run=RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0))
        summary = tune_workload(wl, host_target, db, options, kernel_builder, kernel_runner)
        assert summary.new_trials == 3 and summary.errors == 0
