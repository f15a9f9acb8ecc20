"""ONNX's own node tests, run through this compiler.

The onnx package ships the definitions of its node tests (``onnx.backend.test.case.node``);
:func:`node_tests` generates their models, inputs and expected outputs in memory, as onnx's own
tooling does to write its test data. Each test is then prepared as a real model would present it:
the operands that exporters write as constants (shapes, axes, starts/ends/steps, pads, repeats,
split sizes, Resize scales/sizes, TopK's k, gather/scatter indices, Clip bounds, ...; see
:data:`CONSTANT_OPERANDS`) become initializers, everything else stays a model input.

:func:`run_test` imports a test with the frontend, compiles it for the CPU with no tuning database,
runs it and compares every output with the expected one (:data:`TOLERANCES`). A test ends in
exactly one of four states:

- ``pass``: every output has the expected dtype, shape and values;
- ``rejected``: the frontend (``from_onnx``) refused the model with a named reason (a ``GraphError``,
  e.g. ``UnsupportedModelError``); its message is the reason;
- ``wrong``: the compiled model ran and an output differs (values, shape or dtype);
- ``traceback``: any other exception, including a ``GraphError`` raised after import (problems must
  be reported before any work starts), a crashed worker process or a test that ran too long.

:func:`run_suite` runs many tests in worker processes and survives a worker that dies or hangs.
The committed list of expected rejections (``tests/data/onnx_node_rejections.txt``) is read and
written by :func:`read_rejections` / :func:`write_rejections`; every line carries a justification
from :data:`JUSTIFICATIONS`.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import re
import signal
import time
import traceback
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

STATUSES = ("pass", "rejected", "wrong", "traceback")
REJECTIONS_PATH = Path(__file__).resolve().parents[2] / "tests" / "data" / "onnx_node_rejections.txt"
TEST_TIMEOUT_S = 120  # one test (import + compile + run); beyond it the test is a traceback

_REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
               "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")

# Operand (by its name in the operator's schema) that a real model holds as a constant: it fixes an
# output shape or is a literal an exporter writes (axes, a shape, indices into a weight, a bound).
CONSTANT_OPERANDS: dict[str, tuple[str, ...]] = {
    "Reshape": ("shape",),
    "Expand": ("shape",),
    "Tile": ("repeats",),
    "Slice": ("starts", "ends", "axes", "steps"),
    "Pad": ("pads", "constant_value", "axes"),
    "Squeeze": ("axes",),
    "Unsqueeze": ("axes",),
    **{op: ("axes",) for op in _REDUCE_OPS},
    "Split": ("split",),
    "Resize": ("roi", "scales", "sizes"),
    "Upsample": ("scales",),
    "TopK": ("K",),
    "Trilu": ("k",),
    "CumSum": ("axis",),
    "CumProd": ("axis",),
    "Gather": ("indices",),
    "GatherElements": ("indices",),
    "GatherND": ("indices",),
    "Scatter": ("indices",),
    "ScatterElements": ("indices",),
    "ScatterND": ("indices",),
    "Clip": ("min", "max"),
    "OneHot": ("depth", "values"),
    "Range": ("start", "limit", "delta"),
    "ConstantOfShape": ("input",),
    "Dropout": ("ratio", "training_mode"),
    "CastLike": ("target_type",),  # only its dtype matters: an exporter's literal
    "BatchNormalization": ("scale", "B", "input_mean", "input_var"),  # inference: folded weights
    "CenterCropPad": ("shape",),
    "Col2Im": ("image_shape", "block_shape"),
    "DFT": ("dft_length", "axis"),
    "STFT": ("frame_step", "frame_length"),
    "MaxUnpool": ("output_shape",),
    "AffineGrid": ("size",),
    "NonMaxSuppression": ("max_output_boxes_per_class", "iou_threshold", "score_threshold"),
    "BlackmanWindow": ("size",),
    "HammingWindow": ("size",),
    "HannWindow": ("size",),
    "MelWeightMatrix": ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"),
}

# (rtol, atol) per output dtype: |got - expected| <= atol + rtol * |expected|, NaN where NaN is
# expected. float32 takes onnx's own test tolerance (rtol 1e-3: some expected values are written
# with 4 significant digits) with atol 1e-5 for FMA contraction and vectorized transcendental
# functions near zero; float64 is tight enough that computing it in float32 fails; float16 and
# bfloat16 allow about one ulp. Every other dtype (integers, bool, float8, strings) must match
# exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-3, 1e-5),
    "float64": (1e-9, 1e-12),
    "float16": (2e-3, 1e-3),
    "bfloat16": (1e-2, 1e-3),
}

# Why a rejection is acceptable, by the frontend's reason (first pattern that matches, searched in
# the reason). A rejection whose reason no pattern matches is unjustified: the conformance test
# fails until the operator is fixed or a justification is added here.
JUSTIFICATIONS: tuple[tuple[str, str], ...] = (
    (r"is (float16|bfloat16|float8\w*|float4\w*)[;:]",
     "reduced-precision model inputs: the compiler computes in float32 and does not take them"),
    (r"is float64[;:]", "double-precision model inputs: the compiler computes in float32"),
    (r"input '[^']*' is (u?int\d+|bool)[;:]",
     "a model input of an integer/boolean dtype the kernels do not compute (issue 22 item 3)"),
    (r"is (str|object|complex\d+)[;:]", "string/complex tensors: not a numeric tensor compiler's input"),
    (r"is not a tensor", "sequence/optional values: only tensors flow through the compiler"),
    (r"dynamic dims|0-sized|zero-sized|zero-size",
     "a dynamic or empty dimension: the compiler needs static, non-empty shapes"),
    (r"casts of computed values|target type \w+ is not compiled",
     "a run-time Cast to a dtype the kernels do not compute (issue 22 item 3)"),
    (r"is compiled for ", "a run-time dtype this operator's kernels do not compute (named in the reason)"),
    (r"only supported on constants|only folded on constants",
     "this operator is evaluated on constants only (at import); the test computes it at run time"),
    (r"-d operands are not supported", "1-d MatMul operands (vector products): not supported yet"),
    (r"reduction to a 0-d value", "a run-time reduction to a scalar (keepdims=0, all axes): not compiled"),
    (r"scale-only type", "float8 e8m0 (a scale-only format): its rounding is not implemented"),
    (r"training mode|training_mode", "training-mode normalization/dropout: an inference compiler"),
    (r"Mean / InvStdDev outputs",
     "LayerNormalization's training statistics outputs (:required-outputs tests the rest)"),
    (r"the mask output", "Dropout's mask output (:required-outputs tests the rest)"),
    (r"second output \(Indices\)", "MaxPool's argmax Indices output: not supported"),
    (r"-d kernel \(only|only \d-d and \d-d",
     "convolution/pooling over this many spatial dims: not supported"),
    (r"unsupported by the compiler: [A-Z]\w* \(nodes? ",
     "the test's graph (a function body) uses an operator the frontend does not list"),
    (r"unsupported by the compiler: .*node '[^']*'( with |: )",
     "an attribute value or operand form of this operator not compiled yet (named in the reason)"),
)


@dataclass
class NodeTest:
    """One node test, prepared: ``model`` with the constant operands as initializers, the
    remaining inputs by name and the expected outputs in graph output order."""

    name: str
    op: str  # the operator under test ("domain.Op" outside the default domain)
    model: Any
    inputs: dict[str, Any]
    expected: list[Any]
    constants: tuple[str, ...] = ()
    float32: bool = False  # every floating input/output is float32 (and there is one)

    @property
    def variant(self) -> str:
        """"" for the test as onnx defines it, else the variant (see :func:`prepare`)."""
        return self.name.partition(":")[2]


@dataclass
class Outcome:
    """What happened to one test."""

    name: str
    op: str
    status: str  # one of STATUSES
    detail: str = ""  # reason (rejected), mismatch (wrong), exception (traceback)
    seconds: float = 0.0
    float32: bool = False
    listed: bool = False  # the operator is one the frontend lists as supported

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "status": self.status, "detail": self.detail,
                "float32": self.float32, "listed": self.listed}


@dataclass
class Rejection:
    """One line of the expected-rejections list."""

    name: str
    reason: str
    justification: str = ""


@dataclass
class Suite:
    """A run's outcomes and the operator lists they were judged against."""

    outcomes: list[Outcome]
    listed_ops: list[str]
    default_domain_ops: list[str]
    seconds: float = 0.0

    def __repr__(self) -> str:
        return f"Suite({len(self.outcomes)} outcomes, {len(self.listed_ops)} listed operators)"


