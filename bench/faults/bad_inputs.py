#!/usr/bin/env python3
"""Fault suite for the bad-input contract of scripts/tune.py, compile.py and bench.py (and their
--model files): every bad input gets exactly one stderr line naming the problem, exit status 2, and
nothing written (no file created, changed or removed: every file is compared by SHA-256, so a DB
keeps its rows). Each case runs as a real subprocess in a fresh copy of the fixtures (real SQLite
files, real ONNX files, one DB really tuned). Ctrl-C during a tune is checked too: one line, exit
status 130, an intact DB, and a rerun that resumes to exactly --trials.

    python bench/faults/bad_inputs.py [--jobs 2] [--only TEXT] [-o bench/faults/bad_inputs.json]

Prints a JSON summary (cases, passed, failed with names) and writes it to the output file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "tune": ROOT / "scripts" / "tune.py",
    "compile": ROOT / "scripts" / "compile.py",
    "bench": ROOT / "scripts" / "bench.py",
    "bench_search": ROOT / "scripts" / "bench_search.py",
}
CASE_TIMEOUT_S = 120.0
SIGINT_CASE = "tune: Ctrl-C during tuning, then rerun"
COMPILE_SIGINT_CASE = "compile: Ctrl-C during the build"
# a workload that tunes in a second or two (the tuned fixture DB and the Ctrl-C case)
SMALL_OP = ("matmul", "16,16,16")


@dataclass(frozen=True)
class Case:
    """One bad input: the tool, its arguments (run in a copy of the fixtures) and a word or two the
    one error line must contain (so the refusal is for the intended reason)."""

    name: str
    tool: str
    args: tuple[str, ...]
    needle: str


# --- fixtures -----------------------------------------------------------------------------------
def _onnx_model(nodes, inputs, outputs, name="g", inits=(), opset=17):  # noqa: ANN001, ANN201
    from onnx import helper

    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape, elem: int | None = None):  # noqa: ANN001, ANN202
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, shape)


def make_models(where: Path) -> None:
    """A valid model and one ONNX file per way a model can be bad."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def relu(shape, name="g", elem=None, out_shape=None):  # noqa: ANN001, ANN202
        return _onnx_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", shape, elem)],
                           [_vi("y", out_shape or shape, elem)], name)

    def save(model, fname: str) -> None:  # noqa: ANN001
        (where / fname).write_bytes(model.SerializeToString())

    save(relu([2, 8]), "model.onnx")
    good = (where / "model.onnx").read_bytes()
    (where / "garbage.onnx").write_bytes(b"\x00\x13this is not a protobuf\xff" * 7)
    (where / "truncated.onnx").write_bytes(good[: len(good) // 2])
    (where / "empty.onnx").write_bytes(b"")
    (where / "text.onnx").write_text('{"graph": "not onnx"}\n')
    (where / "dir.onnx").mkdir()
    save(_onnx_model([helper.make_node("FooBar", ["x"], ["y"])], [_vi("x", [2, 8])], [_vi("y", [2, 8])]),
         "unknown_op.onnx")
    save(_onnx_model([helper.make_node("Foo", ["x"], ["y"], domain="com.example")], [_vi("x", [2, 8])],
                     [_vi("y", [2, 8])]), "custom_domain.onnx")
    save(relu(["N", 8]), "dynamic.onnx")
    save(relu([1, 0, 4]), "zero_dim.onnx")
    save(relu([2, 8], elem=TensorProto.DOUBLE), "float64_input.onnx")
    save(relu([2, 8], elem=TensorProto.INT64), "int64_relu.onnx")  # ours runs it, onnxruntime has no kernel
    save(_onnx_model([helper.make_node("Add", ["x", "nowhere"], ["y"])], [_vi("x", [2, 8])],
                     [_vi("y", [2, 8])]), "undefined_value.onnx")
    save(_onnx_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 8])],
                     [_vi("y", [2, 8]), _vi("z", [2, 8])]), "unproduced_output.onnx")
    save(relu([2, 8], out_shape=[3, 8]), "wrong_output_shape.onnx")
    save(_onnx_model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
                     [_vi("x", [2, 8])], [_vi("b", [2, 8])]), "cycle.onnx")
    save(_onnx_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [2, 8])],
                     [_vi("y", [2, 5])], inits=[numpy_helper.from_array(np.ones((3, 5), np.float32), "w")]),
         "mismatched_matmul.onnx")
    save(relu([50000, 50000]), "over_int32.onnx")  # 2.5e9 elements: past 32-bit indexing
    many = [_vi(f"x{i}", [46000, 46000]) for i in range(16)]  # 16 x 8.5 GB of float32 values
    adds = [helper.make_node("Add", [f"x{i}", f"x{i + 1}"], [f"s{i}"]) for i in range(15)]
    save(_onnx_model(adds, many, [_vi(f"s{i}", [46000, 46000]) for i in range(15)]), "over_memory.onnx")
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [_vi("t", [2, 8])])
    save(_onnx_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)],
                     [_vi("c", [], TensorProto.BOOL), _vi("x", [2, 8])], [_vi("y", [2, 8])]), "subgraph.onnx")
    ext = relu([2, 8])
    w = numpy_helper.from_array(np.ones((2, 8), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="weights_missing.bin")
    ext.graph.initializer.append(w)
    ext.graph.node[0].input[0] = "x"
    ext.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"]))
    ext.graph.output.append(_vi("z", [2, 8]))
    save(ext, "external_missing.onnx")
    save(onnx.ModelProto(ir_version=8), "no_graph.onnx")
    save(_onnx_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 8])], [_vi("y", [2, 8])],
                     opset=999), "future_opset.onnx")
    save(_onnx_model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 0, None)],
                     [_vi("y", [2, 8])]), "untyped_input.onnx")


