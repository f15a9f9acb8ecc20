"""Features of a candidate schedule, read from its lowered loop-nest IR.

One vector per buffer store (arithmetic, loop structure and annotations, memory access of the
written buffer and of the three largest reads, reuse, footprints), combined into one fixed-length
vector per candidate: the ``TOP_STORES`` stores with the most floating-point work, concatenated, then
the sums over all stores, then a few whole-kernel values. Every value is log-scaled as
``sign(x) * log2(1 + |x|)``. docs/cost_model.md lists every slot; :func:`feature_names` gives them.

The features come from the *un-optimized* lowering (``lower(..., simplify_ir=False)``): loops are
still loops (no unrolled copies, no vector nodes), which keeps extraction cheap and the structure
visible. Index expressions are evaluated numerically to get strides, so they need no simplification.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from autotune.ir import PrimFunc, lower
from autotune.ir.nodes import Allocate, Buffer, For, IfThen, Load, Seq, Stmt, Store
from autotune.schedule import Step, apply_steps
from autotune.target import Target
from autotune.te import Workload
from autotune.te.expr import (
    FLOAT_DTYPES,
    INT_DTYPES,
    Binary,
    Call,
    Cast,
    Compare,
    Expr,
    IntImm,
    Not,
    Select,
    Var,
    children,
)

FEATURE_VERSION = 3
CACHE_LINE = 64  # bytes
TOP_STORES = 3
READ_SLOTS = 3

# --- slot names ------------------------------------------------------------------------------------
ARITH = ["f_addsub", "f_mul", "f_div", "f_maxmin", "f_math", "f_select_cmp", "int_arith", "int_divmod",
         "flops"]
LOOPS = [
    "num_loops", "trip_count", "inner_extent", "inner_serial", "inner_parallel", "inner_vectorize",
    "inner_unroll", "vec_len", "vec_loops", "unroll_product", "unroll_loops", "registers_extent",
    "parallel_product",
    "parallel_loops", "serial_product", "work_per_thread", "guards", "is_init", "is_update",
]
GPU = ["blockIdx_x", "blockIdx_y", "blockIdx_z", "threadIdx_x", "threadIdx_y", "threadIdx_z", "vthread",
       "shared_bytes", "register_bytes"]
# scale-free shape of the nest: what transfers between workloads of different sizes
TILING = ["reg_tile", "reduce_inner", "reduce_outer", "parallel_imbalance", "flops_fraction", "trip_fraction"]
MEMORY = ["local_bytes", "bytes", "unique_bytes", "lines", "unique_lines", "intensity", "intensity_unique"]
ACCESS = [
    "present", "is_local", "bytes", "unique_bytes", "lines", "unique_lines", "reuse", "reuse_dist_iters",
    "reuse_dist_bytes", "reuse_count", "stride_inner", "stride_inner_nonzero", "stride_vector",
    "reuse_factor", "lines_per_iter", "footprint_fraction",
]
ACCESS_SLOTS = ["write"] + [f"read{i}" for i in range(READ_SLOTS)]
STORE = ARITH + LOOPS + TILING + GPU + MEMORY + [f"{a}.{f}" for a in ACCESS_SLOTS for f in ACCESS]
GLOBAL = ["num_stores", "num_loops_total", "num_local_allocs", "local_bytes_total", "flops_total",
          "bytes_total", "arg_bytes", "target_lanes", "target_cores"]


def feature_names() -> list[str]:
    """Names of the slots of :func:`extract` vectors, in order."""
    names = [f"store{k}.{s}" for k in range(TOP_STORES) for s in STORE]
    names += [f"sum.{s}" for s in STORE]
    return names + [f"global.{g}" for g in GLOBAL]


NUM_FEATURES = (TOP_STORES + 1) * len(STORE) + len(GLOBAL)
_IDX = {n: i for i, n in enumerate(STORE)}
_GPU_KIND = {"blockIdx.x": "blockIdx_x", "blockIdx.y": "blockIdx_y", "blockIdx.z": "blockIdx_z",
             "threadIdx.x": "threadIdx_x", "threadIdx.y": "threadIdx_y", "threadIdx.z": "threadIdx_z",
             "vthread": "vthread"}


def log_scale(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log2(1 + |x|)``."""
    return np.sign(x) * np.log2(1.0 + np.abs(x))