def default_domain_ops() -> list[str]:
    """Every operator type of ONNX's default domain that is not deprecated (this onnx's opsets)."""
    import onnx.defs

    latest: dict[str, Any] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        newer = s.name not in latest or s.since_version > latest[s.name].since_version
        if s.domain in ("", "ai.onnx") and newer:
            latest[s.name] = s
    return sorted(n for n, s in latest.items() if not s.deprecated)


def listed_ops() -> list[str]:
    """The ONNX operators the frontend lists as supported now (``ops.supported_ops()``, read at call
    time, so operators added later count)."""
    from autotune.graph.ops import supported_ops

    onnx_ops = set(default_domain_ops())
    return sorted(op for op in supported_ops() if op in onnx_ops)


def _schema_names(node: Any, opset: int) -> list[str]:
    """The schema's name of each of ``node``'s inputs (the variadic last one repeated)."""
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return []
    formal = [p.name for p in schema.inputs]
    if not formal:
        return []
    return [formal[min(i, len(formal) - 1)] for i in range(len(node.input))]


def _opset(model: Any, domain: str) -> int:
    for o in model.opset_import:
        if o.domain == domain or (domain in ("", "ai.onnx") and o.domain in ("", "ai.onnx")):
            return int(o.version)
    return 1


def _op_name(node: Any) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def constant_inputs(model: Any) -> set[str]:
    """Names of the graph inputs of a one-node test that :data:`CONSTANT_OPERANDS` makes constant."""
    if len(model.graph.node) != 1:
        return set()
    node = model.graph.node[0]
    wanted = CONSTANT_OPERANDS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
    names = _schema_names(node, _opset(model, node.domain))
    graph_inputs = {vi.name for vi in model.graph.input}
    return {v for v, f in zip(node.input, names) if v and f in wanted and v in graph_inputs}