def make_dbs(where: Path, tuned: bool = True) -> None:
    """Tuning DBs that are fine (tuned.db, schema_only.db) and ones that are not ours or not usable."""
    from records import TuningDatabase

    TuningDatabase(where / "schema_only.db").close()
    con = sqlite3.connect(where / "foreign.db")
    con.execute("create table people (name text)")
    con.execute("insert into people values ('ada')")
    con.commit()
    con.close()
    for fname, sql in [
        ("newer.db", "update meta set value = '999' where key = 'schema_version'"),
        ("older.db", "update meta set value = '0' where key = 'schema_version'"),
        ("other_app.db", "update meta set value = 'someone-else' where key = 'app'"),
        ("incomplete.db", "drop view best_measurements"),
    ]:
        shutil.copyfile(where / "schema_only.db", where / fname)
        _sql(where / fname, sql)
    (where / "garbage.db").write_bytes(b"not a database at all\n" * 50)
    (where / "empty.db").write_bytes(b"")
    (where / "dir.db").mkdir()
    (where / "truncated.db").write_bytes((where / "schema_only.db").read_bytes()[:1500])
    if tuned:
        subprocess.run(tune_command(where / "tuned.db", 2), check=True, capture_output=True, timeout=300)
        shutil.copyfile(where / "tuned.db", where / "other_machine.db")
        _sql(where / "other_machine.db", "pragma foreign_keys=off",  # other hardware, not only other versions
             "update targets set key = 'elsewhere', fingerprint = '{\"cpu\": \"another machine\"}'",
             "update measurements set target_key = 'elsewhere'")


