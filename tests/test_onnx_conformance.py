"""ONNX's own node tests through the compiler (issue 22 item 5; autotune/graph/conformance.py).

Every node test the onnx package defines (and its ``:folded`` / ``:required-outputs`` variants) is
imported, compiled for the CPU with an empty database, run and compared with onnx's expected
outputs. Rules: no wrong answer and no traceback anywhere; a test of an operator the frontend lists
passes, or is rejected with a reason and appears in tests/data/onnx_node_rejections.txt (regenerate
with ``python scripts/conformance.py --write-rejections``).

Cost: the whole run is one module fixture, in one worker process per core: 3817 tests and variants,
mostly gcc (a kernel object per kernel, then the entry point compiled in the link), 1 min 55 s wall on
2 idle cores.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from autotune.graph import conformance as cf


@pytest.fixture(scope="module")
def tests() -> dict[str, cf.NodeTest]:
    return {t.name: t for t in cf.node_tests()}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> cf.Suite:
    return cf.run_suite(cache_dir=str(tmp_path_factory.mktemp("conformance")))


def test_no_wrong_answer_and_no_traceback(suite: cf.Suite) -> None:
    bad = cf.wrong_or_traceback(suite)
    assert not bad, f"{len(bad)} node tests give a wrong answer or a traceback:\n" + "\n".join(bad)


def test_listed_operators_agree_with_the_rejection_list(suite: cf.Suite) -> None:
    drift = cf.rejection_list_drift(suite, cf.read_rejections())
    assert not drift, (f"{len(drift)} node tests disagree with {cf.REJECTIONS_PATH.name}:\n"
                       + "\n".join(drift))


def test_every_test_ends_in_one_outcome(suite: cf.Suite, tests: dict[str, cf.NodeTest]) -> None:
    assert [o.name for o in suite.outcomes] == list(tests)
    assert {o.status for o in suite.outcomes} <= set(cf.STATUSES)
    assert all(o.detail for o in suite.outcomes if o.status != "pass")
    # outside the default domain nothing is supported: rejected at import, naming the operator
    # (their function bodies, ``*_expanded``, may be made of supported operators)
    foreign = [o for o in suite.outcomes if "." in o.op and "_expanded" not in o.name]
    assert foreign and all(o.status == "rejected" and "unsupported" in o.detail for o in foreign)
    listed = [o for o in suite.outcomes if o.listed]
    assert listed and any(o.status == "pass" for o in listed)


def test_shape_and_index_operands_become_initializers(tests: dict[str, cf.NodeTest]) -> None:
    def initializers(t: cf.NodeTest) -> set[str]:
        return {i.name for i in t.model.graph.initializer}

    reshape = tests["test_reshape_reordered_all_dims"]
    assert reshape.constants == ("shape",) and list(reshape.inputs) == ["data"]
    assert initializers(reshape) == {"shape"}
    assert set(tests["test_slice"].constants) == {"starts", "ends", "axes", "steps"}
    assert tests["test_gather_0"].constants == ("indices",)
    assert tests["test_clip"].constants == ("min", "max")
    assert tests["test_add"].constants == () and set(tests["test_add"].inputs) == {"x", "y"}
    folded = tests["test_add:folded"]
    assert folded.inputs == {} and initializers(folded) == {"x", "y"}
    # output shapes are left to the compiler's inference: only symbolic dims are declared
    dims = reshape.model.graph.output[0].type.tensor_type.shape.dim
    assert dims and all(d.dim_param and not d.dim_value for d in dims)


def test_required_outputs_variant_drops_the_optional_outputs(tests: dict[str, cf.NodeTest]) -> None:
    full = tests["test_layer_normalization_4d_axis1"]
    short = tests["test_layer_normalization_4d_axis1:required-outputs"]
    assert len(full.model.graph.node[0].output) == 3 and len(full.expected) == 3
    assert list(short.model.graph.node[0].output) == [full.model.graph.node[0].output[0]]
    assert [o.name for o in short.model.graph.output] == [full.model.graph.output[0].name]
    assert len(short.expected) == 1 and np.array_equal(short.expected[0], full.expected[0])


def test_compare_judges_dtype_shape_and_values() -> None:
    e = np.array([1.0, np.nan, -3.0], np.float32)
    assert cf.compare([e], [e.copy()]) is None
    assert cf.compare([e], [e * np.float32(1 + 5e-4)]) is None  # within float32's rtol 1e-3
    assert "dtype float64, expected float32" in cf.compare([e], [e.astype(np.float64)])
    assert "shape [2], expected [3]" in cf.compare([e], [e[:2]])
    assert "2 of 3 values differ; first at [0]" in cf.compare([e], [e * np.float32(1.002)])
    assert "differ" in cf.compare([e], [np.nan_to_num(e)])  # a NaN expected where 0 came out
    assert "differ" in cf.compare([np.array([1.0], np.float64)], [np.array([1.0 + 1e-7])])
    assert "differ" in cf.compare([np.array([1, 2], np.int64)], [np.array([1, 3], np.int64)])
    assert "2 outputs, expected 1" in cf.compare([e], [e, e])
    bf = np.array([1.0, np.nan, 0.443359], ml_dtypes.bfloat16)  # about one ulp allowed, NaN = NaN
    assert cf.compare([bf], [np.array([1.0, np.nan, 0.445312], ml_dtypes.bfloat16)]) is None
    f8 = np.array([448.0, np.nan], ml_dtypes.float8_e4m3fn)  # exact, NaN = NaN
    assert cf.compare([f8], [f8.copy()]) is None
    assert "differ" in cf.compare([f8], [np.array([416.0, np.nan], ml_dtypes.float8_e4m3fn)])


def test_a_wrong_answer_is_reported_as_wrong(tests: dict[str, cf.NodeTest], tmp_path: Path) -> None:
    t = tests["test_abs"]
    assert cf.run_test(t, str(tmp_path)).status == "pass"
    off = dataclasses.replace(t, expected=[t.expected[0] + np.float32(0.5)])
    out = cf.run_test(off, str(tmp_path))
    assert out.status == "wrong" and "60 of 60 values differ" in out.detail


class _Poisoned:
    """A model that kills (or stalls) the process that touches it."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang

    def _touch(self) -> None:
        if self.hang:
            time.sleep(30)
        os.kill(os.getpid(), signal.SIGKILL)

    def __fspath__(self) -> str:
        self._touch()
        return ""

    def __getattr__(self, name: str) -> None:
        if name.startswith("__"):  # pickle's probes
            raise AttributeError(name)
        self._touch()