def _with_initializers(model: Any, values: Mapping[str, Any]) -> Any:
    """A copy of ``model`` whose graph inputs named in ``values`` are initializers holding them."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if out.ir_version >= 4:  # before IR 4 an initializer must also be listed as a graph input
        keep = [vi for vi in out.graph.input if vi.name not in values]
        del out.graph.input[:]
        out.graph.input.extend(keep)
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), name) for name, v in values.items())
    return out


def _without_output_shapes(model: Any) -> Any:
    """A copy of ``model`` whose graph outputs declare symbolic dims only, so that the compiler's
    own shape inference is what the comparison with the expected outputs judges."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.output:
        if vi.type.HasField("tensor_type"):
            for i, d in enumerate(vi.type.tensor_type.shape.dim):
                d.dim_param = f"{vi.name}_d{i}"
    return out


def _optional_outputs(model: Any) -> list[int]:
    """Positions of the optional outputs a one-node test's node produces (e.g. LayerNormalization's
    Mean and InvStdDev, Dropout's mask)."""
    import onnx.defs

    if len(model.graph.node) != 1:
        return []
    node = model.graph.node[0]
    try:
        schema = onnx.defs.get_schema(node.op_type, _opset(model, node.domain), node.domain)
    except onnx.defs.SchemaError:
        return []
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return [i for i, (v, f) in enumerate(zip(node.output, schema.outputs)) if v and f.option == optional]