def _sql(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


def make_fixtures(where: Path, tuned: bool = True) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    make_models(where)
    make_dbs(where, tuned)
    return where


# --- the cases ------------------------------------------------------------------------------------
# (name, a word or two the error line must contain, arguments as a shell would split them); the
# arguments run in a copy of the fixtures, so the files named here are those make_fixtures writes
MM = "--op matmul --shape 8,8,8"
TUNE_CASES = [
    ("seed -1", "--seed", f"{MM} --seed -1 --db t.db"),
    ("seed past 2**32", "--seed", f"{MM} --seed 4294967296 --db t.db"),
    ("seed not an integer", "--seed", f"{MM} --seed 1.5 --db t.db"),
    ("trials -1", "--trials", f"{MM} --trials -1 --db t.db"),
    ("trials not a number", "--trials", f"{MM} --trials many --db t.db"),
    ("batch size 0", "--batch-size", f"{MM} --batch-size 0 --db t.db"),
    ("batch size -3", "--batch-size", f"{MM} --batch-size -3 --db t.db"),
    ("early stop 0", "--early-stop", f"{MM} --early-stop 0 --db t.db"),
    ("confirm -1", "--confirm", f"{MM} --confirm -1 --db t.db"),
    ("time budget -5", "--time-budget", f"{MM} --time-budget -5 --db t.db"),
    ("time budget nan", "--time-budget", f"{MM} --time-budget nan --db t.db"),
    ("time budget inf", "--time-budget", f"{MM} --time-budget inf --db t.db"),
    ("unknown strategy", "strategy", f"{MM} --strategy magic --db t.db"),
    ("unknown target", "target", f"{MM} --target tpu --db t.db"),
    ("unknown op", "unknown op", "--op nosuchop --shape 1,2 --db t.db"),
    ("op without shape", "needs --shape", "--op matmul --db t.db"),
    ("shape without op", "needs --op", "--shape 8,8,8 --db t.db"),
    ("empty shape without op", "needs --op", "--shape '' --db t.db"),
    ("op and model", "exclusive", f"--model model.onnx {MM} --db t.db"),
    ("model and empty shape", "exclusive", "--model model.onnx --shape '' --db t.db"),
    ("unknown flag", "unrecognized", f"{MM} --fast --db t.db"),
    ("stray argument", "unrecognized", f"{MM} --db t.db matmul"),
    ("flag missing its value", "expected one argument", f"{MM} --db t.db --seed"),
    ("default DB in the working directory, bad seed", "--seed", f"{MM} --seed -7"),
    ("DB is a directory", "directory", f"{MM} --db dir.db"),
    ("DB is a foreign SQLite file", "another application", f"{MM} --db foreign.db"),
    ("DB of another app id", "another application", f"{MM} --db other_app.db"),
    ("DB of a newer schema", "newer", f"{MM} --db newer.db"),
    ("DB of an older schema", "older schema", f"{MM} --db older.db"),
    ("DB missing a view", "incomplete", f"{MM} --db incomplete.db"),
    ("DB is a text file", "not an SQLite database", f"{MM} --db garbage.db"),
    ("DB is a truncated SQLite file", "truncated.db", f"{MM} --db truncated.db"),
    ("DB is an empty name", "--db is empty", f"{MM} --db ''"),
    ("DB is a device", "regular file", f"{MM} --db /dev/null"),
    ("model, layout unknown", "--layout", "--model model.onnx --layout NCWH --db t.db"),
    ("model, winograd 3", "--winograd", "--model model.onnx --winograd 3 --db t.db"),
    ("model, winograd not a number", "--winograd", "--model model.onnx --winograd x --db t.db"),
    ("model, unknown strategy", "strategy", "--model model.onnx --strategy magic --db t.db"),
    ("model, seed -1", "--seed", "--model model.onnx --seed -1 --db t.db"),
    ("model into a foreign DB", "another application", "--model model.onnx --db foreign.db"),
    ("model into a DB of a newer schema", "newer", "--model model.onnx --db newer.db"),
    ("model into a directory", "directory", "--model model.onnx --db dir.db"),
    ("model, unknown target", "target", "--model model.onnx --target tpu --db t.db"),
    ("shape with a negative dim", "positive", "--op matmul --shape -8,8,8 --db t.db"),
    ("shape with a negative dim in the middle", "positive", "--op matmul --shape 8,-8,8 --db t.db"),
    ("shape with a zero dim", "positive", "--op matmul --shape 0,8,8 --db t.db"),
    ("shape of too few values", "takes", "--op matmul --shape 8,8 --db t.db"),
    ("shape of too many values", "takes", "--op matmul --shape 8,8,8,8 --db t.db"),
    ("shape with a letter", "malformed", "--op matmul --shape 8,x,8 --db t.db"),
    ("shape with a fraction", "malformed", "--op matmul --shape 8,1.5,8 --db t.db"),
    ("shape with an empty value", "malformed", "--op matmul --shape 8,,8 --db t.db"),
    ("shape of only a space", "malformed", "--op matmul --shape ' ' --db t.db"),
    ("shape past 64 bits", "32-bit", "--op matmul --shape 99999999999999999999999,1,1 --db t.db"),
    ("shape 100000^3 (past 32-bit indexing)", "32-bit", "--op matmul --shape 100000,100000,100000 --db t.db"),
    ("shape 3000000000,1,1", "32-bit", "--op matmul --shape 3000000000,1,1 --db t.db"),
    ("shape 40000^3 (fits 32-bit indexing, not memory)", "memory",
     "--op matmul --shape 40000,40000,40000 --db t.db"),
    ("relu of 2**31 elements", "32-bit", "--op relu --shape 2147483648 --db t.db"),
    ("conv2d kernel larger than the input", "conv2d", "--op conv2d --shape 1,3,4,4,8,7,7,1,0 --db t.db"),
    ("conv2d stride 0", "positive", "--op conv2d --shape 1,3,8,8,8,3,3,0,1 --db t.db"),
    ("conv2d negative pad", "positive", "--op conv2d --shape 1,3,8,8,8,3,3,1,-1 --db t.db"),
    ("conv2d groups not dividing channels", "divisible",
     "--op conv2d --shape 1,3,8,8,8,3,3,1,1,1,2 --db t.db"),
]
M = "--model model.onnx"
COMPILE_CASES = [
    ("missing DB", "does not exist", f"{M} --db nope.db"),
    ("missing DB by default (./tuning.db)", "does not exist", M),
    ("DB is a directory", "directory", f"{M} --db dir.db"),
    ("DB is a device", "regular file", f"{M} --db /dev/null"),
    ("DB is an empty file", "empty", f"{M} --db empty.db"),
    ("DB is a text file", "not an SQLite database", f"{M} --db garbage.db"),
    ("DB is foreign", "another application", f"{M} --db foreign.db"),
    ("DB of a newer schema", "newer", f"{M} --db newer.db"),
    ("DB of an older schema", "older schema", f"{M} --db older.db"),
    ("DB is truncated", "truncated.db", f"{M} --db truncated.db"),
    ("no --model", "--model", "--db tuned.db"),
    ("-o is a directory", "directory", f"{M} --db tuned.db -o dir.db"),
    ("-o in a missing directory", "does not exist", f"{M} --db tuned.db -o nodir/m.so"),
    ("--profile -1", "--profile", f"{M} --db tuned.db --profile -1"),
    ("--rerank 0", "--rerank", f"{M} --db tuned.db --rerank 0"),
    ("--rerank not a number", "--rerank", f"{M} --db tuned.db --rerank all"),
    ("unknown target", "target", f"{M} --db tuned.db --target tpu"),
    ("unknown layout", "--layout", f"{M} --db tuned.db --layout CHWN"),
    ("winograd 5", "--winograd", f"{M} --db tuned.db --winograd 5"),
    ("unknown flag", "unrecognized", f"{M} --db tuned.db --fast"),
    ("input shape without '='", "--input-shape", f"{M} --db tuned.db --input-shape x"),
    ("input shape without a name", "--input-shape", f"{M} --db tuned.db --input-shape =2,8"),
    ("input shape of letters", "--input-shape", f"{M} --db tuned.db --input-shape x=a,b"),
    ("input shape with a zero", "--input-shape", f"{M} --db tuned.db --input-shape x=0,8"),
    ("input shape with a negative dim", "--input-shape", f"{M} --db tuned.db --input-shape x=-2,8"),
    ("input shape of no input", "not an input", f"{M} --db tuned.db --input-shape q=2,8"),
    ("input shape of another rank", "does not fit", f"{M} --db tuned.db --input-shape x=2,8,1"),
    ("input shape against fixed dims", "does not fit", f"{M} --db tuned.db --input-shape x=3,8"),
]
BENCH_CASES = [
    ("missing DB", "does not exist", "--db nope.db"),
    ("missing DB by default (./tuning.db)", "does not exist", ""),
    ("DB is a directory", "directory", "--db dir.db"),
    ("DB is an empty file", "empty", "--db empty.db"),
    ("DB is a text file", "not an SQLite database", "--db garbage.db"),
    ("DB is foreign", "another application", "--db foreign.db"),
    ("DB of a newer schema", "newer", "--db newer.db"),
    ("DB without workloads", "no tuned workloads", "--db schema_only.db"),
    ("DB with records of another machine only", "no verified records", "--db other_machine.db"),
    ("--repeat 0", "--repeat", "--db tuned.db --repeat 0"),
    ("--repeat -2", "--repeat", "--db tuned.db --repeat -2"),
    ("--min-repeat-ms -1", "--min-repeat-ms", "--db tuned.db --min-repeat-ms -1"),
    ("--min-repeat-ms nan", "--min-repeat-ms", "--db tuned.db --min-repeat-ms nan"),
    ("--min-repeat-ms in words", "--min-repeat-ms", "--db tuned.db --min-repeat-ms fast"),
    ("unknown target", "target", "--db tuned.db --target tpu"),
    ("unknown flag", "unrecognized", "--db tuned.db --quick"),
    ("model with a missing DB", "does not exist", f"{M} --db nope.db"),
    ("model with a foreign DB", "another application", f"{M} --db foreign.db"),
    ("model, --rerank 0", "--rerank", f"{M} --db tuned.db --rerank 0"),
    ("model, --repeat 0", "--repeat", f"{M} --db tuned.db --repeat 0"),
    ("model onnxruntime cannot run (the baseline)", "onnxruntime cannot run",
     "--model int64_relu.onnx --db tuned.db"),
]
# bench_search's JSON option (the one command-line option that takes JSON)
BENCH_SEARCH_CASES = [
    ("tuner options not JSON", "--tuner-options", "--tuner-options '{eps: 0.2'"),
    ("tuner options a JSON list", "--tuner-options", "--tuner-options '[0.2]'"),
]
# every bad model, through each tool that takes --model
MODEL_FILES = [
    ("garbage bytes", "garbage.onnx", "not an ONNX model"),
    ("truncated file", "truncated.onnx", "not an ONNX model"),
    ("empty file", "empty.onnx", "not an ONNX model"),
    ("a text file", "text.onnx", "not an ONNX model"),
    ("a directory", "dir.onnx", "directory"),
    ("nonexistent file", "missing.onnx", "does not exist"),
    ("an empty name", "", "--model is empty"),
    ("a device", "/dev/zero", "regular file"),
    ("nonexistent non-ASCII name", "模型.onnx", "does not exist"),
    ("unknown operator", "unknown_op.onnx", "FooBar"),
    ("operator of another domain", "custom_domain.onnx", "com.example"),
    ("dynamic dims", "dynamic.onnx", "dynamic"),
    ("0-sized dim", "zero_dim.onnx", "0-sized"),
    ("float64 input", "float64_input.onnx", "float64"),
    ("undefined value", "undefined_value.onnx", "nowhere"),
    ("output never produced", "unproduced_output.onnx", "'z'"),
    ("declared output shape wrong", "wrong_output_shape.onnx", "declared"),
    ("a cycle", "cycle.onnx", "sorted"),
    ("MatMul of mismatched shapes", "mismatched_matmul.onnx", "MatMul"),
    ("a value past 32-bit indexing", "over_int32.onnx", "32-bit"),
    ("more memory than the machine has", "over_memory.onnx", "memory"),
    ("If with subgraphs", "subgraph.onnx", "If"),
    ("external weights missing", "external_missing.onnx", "external"),
    ("no graph", "no_graph.onnx", "not an ONNX model"),
    ("opset 999", "future_opset.onnx", "opset"),
    ("untyped input", "untyped_input.onnx", "x"),
    ("unknown zoo model", "zoo:nosuch", "zoo"),
    ("zoo parameter not an integer", "zoo:bert_layer?seq=abc", "seq"),
    ("zoo parameter unknown", "zoo:bert_layer?heads2=4", "heads2"),
    ("zoo parameter 0", "zoo:mlp?batch=0", "0-sized"),
]
MODEL_TOOL_ARGS = {"tune": "--trials 2 --db t.db", "compile": "--db tuned.db", "bench": "--db tuned.db"}


def all_cases() -> list[Case]:
    """Every case: each table above, and every bad model through tune, compile and bench."""
    tables = [("tune", TUNE_CASES, "--no-progress --trials 2 "), ("compile", COMPILE_CASES, ""),
              ("bench", BENCH_CASES, ""), ("bench_search", BENCH_SEARCH_CASES, "")]
    out = [Case(f"{tool}: {name}", tool, tuple(shlex.split(common + args)), needle)
           for tool, table, common in tables for name, needle, args in table]
    for tool, args in MODEL_TOOL_ARGS.items():
        out += [Case(f"{tool} --model: {what}", tool, ("--model", spec, *shlex.split(args)), needle)
                for what, spec, needle in MODEL_FILES]
    return out


# --- running and checking -------------------------------------------------------------------------
def snapshot(where: Path) -> dict[str, str]:
    """Every file and directory under ``where``: relative path -> SHA-256 (or 'dir')."""
    out = {}
    for p in sorted(where.rglob("*")):
        rel = str(p.relative_to(where))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return ([f"created {p}" for p in after if p not in before]
            + [f"removed {p}" for p in before if p not in after]
            + [f"changed {p}" for p in before if p in after and before[p] != after[p]])


def check_result(
    rc: int, stdout: str, stderr: str, written: list[str], needle: str, status: int = 2
) -> list[str]:
    """Why a run breaks the contract (empty: it holds)."""
    problems = []
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    if rc != status:
        problems.append(f"exit status {rc}, not {status}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, not 1")
    elif needle.lower() not in lines[0].lower():
        problems.append(f"the error line does not mention {needle!r}")
    if stdout.strip():
        problems.append("printed to stdout")
    problems += written
    return problems


def run_case(case: Case, fixtures: Path, scratch: Path) -> dict:
    """Run one case as a subprocess in a fresh copy of the fixtures; check the contract."""
    where = scratch / f"case_{abs(hash(case.name)):x}"
    shutil.copytree(fixtures, where, symlinks=True)
    before = snapshot(where)
    cmd = [sys.executable, str(SCRIPTS[case.tool]), *case.args]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -1, "", f"timed out after {CASE_TIMEOUT_S:.0f} s\n{exc.stderr or ''}"
    seconds = time.perf_counter() - t0
    problems = check_result(rc, out, err, changes(before, snapshot(where)), case.needle)
    shutil.rmtree(where, ignore_errors=True)
    return {"name": case.name, "tool": case.tool, "ok": not problems, "problems": problems, "exit": rc,
            "stderr": err.strip()[-600:], "seconds": round(seconds, 2)}


def tune_command(db: Path, trials: int) -> list[str]:
    """A small real tune (no confirmation runs, batches of 2) into ``db``."""
    return [sys.executable, str(SCRIPTS["tune"]), "--op", SMALL_OP[0], "--shape", SMALL_OP[1], "--trials",
            str(trials), "--batch-size", "2", "--confirm", "0", "--no-progress", "--db", str(db)]


# --- Ctrl-C -----------------------------------------------------------------------------------------
def measurement_count(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return int(con.execute("select count(*) from measurements").fetchone()[0])
    except sqlite3.DatabaseError:  # no schema yet (or the file is being created)
        return 0
    finally:
        con.close()


def interrupt(cmd: list[str], ready: Callable[[], bool], cwd: Path | None = None, env: dict | None = None,
              timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Start ``cmd`` and, once ``ready()``, send SIGINT to its process group (as Ctrl-C in a
    terminal does); the finished run."""
    # the child takes SIGINT as a terminal's Ctrl-C does even where this process was started with it
    # ignored (a background job of a non-interactive shell), which the child would inherit
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def interrupt_tune(db: Path, trials: int) -> tuple[subprocess.CompletedProcess, int]:
    """A tune interrupted once it has stored a measurement; the run and how many measurements the DB
    held just before."""
    seen = [0]

    def ready() -> bool:
        seen[0] = measurement_count(db)
        return seen[0] >= 1

    return interrupt(tune_command(db, trials), ready), seen[0]


def compile_sigint_case(scratch: Path) -> dict:
    """Ctrl-C while compile builds a model's kernels (a fresh build cache, so there is work to
    interrupt): one line saying nothing was written, exit 130, no -o file and nothing else new."""
    where, home = scratch / "compile_sigint", scratch / "compile_sigint_home"
    where.mkdir()
    home.mkdir()
    make_dbs(where, tuned=False)
    before = snapshot(where)
    cmd = [sys.executable, str(SCRIPTS["compile"]), "--model", "zoo:resnet18", "--db", "schema_only.db",
           "-o", "model.so"]
    r = interrupt(cmd, lambda: any(home.rglob("*.o")), cwd=where, env=dict(os.environ, HOME=str(home)))
    written = changes(before, snapshot(where))
    problems = check_result(r.returncode, r.stdout, r.stderr, written, "nothing written", status=130)
    return {"name": COMPILE_SIGINT_CASE, "tool": "compile", "ok": not problems, "problems": problems,
            "exit": r.returncode, "stderr": r.stderr.strip()[-600:]}


def sigint_case(scratch: Path) -> dict:
    """Ctrl-C during tuning: one line saying a rerun resumes, exit 130, an intact DB, and the rerun
    reaches exactly --trials measurements with no config measured twice."""
    where = scratch / "sigint"
    where.mkdir()
    db, trials = where / "t.db", 24
    r, seen = interrupt_tune(db, trials)
    problems = []
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    if r.returncode != 130:
        problems.append(f"exit status {r.returncode}, not 130")
    if len(lines) != 1 or "rerun" not in lines[0]:
        problems.append(f"{len(lines)} stderr lines, not one saying a rerun resumes")
    con = sqlite3.connect(db)
    if con.execute("pragma integrity_check").fetchone()[0] != "ok":
        problems.append("integrity_check failed")
    con.close()
    kept = measurement_count(db)
    if kept < seen or kept >= trials:
        problems.append(f"{kept} measurements kept ({seen} seen before the interrupt, budget {trials})")
    rerun = subprocess.run([*r.args], capture_output=True, text=True, timeout=600)
    con = sqlite3.connect(db)
    total, distinct = con.execute("select count(*), count(distinct config_key) from measurements").fetchone()
    con.close()
    if rerun.returncode != 0 or total != trials or distinct != total:
        problems.append(f"rerun: exit {rerun.returncode}, {total} measurements, {distinct} distinct configs "
                        f"(want {trials})")
    return {"name": SIGINT_CASE, "tool": "tune", "ok": not problems, "problems": problems,
            "exit": r.returncode, "stderr": r.stderr.strip()[-600:], "kept": kept}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--only", default="", help="run only cases whose name contains this text")
    p.add_argument("-o", "--output", default=str(Path(__file__).with_suffix(".json")))
    args = p.parse_args(argv)
    cases = [c for c in all_cases() if args.only in c.name]
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be distinct"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bad_inputs_") as tmp:
        scratch = Path(tmp)
        fixtures = make_fixtures(scratch / "fixtures")
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda c: run_case(c, fixtures, scratch), cases))
        if args.only in SIGINT_CASE:
            results.append(sigint_case(scratch))
        if args.only in COMPILE_SIGINT_CASE:
            results.append(compile_sigint_case(scratch))
    failed = [r for r in results if not r["ok"]]
    summary = {
        "cases": len(results),
        "passed": len(results) - len(failed),
        "failed": [{"name": r["name"], "problems": r["problems"], "stderr": r["stderr"]} for r in failed],
        "by_tool": {t: sum(1 for r in results if r["tool"] == t) for t in SCRIPTS},
        "seconds": round(time.perf_counter() - t0, 1),
        "results": [{k: r[k] for k in ("name", "ok", "exit", "stderr")} for r in results],
    }
    Path(args.output).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: summary[k] for k in ("cases", "passed", "failed", "seconds")}, ensure_ascii=False))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