@dataclass
class _Loop:
    var: Var
    extent: int
    kind: str


@dataclass
class _Access:
    buffer: Buffer
    index: Expr


# --- numeric evaluation of index expressions -----------------------------------------------------
# An index is evaluated once, at 1 + 2L points: all loop variables 0, then each variable at 1 (its
# stride), then each at extent - 1 (does the index depend on it at all, and how far does it move).
Value = "int | np.ndarray"


def _points(loops: list[_Loop]) -> dict[Var, np.ndarray]:
    n = len(loops)
    env: dict[Var, np.ndarray] = {}
    for i, lp in enumerate(loops):
        a = np.zeros(1 + 2 * n, dtype=np.int64)
        a[1 + i] = 1
        a[1 + n + i] = lp.extent - 1
        env[lp.var] = a
    return env


def _const(v: object, c: int) -> bool:
    return isinstance(v, int) and v == c


def _ev(e: Expr, env: dict[Var, np.ndarray], ops: list[int]):  # noqa: ANN202 - int or array
    """Index value at every point; ``ops`` counts [add/sub/mul, floordiv/mod] that survive folding."""
    t = type(e)
    if t is IntImm:
        return e.value
    if t is Var:
        return env.get(e, 0)
    if t is Binary:
        a, b = _ev(e.a, env, ops), _ev(e.b, env, ops)
        op = e.op
        folded = isinstance(a, int) and isinstance(b, int)
        if op == "add":
            if not (folded or _const(a, 0) or _const(b, 0)):
                ops[0] += 1
            return a + b
        if op == "sub":
            if not (folded or _const(b, 0)):
                ops[0] += 1
            return a - b
        if op == "mul":
            if not (folded or _const(a, 1) or _const(b, 1) or _const(a, 0) or _const(b, 0)):
                ops[0] += 1
            return a * b
        if op in ("floordiv", "mod"):
            if _const(b, 0):
                return 0
            if not (folded or _const(b, 1)):
                ops[1] += 1
            return a // b if op == "floordiv" else a % b
        if op == "min":
            return np.minimum(a, b) if not folded else min(a, b)
        if op == "max":
            return np.maximum(a, b) if not folded else max(a, b)
        return 0
    if t is Cast:
        return _ev(e.value, env, ops)
    if t is Select:
        return _ev(e.t, env, ops)
    return 0  # loads (indirect indices) and anything else: unknown, treat as constant