def _without_outputs(model: Any, drop: Sequence[int]) -> Any:
    """A copy of a one-node ``model`` whose node omits the outputs at positions ``drop``."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    gone = {node.output[i] for i in drop}
    names = ["" if v in gone else v for v in node.output]
    while names and not names[-1]:
        names.pop()
    del node.output[:]
    node.output.extend(names)
    keep = [vi for vi in out.graph.output if vi.name not in gone]
    del out.graph.output[:]
    out.graph.output.extend(keep)
    return out


def _value(v: Any) -> Any:
    """A test's input or output as numpy (tensors given as TensorProto or numpy scalars); sequences
    and optionals stay as they are."""
    from onnx import TensorProto, numpy_helper

    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


def _is_float32_test(arrays: Iterable[Any]) -> bool:
    kinds = [np.asarray(a).dtype for a in arrays if isinstance(a, np.ndarray)]
    floats = [d for d in kinds if d.kind == "f" or "float" in str(d)]
    return bool(floats) and all(d == np.float32 for d in floats)


def prepare(case: Any, base: Any) -> list[NodeTest]:
    """The conformance tests of one onnx test case (``base``: the case of the operator itself when
    ``case`` is its function body, ``*_expanded``): the test as defined, then its variants:

    - ``:folded``: every input a constant, so the frontend folds the whole test at import with the
      operators' numpy evaluation (the path shape arithmetic and masks of real models take);
    - ``:required-outputs``: the node without its optional outputs (as exporters write
      LayerNormalization or Dropout), where the test has some.

    Operands of :data:`CONSTANT_OPERANDS` are constants in every form; output shapes are not
    declared (the comparison checks them)."""
    inputs, expected = ([_value(v) for v in vs] for vs in case.data_sets[0])
    names = [vi.name for vi in case.model.graph.input]
    values = dict(zip(names, inputs))
    model = _without_output_shapes(case.model)
    const = constant_inputs(base.model) & set(values)
    op = _op_name(base.model.graph.node[0])
    f32 = _is_float32_test(list(inputs) + list(expected))

    def make(name: str, model: Any, const: set[str], keep: Sequence[int] | None = None) -> NodeTest:
        return NodeTest(
            name=name,
            op=op,
            model=_with_initializers(model, {n: values[n] for n in names if n in const}) if const else model,
            inputs={n: values[n] for n in names if n not in const},
            expected=[expected[i] for i in keep] if keep is not None else list(expected),
            constants=tuple(n for n in names if n in const),
            float32=f32,
        )

    tests = [make(case.name, model, const)]
    if all(isinstance(v, np.ndarray) for v in inputs) and set(names) - const:
        tests.append(make(case.name + ":folded", model, set(names)))
    drop = _optional_outputs(model)
    if drop:
        gone = {model.graph.node[0].output[j] for j in drop}
        keep = [i for i, vi in enumerate(model.graph.output) if vi.name not in gone]
        tests.append(make(case.name + ":required-outputs", _without_outputs(model, drop), const, keep))
    return tests


@functools.lru_cache(maxsize=1)
def node_tests() -> tuple[NodeTest, ...]:
    """Every node test the installed onnx package defines, prepared with its variants (sorted by
    name; see :func:`prepare`)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = list(collect_testcases())
    by_name = {c.name: c for c in cases}
    tests: list[NodeTest] = []
    for c in sorted(cases, key=lambda c: c.name):
        tests.extend(prepare(c, by_name.get(re.sub(r"_expanded(_ver\d+)?$", "", c.name), c)))
    return tuple(tests)