def test_a_dying_or_hanging_worker_costs_only_its_test(tests: dict[str, cf.NodeTest], tmp_path: Path) -> None:
    ok = tests["test_abs"]
    dies = dataclasses.replace(ok, name="dies", model=_Poisoned(hang=False))
    hangs = dataclasses.replace(ok, name="hangs", model=_Poisoned(hang=True))
    run = cf.run_suite([dies, ok, hangs, ok], workers=1, cache_dir=str(tmp_path), timeout_s=2)
    assert [o.status for o in run.outcomes] == ["traceback", "pass", "traceback", "pass"]
    assert "worker process died (exit status -9)" in run.outcomes[0].detail
    assert "ran longer than 2 s" in run.outcomes[2].detail


def test_rejection_list_round_trip(tmp_path: Path) -> None:
    outcomes = [
        cf.Outcome("test_b", "Max", "rejected", "input 'x' is int32; only float32 model inputs are supported",
                   listed=True),
        cf.Outcome("test_a", "Conv", "rejected", "unsupported by the compiler: Conv node 'c' with pads=[1]",
                   listed=True),
        cf.Outcome("test_c", "Abs", "pass", listed=True),
        cf.Outcome("test_d", "Foo", "rejected", "unsupported by the compiler: Foo (node 'f')"),
    ]
    path = tmp_path / "rejections.txt"
    rows = cf.write_rejections(outcomes, path)
    assert [r.name for r in rows] == ["test_a", "test_b"]
    back = cf.read_rejections(path)
    assert list(back) == ["test_a", "test_b"]
    assert back["test_b"].reason == outcomes[0].detail
    assert back["test_b"].justification.startswith("a model input of an integer/boolean dtype")
    assert back["test_a"].justification.startswith("an attribute value or operand form")
    suite = cf.Suite(outcomes, ["Abs", "Conv", "Max"], [])
    assert cf.rejection_list_drift(suite, back) == []
    moved = [dataclasses.replace(outcomes[0], status="pass"), *outcomes[1:3],
             dataclasses.replace(outcomes[2], name="test_e", status="rejected", detail="a new reason")]
    drift = cf.rejection_list_drift(cf.Suite(moved, ["Abs", "Conv", "Max"], []), back)
    assert any("test_b (Max): now PASSES" in d for d in drift)
    assert any("test_e (Abs): newly REJECTED (a new reason)" in d for d in drift)


def _script():  # noqa: ANN202
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "conformance.py"
    spec = importlib.util.spec_from_file_location("conformance_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_prints_the_figures_as_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import json

    out = tmp_path / "abs.json"
    assert _script().main(["--op", "Abs", "--json", "--out", str(out)]) == 0
    fig = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert fig["listed_tests"] == fig["listed"]["pass"] > 0 and fig["float32_pass_rate"] == 1.0
    assert fig["ops_supported"] >= 40 and fig["ops_default_domain"] > 150
    saved = json.loads(out.read_text())
    assert {o["name"] for o in saved["outcomes"]} >= {"test_abs", "test_abs:folded"}


def test_script_refuses_bad_arguments_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    script = _script()
    for argv in (["--workers", "0"], ["--op", "NoSuchOp"], ["--write-rejections", "--op", "Abs"]):
        with pytest.raises(SystemExit) as exit_:
            script.main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error:")