def _dtype_bytes(dtype: str) -> int:
    digits = "".join(ch for ch in dtype if ch.isdigit())
    return max(1, int(digits) // 8) if digits else 4


def _access_features(acc: _Access, loops: list[_Loop], env: dict[Var, np.ndarray], trip: float,
                     vec_pos: int | None, ops: list[int]) -> tuple[list[float], list[float]]:
    """ACCESS slots of one access, and its average stride along each loop."""
    b = _dtype_bytes(acc.buffer.dtype)
    n = len(loops)
    v = _ev(acc.index, env, ops)
    vals = np.full(1 + 2 * n, v, dtype=np.int64) if isinstance(v, int) else v
    base = int(vals[0])
    step = [int(x) - base for x in vals[1:1 + n]]  # stride at the first step of each loop
    far = [int(x) - base for x in vals[1 + n:]]  # displacement over each loop's whole range
    # average stride; nonzero exactly when the index depends on the loop at all
    avg = [abs(f) / (lp.extent - 1) if f else (1.0 if st else 0.0) for f, st, lp in zip(far, step, loops)]
    size = max(1, acc.buffer.size)
    per_line = max(1, CACHE_LINE // b)

    def footprint(level: int) -> tuple[float, float]:
        """(elements, cache lines) touched by the loops from ``level`` inwards."""
        prod, span, smin, smin_ext = 1.0, 0.0, 0.0, 1
        for lp, s in zip(loops[level:], avg[level:]):
            if s:
                prod *= lp.extent
                span += s * (lp.extent - 1)
                if smin == 0 or s < smin:
                    smin, smin_ext = s, lp.extent
        elems = min(prod, span + 1, float(size))
        if smin == 0:
            epl = 1.0
        else:
            epl = float(max(1, min(int(per_line / smin), smin_ext)))
        return elems, math.ceil(elems / epl)

    elems, ulines = footprint(0)
    inner_s = abs(step[-1]) if n else 0
    if n and avg[-1] == 0:
        lines = trip / loops[-1].extent
    elif n and inner_s < per_line:
        lines = trip / max(1, min(per_line // max(1, inner_s), loops[-1].extent))
    else:
        lines = trip
    nonzero = next((abs(s) for s in reversed(step) if s), 0)
    vec_s = abs(step[vec_pos]) if vec_pos is not None else 0
    # reuse: the innermost loop whose variable this access does not use
    reuse, dist_iters, dist_bytes, count = 0.0, 0.0, 0.0, 0.0
    for lvl in range(n - 1, -1, -1):
        if avg[lvl] == 0:
            reuse, count = 1.0, float(loops[lvl].extent)
            dist_iters = float(math.prod(lp.extent for lp in loops[lvl + 1:]))
            dist_bytes = footprint(lvl + 1)[0] * b
            break
    local = 1.0 if acc.buffer.scope in ("local", "shared") else 0.0
    vals = [1.0, local, trip * b, elems * b, lines, ulines, reuse, dist_iters, dist_bytes, count,
            float(inner_s), float(nonzero), float(vec_s), trip / max(1.0, elems), lines / max(1.0, trip),
            elems / size]
    return vals, avg


_FLOAT_SLOT = {"add": 0, "sub": 0, "mul": 1, "div": 2, "max": 3, "min": 3, "pow": 4}


def _scan_value(e: Expr, counts: list[int], loads: list[_Access]) -> None:
    """Count float arithmetic by kind (into ``counts``) and collect the loads of a stored value."""
    t = type(e)
    if t is Load:
        loads.append(_Access(e.buffer, e.index))
        return
    if t is Binary:
        if e.dtype in FLOAT_DTYPES:
            counts[_FLOAT_SLOT.get(e.op, 4)] += 1
    elif t is Call:
        counts[4] += 1
    elif t is Select or t is Not or (t is Compare and e.a.dtype not in INT_DTYPES):
        counts[5] += 1
    for c in children(e):
        _scan_value(c, counts, loads)


class _Extractor:
    def __init__(self, gpu: bool = False, cores: int = 0) -> None:
        self.gpu, self.cores = gpu, cores
        self.stores: list[np.ndarray] = []
        self.num_loops = 0
        self.local_allocs: list[Buffer] = []

    def visit(self, s: Stmt, loops: list[_Loop], allocs: list[Buffer], guards: int) -> None:
        if isinstance(s, For):
            self.num_loops += 1
            if s.extent <= 1:  # the simplifier drops these; they carry no structure
                self.visit(s.body, loops, allocs, guards)
                return
            loops.append(_Loop(s.var, s.extent, s.kind))
            self.visit(s.body, loops, allocs, guards)
            loops.pop()
        elif isinstance(s, Seq):
            for c in s.stmts:
                self.visit(c, loops, allocs, guards)
        elif isinstance(s, IfThen):
            self.visit(s.body, loops, allocs, guards + 1)
        elif isinstance(s, Allocate):
            if s.buffer.scope in ("local", "shared"):
                self.local_allocs.append(s.buffer)
            allocs.append(s.buffer)
            self.visit(s.body, loops, allocs, guards)
            allocs.pop()
        elif isinstance(s, Store):
            self.stores.append(_store_features(s, loops, allocs, guards, self.gpu, self.cores))
        # Barrier and vector statements of optimized IR: nothing to add

    def result(self, func: PrimFunc, target: Target | None) -> np.ndarray:
        raw = np.zeros((max(1, len(self.stores)), len(STORE)))
        if self.stores:
            raw = np.stack(self.stores)
            raw[:, _IDX["flops_fraction"]] = raw[:, _IDX["flops"]] / max(1.0, raw[:, _IDX["flops"]].sum())
            trips = raw[:, _IDX["trip_count"]]
            raw[:, _IDX["trip_fraction"]] = trips / max(1.0, trips.max())
        order = sorted(range(len(self.stores)),
                       key=lambda i: (-raw[i, _IDX["flops"]], -raw[i, _IDX["bytes"]], i))
        top = np.zeros((TOP_STORES, len(STORE)))
        for k, i in enumerate(order[:TOP_STORES]):
            top[k] = raw[i]
        sums = raw.sum(axis=0) if self.stores else np.zeros(len(STORE))
        glob = np.array([
            len(self.stores), self.num_loops, len(self.local_allocs),
            sum(b.size * _dtype_bytes(b.dtype) for b in self.local_allocs),
            sums[_IDX["flops"]], sums[_IDX["bytes"]],
            sum(b.size * _dtype_bytes(b.dtype) for b in func.args),
            target.vector_lanes if target is not None else 0,
            target.cores if target is not None else 0,
        ], dtype=np.float64)
        return log_scale(np.concatenate([top.ravel(), sums, glob]))


def _store_features(s: Store, loops: list[_Loop], allocs: list[Buffer], guards: int, gpu: bool,
                    cores: int) -> np.ndarray:
    f = np.zeros(len(STORE))
    trip = float(math.prod(lp.extent for lp in loops))
    counts = [0] * 6
    reads: list[_Access] = []
    _scan_value(s.value, counts, reads)
    env = _points(loops)
    ops = [0, 0]
    vec_pos = next((i for i in range(len(loops) - 1, -1, -1) if loops[i].kind == "vectorize"), None)
    write, wavg = _access_features(_Access(s.buffer, s.index), loops, env, trip, vec_pos, ops)
    # the read-modify-write of an accumulator is part of the write access; a load whose index
    # node several reads share (an expanded epilogue's) is evaluated once and counted each time
    read_feats = []
    done: dict[tuple[int, int], tuple[list[float], list[int]]] = {}
    for r in reads:
        if r.buffer is s.buffer:
            continue
        key = (id(r.buffer), id(r.index))
        if key not in done:
            before = list(ops)
            vals = _access_features(r, loops, env, trip, vec_pos, ops)[0]
            done[key] = (vals, [a - b for a, b in zip(ops, before)])
        else:
            ops[0] += done[key][1][0]
            ops[1] += done[key][1][1]
        read_feats.append(done[key][0])  # (read only below: duplicates may share the list)
    ia, idm = ops
    per_exec_flops = sum(counts[:5])
    f[0:6] = np.asarray(counts, dtype=np.float64) * trip
    f[_IDX["int_arith"]] = ia * trip
    f[_IDX["int_divmod"]] = idm * trip
    f[_IDX["flops"]] = per_exec_flops * trip

    kinds = [lp.kind for lp in loops]
    inner = loops[-1] if loops else None
    f[_IDX["num_loops"]] = len(loops)
    f[_IDX["trip_count"]] = trip
    f[_IDX["inner_extent"]] = inner.extent if inner else 0
    for k in ("serial", "parallel", "vectorize", "unroll"):
        f[_IDX[f"inner_{k}"]] = float(inner is not None and inner.kind == k)

    def prod_of(kind: str) -> float:
        return float(math.prod(lp.extent for lp in loops if lp.kind == kind))

    f[_IDX["vec_len"]] = prod_of("vectorize") if "vectorize" in kinds else 0
    f[_IDX["vec_loops"]] = kinds.count("vectorize")
    f[_IDX["unroll_product"]] = prod_of("unroll") if "unroll" in kinds else 0
    f[_IDX["unroll_loops"]] = kinds.count("unroll")
    f[_IDX["registers_extent"]] = prod_of("registers") if "registers" in kinds else 0
    par = prod_of("parallel") if "parallel" in kinds else 0
    f[_IDX["parallel_product"]] = par
    f[_IDX["parallel_loops"]] = kinds.count("parallel")
    f[_IDX["serial_product"]] = prod_of("serial")
    f[_IDX["work_per_thread"]] = trip / max(1.0, par)
    f[_IDX["guards"]] = guards
    f[_IDX["is_init"]] = float(not reads and per_exec_flops == 0)
    f[_IDX["is_update"]] = float(any(r.buffer is s.buffer for r in reads))
    for lp in loops:
        slot = _GPU_KIND.get(lp.kind)
        if slot:
            f[_IDX[slot]] = lp.extent
    f[_IDX["shared_bytes"]] = sum(b.size * _dtype_bytes(b.dtype) for b in allocs if b.scope == "shared")
    # local buffers: a stack footprint on the CPU, registers on a GPU
    f[_IDX["local_bytes"]] = sum(b.size * _dtype_bytes(b.dtype) for b in allocs if b.scope == "local")
    if gpu:
        f[_IDX["register_bytes"]] = f[_IDX["local_bytes"]]

    read_feats.sort(key=lambda v: (-v[3], -v[2]))
    # register tile: the innermost loops that move the written element; then the reduction loops
    pos = len(loops) - 1
    reg = red_in = 1.0
    while pos >= 0 and wavg[pos]:
        reg *= loops[pos].extent
        pos -= 1
    while pos >= 0 and not wavg[pos]:
        red_in *= loops[pos].extent
        pos -= 1
    invariant = math.prod(lp.extent for lp, a in zip(loops, wavg) if not a)
    f[_IDX["reg_tile"]] = reg
    f[_IDX["reduce_inner"]] = red_in if invariant > 1 else 0.0
    f[_IDX["reduce_outer"]] = invariant / red_in if invariant > 1 else 0.0
    if par and cores:
        f[_IDX["parallel_imbalance"]] = math.ceil(par / cores) * cores / par - 1.0
    w0 = len(ARITH) + len(LOOPS) + len(TILING) + len(GPU) + len(MEMORY)
    f[w0:w0 + len(ACCESS)] = write
    for k, v in enumerate(read_feats[:READ_SLOTS]):
        f[w0 + (k + 1) * len(ACCESS):w0 + (k + 2) * len(ACCESS)] = v
    all_acc = [write] + read_feats
    total_bytes = sum(v[2] for v in all_acc)
    unique = sum(v[3] for v in all_acc)
    f[_IDX["bytes"]] = total_bytes
    f[_IDX["unique_bytes"]] = unique
    f[_IDX["lines"]] = sum(v[4] for v in all_acc)
    f[_IDX["unique_lines"]] = sum(v[5] for v in all_acc)
    f[_IDX["intensity"]] = f[_IDX["flops"]] / max(1.0, total_bytes)
    f[_IDX["intensity_unique"]] = f[_IDX["flops"]] / max(1.0, unique)
    return f


def features_of_func(func: PrimFunc, target: Target | None = None) -> np.ndarray:
    """The feature vector (length :data:`NUM_FEATURES`) of a lowered kernel."""
    ex = _Extractor(gpu=target is not None and target.kind != "cpu",
                    cores=target.cores if target is not None and target.kind == "cpu" else 0)
    ex.visit(func.body, [], [], 0)
    return ex.result(func, target)


def lower_for_features(workload: Workload, steps: Sequence[Step]) -> PrimFunc:
    """The un-optimized, un-simplified lowering the features read (raises ScheduleError)."""
    return lower(apply_steps(workload.outputs, steps), workload.args, simplify_ir=False)


def extract(workload: Workload, steps: Sequence[Step], target: Target | None = None) -> np.ndarray:
    """Feature vector of one candidate (``steps`` applied to ``workload``); raises ScheduleError."""
    return features_of_func(lower_for_features(workload, steps), target)


def extract_batch(workload: Workload, steps_list: Sequence[Sequence[Step]], target: Target | None = None,
                  on_error: Callable[[int, Exception], None] | None = None) -> np.ndarray:
    """Features of many candidates, one row each; a row is NaN where the schedule is illegal."""
    out = np.full((len(steps_list), NUM_FEATURES), np.nan)
    for i, steps in enumerate(steps_list):
        try:
            out[i] = extract(workload, steps, target)
        except Exception as err:  # noqa: BLE001 - an illegal schedule must not stop the batch
            if on_error is not None:
                on_error(i, err)
    return out


__all__ = ["FEATURE_VERSION", "NUM_FEATURES", "extract", "extract_batch", "feature_names", "features_of_func",
           "log_scale", "lower_for_features"]