def compare(expected: Sequence[Any], got: Sequence[Any], names: Sequence[str] = ()) -> str | None:
    """Why ``got`` is not ``expected`` (dtype, shape or values beyond :data:`TOLERANCES`), or None."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        label = f"output {i}" + (f" {names[i]!r}" if i < len(names) else "")
        if not isinstance(e, np.ndarray):
            return f"{label}: expected a {type(e).__name__}, not a tensor"
        g = np.asarray(g)
        if g.dtype != e.dtype:
            return f"{label}: dtype {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"{label}: shape {list(g.shape)}, expected {list(e.shape)}"
        if str(e.dtype) in TOLERANCES:
            rtol, atol = TOLERANCES[str(e.dtype)]
            ok = np.isclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = g == e
            if e.dtype.kind == "f" or "float" in str(e.dtype):  # numpy's floats and ml_dtypes' float8s
                ok |= np.isnan(e.astype(np.float32)) & np.isnan(g.astype(np.float32))
        if not np.all(ok):
            bad = np.argwhere(~np.asarray(ok))
            at = tuple(int(x) for x in bad[0])
            return (f"{label}: {len(bad)} of {e.size} values differ; first at {list(at)}: "
                    f"got {g[at]!r}, expected {e[at]!r}")
    return None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 400 else text[:397] + "..."


def _where(err: BaseException) -> str:
    """``file:line`` of the innermost frame inside this package that raised ``err``."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if "/autotune/" in f.filename.replace(os.sep, "/")]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{f.filename.replace(os.sep, '/').split('/autotune/')[-1]}:{f.lineno}]"


class _TestTimeout(Exception):
    pass


def run_test(test: NodeTest, cache_dir: str | None = None, listed: Sequence[str] = ()) -> Outcome:
    """Import, compile (CPU, empty database), run and check one test; never raises."""
    from autotune.graph import GraphError, compile_model, from_onnx
    from autotune.graph.half import as_declared

    out = Outcome(test.name, test.op, "pass", float32=test.float32, listed=test.op in listed)
    t0 = time.perf_counter()
    stage = "import"
    try:
        try:
            graph = from_onnx(test.model)
        except GraphError as err:
            out.status, out.detail = "rejected", _one_line(err)
            return out
        if test.variant == "folded" and all(o in graph.consts for o in graph.outputs):  # nothing to compile
            got = as_declared(graph, [graph.consts[o] for o in graph.outputs])
        else:
            stage = "compile"
            module = compile_model(graph, db=None, verbose=False, cache_dir=cache_dir, workers=1)
            stage = "run"
            got = module.run({n: test.inputs[n] for n in module.input_names if n in test.inputs})
        mismatch = compare(test.expected, got, graph.outputs)
        if mismatch:
            out.status, out.detail = "wrong", mismatch
    except (Exception, _TestTimeout) as err:  # noqa: BLE001 - every failure is an outcome
        out.status = "traceback"
        out.detail = f"{stage}: {type(err).__name__}: {_one_line(err)}{_where(err)}"
    finally:
        out.seconds = time.perf_counter() - t0
    return out


def _worker(conn: Any, cache_dir: str | None, listed: Sequence[str], timeout_s: int) -> None:
    """Run the tests that arrive on ``conn`` (None: stop), sending back each Outcome."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the workers already fill the cores
    warnings.simplefilter("ignore")  # numpy's warnings on the tests' infinities and NaNs

    def on_alarm(signum: int, frame: Any) -> None:
        raise _TestTimeout(f"ran longer than {timeout_s} s")

    signal.signal(signal.SIGALRM, on_alarm)
    while (test := conn.recv()) is not None:
        signal.alarm(timeout_s)
        try:
            outcome = run_test(test, cache_dir, listed)
        finally:
            signal.alarm(0)
        conn.send(outcome)


def run_suite(
    tests: Sequence[NodeTest] | None = None,
    workers: int | None = None,
    cache_dir: str | None = None,
    progress: Any = None,
    timeout_s: int = TEST_TIMEOUT_S,
) -> Suite:
    """Run ``tests`` (default: every node test) in ``workers`` processes (default: one per core;
    fresh interpreters, not forks: a fork of a process whose OpenMP runtime has started threads
    hangs in its first parallel region), each test sent to a free one. A test running longer than
    ``timeout_s`` is a traceback; a worker that dies, or is still stuck a few seconds after that (in
    C, where the alarm cannot reach), is killed and replaced, taking only its current test with it.
    ``progress`` gets each Outcome as it arrives."""
    from multiprocessing.connection import wait

    t0 = time.perf_counter()
    tests = list(node_tests() if tests is None else tests)
    listed = listed_ops()
    ctx = mp.get_context("spawn")
    pending = deque(sorted(range(len(tests)), key=lambda i: (tests[i].op not in listed, i)))
    busy: dict[Any, tuple[Any, int, float]] = {}  # a worker's pipe -> (process, test index, since)
    done: dict[int, Outcome] = {}

    def feed(conn: Any, proc: Any) -> None:
        if pending:
            i = pending.popleft()
            busy[conn] = (proc, i, time.monotonic())
            conn.send(tests[i])
        else:
            conn.send(None)
            conn.close()
            proc.join()

    def spawn() -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, cache_dir, listed, timeout_s), daemon=True)
        proc.start()
        child.close()
        feed(parent, proc)

    def record(i: int, outcome: Outcome) -> None:
        done[i] = outcome
        if progress:
            progress(outcome)

    def lost(conn: Any, proc: Any, i: int, why: str) -> None:
        proc.kill()
        proc.join()
        conn.close()
        t = tests[i]
        record(i, Outcome(t.name, t.op, "traceback", f"run: {why} (exit status {proc.exitcode})",
                          float32=t.float32, listed=t.op in listed))
        spawn()

    for _ in range(max(1, min(workers or os.cpu_count() or 1, len(tests)))):
        spawn()
    try:
        while busy:
            for conn in wait(list(busy), timeout=1.0):
                proc, i, _ = busy.pop(conn)  # type: ignore[call-overload]
                try:
                    outcome = conn.recv()
                except (EOFError, OSError):
                    lost(conn, proc, i, "the worker process died")
                    continue
                record(i, outcome)
                feed(conn, proc)
            now = time.monotonic()
            for conn, (proc, i, since) in list(busy.items()):
                if now - since > timeout_s + 10:
                    del busy[conn]
                    lost(conn, proc, i, f"stuck past {timeout_s} s, killed")
    finally:
        for conn, (proc, _, _) in busy.items():
            proc.kill()
            conn.close()
    return Suite([done[i] for i in range(len(tests))], listed, default_domain_ops(), time.perf_counter() - t0)


def justify(reason: str) -> str:
    """The justification of a rejection for ``reason`` ("" when no rule of JUSTIFICATIONS fits)."""
    for pattern, why in JUSTIFICATIONS:
        if re.search(pattern, reason):
            return why
    return ""


def read_rejections(path: Path = REJECTIONS_PATH) -> dict[str, Rejection]:
    """The expected-rejections list: ``name<TAB>reason<TAB># justification`` lines, ``#`` comments."""
    out: dict[str, Rejection] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        name = parts[0].strip()
        reason = parts[1].strip() if len(parts) > 1 else ""
        why = parts[2].strip().removeprefix("#").strip() if len(parts) > 2 else ""
        out[name] = Rejection(name, reason, why)
    return out


def write_rejections(outcomes: Iterable[Outcome], path: Path = REJECTIONS_PATH) -> list[Rejection]:
    """Write the rejected tests of listed operators as the expected-rejections list; returns them."""
    rows = [Rejection(o.name, o.detail, justify(o.detail))
            for o in sorted(outcomes, key=lambda o: o.name) if o.listed and o.status == "rejected"]
    header = (
        "# ONNX node tests of operators the frontend lists as supported that it rejects, with the\n"
        "# frontend's reason and why that is acceptable. One test a line:\n"
        "#   test name <TAB> the frontend's reason <TAB> # justification\n"
        "# Regenerate with: python scripts/conformance.py --write-rejections\n"
        "# (justifications come from JUSTIFICATIONS in autotune/graph/conformance.py).\n"
    )
    body = "".join(f"{r.name}\t{r.reason}\t# {r.justification or 'UNJUSTIFIED'}\n" for r in rows)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(header + body)
    os.replace(tmp, path)
    return rows


def wrong_or_traceback(suite: Suite) -> list[str]:
    """Every wrong answer and traceback of the run, listed operators or not."""
    return [f"{o.name} ({o.op}): {o.status.upper()}: {o.detail}"
            for o in suite.outcomes if o.status in ("wrong", "traceback")]


def rejection_list_drift(suite: Suite, expected: Mapping[str, Rejection]) -> list[str]:
    """Where the run and the expected-rejections list disagree: a listed operator's test rejected
    but not in the list, or in the list but passing; a line for no test, for an operator no longer
    listed, or without a justification."""
    fix = "python scripts/conformance.py --write-rejections"
    problems = []
    seen = {o.name: o for o in suite.outcomes}
    for o in suite.outcomes:
        if o.listed and o.status == "rejected" and o.name not in expected:
            problems.append(f"{o.name} ({o.op}): newly REJECTED ({o.detail}); fix it, or list it with {fix}")
        elif o.listed and o.status == "pass" and o.name in expected:
            problems.append(f"{o.name} ({o.op}): now PASSES but is listed as rejected; rerun {fix}")
    for name, r in expected.items():
        o = seen.get(name)
        if o is None:
            problems.append(f"{name}: listed as rejected, but there is no such test; rerun {fix}")
        elif not o.listed:
            problems.append(f"{name}: listed, but {o.op} is not a listed operator any more; rerun {fix}")
        elif r.justification in ("", "UNJUSTIFIED"):
            problems.append(f"{name}: rejection not justified ({r.reason}); add a rule to JUSTIFICATIONS "
                            f"in autotune/graph/conformance.py, then rerun {fix}")
    return problems


def figures(suite: Suite) -> dict[str, Any]:
    """The headline figures of a run (JSON-safe). ``listed``/``float32_*``/``per_op`` count the
    listed operators' tests as onnx defines them; ``variants`` the same operators' variants;
    ``all`` every test and variant of every operator."""

    def tally(outcomes: Iterable[Outcome]) -> dict[str, int]:
        outcomes = list(outcomes)
        return {s: sum(o.status == s for o in outcomes) for s in STATUSES}

    listed = [o for o in suite.outcomes if o.listed and ":" not in o.name]
    f32 = [o for o in listed if o.float32]
    f32_pass = sum(o.status == "pass" for o in f32)
    variants = sorted({o.name.partition(":")[2] for o in suite.outcomes} - {""})
    return {
        "ops_supported": len(suite.listed_ops),
        "ops_default_domain": len(suite.default_domain_ops),
        "listed_tests": len(listed),
        "listed": tally(listed),
        "float32_tests": len(f32),
        "float32_pass": f32_pass,
        "float32_pass_rate": round(f32_pass / len(f32), 4) if f32 else None,
        "variants": {v: tally(o for o in suite.outcomes if o.listed and o.name.endswith(":" + v))
                     for v in variants},
        "all_tests": len(suite.outcomes),
        "all": tally(suite.outcomes),
        "seconds": round(suite.seconds, 1),
        "per_op": {op: tally(o for o in listed if o.op == op) for op in sorted({o.op for o in listed})},
        "supported_ops": suite.listed_ops,
    }
