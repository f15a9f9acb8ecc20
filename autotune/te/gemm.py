"""Matrix products in a chosen precision: float32, TF32, float16 or bfloat16 inputs with float32
accumulation and a float32 output (``gemm`` workloads).

``precision`` picks the inputs' storage dtype (fp16/bf16) or how float32 inputs may be rounded
by tensor cores (tf32, a mode recorded in ``Workload.precision``). The reference is float64 on
the inputs as stored (16-bit inputs are generated already rounded to their dtype).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .registry import WorkloadError, register_description
from .tensor import cast, compute, placeholder, reduce_axis
from .tensor import sum as te_sum
from .workload import Workload

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
STORAGE_DTYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# kind -> names of its dims, and how A and B are indexed
GEMM_KINDS = {
    "matmul": ("m", "n", "k"),  # C[m,n] = A[m,k] @ B[k,n]
    "dense": ("m", "n", "k"),  # Y[m,n] = X[m,k] @ W[n,k]^T
    "batch_matmul": ("b", "m", "n", "k"),  # C[b,m,n] = A[b,m,k] @ B[b,k,n]
    # NCHW input, OIHW weight: a product over (c, kh, kw) of gathered windows (implicit GEMM)
    "conv2d": ("n", "c", "h", "w", "f", "kh", "kw", "stride", "pad"),
}


def _f32(x):  # noqa: ANN001, ANN202
    return cast("float32", x)


def gemm_workload(kind: str, dims: Sequence[int], precision: str = "fp32") -> Workload:
    """A ``kind`` product (see GEMM_KINDS) with the given dims in ``precision``."""
    if kind not in GEMM_KINDS:
        raise WorkloadError(f"no {precision} form of {kind!r}; matrix products: {', '.join(GEMM_KINDS)}")
    if precision not in PRECISIONS:
        raise WorkloadError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    names = GEMM_KINDS[kind]
    if len(dims) != len(names) or any(int(d) <= 0 for d in dims):
        raise WorkloadError(f"{kind} takes {len(names)} positive dims ({','.join(names)}), got {list(dims)}")
    d = dict(zip(names, (int(x) for x in dims)))
    dt = STORAGE_DTYPE[precision]
    if kind == "conv2d":
        return _conv2d(d, precision)
    r = reduce_axis(d["k"], "k")
    m, n, k = d["m"], d["n"], d["k"]
    if kind == "batch_matmul":
        bsz = d["b"]
        a, b = placeholder((bsz, m, k), dt, "A"), placeholder((bsz, k, n), dt, "B")
        out = compute((bsz, m, n), lambda z, i, j: te_sum(_f32(a[z, i, r]) * _f32(b[z, r, j]), axis=r),
                      name="gemm", tag="gemm")
        fn = lambda x, y: [np.matmul(x, y)]  # noqa: E731
    elif kind == "dense":
        a, b = placeholder((m, k), dt, "X"), placeholder((n, k), dt, "W")
        out = compute((m, n), lambda i, j: te_sum(_f32(a[i, r]) * _f32(b[j, r]), axis=r),
                      name="gemm", tag="gemm")
        fn = lambda x, w: [x @ w.T]  # noqa: E731
    else:
        a, b = placeholder((m, k), dt, "A"), placeholder((k, n), dt, "B")
        out = compute((m, n), lambda i, j: te_sum(_f32(a[i, r]) * _f32(b[r, j]), axis=r),
                      name="gemm", tag="gemm")
        fn = lambda x, y: [x @ y]  # noqa: E731
    wl = Workload("gemm", [a, b], [out], fn, precision="tf32" if precision == "tf32" else "fp32")
    wl.params = {"kind": kind, "dims": [int(x) for x in dims], "precision": precision}
    return wl


def _conv2d(d: dict, precision: str) -> Workload:
    from .ops.conv import conv2d_nchw

    dt = STORAGE_DTYPE[precision]
    x = placeholder((d["n"], d["c"], d["h"], d["w"]), dt, "data")
    w = placeholder((d["f"], d["c"], d["kh"], d["kw"]), dt, "weight")
    xf, wf = x, w
    if dt != "float32":  # computed on as float32
        xf = compute(x.shape, lambda a, b, c, e: _f32(x[a, b, c, e]), name="data_f32")
        wf = compute(w.shape, lambda a, b, c, e: _f32(w[a, b, c, e]), name="weight_f32")
    out = conv2d_nchw(xf, wf, d["stride"], d["pad"])
    s, p = d["stride"], d["pad"]

    def ref(data: np.ndarray, weight: np.ndarray) -> list[np.ndarray]:
        xp = np.pad(data, ((0, 0), (0, 0), (p, p), (p, p)))
        oh, ow = out.shape[2], out.shape[3]
        res = np.zeros(out.shape)
        for ky in range(weight.shape[2]):
            for kx in range(weight.shape[3]):
                win = xp[:, :, ky: ky + s * (oh - 1) + 1: s, kx: kx + s * (ow - 1) + 1: s]
                res += np.einsum("nchw,fc->nfhw", win, weight[:, :, ky, kx])
        return [res]

    wl = Workload("gemm", [x, w], [out], ref, precision="tf32" if precision == "tf32" else "fp32")
    wl.params = {"kind": "conv2d", "dims": [d[k] for k in GEMM_KINDS["conv2d"]], "precision": precision}
    return wl


def _from_description(desc: dict) -> Workload:
    p = desc["params"]
    return gemm_workload(p["kind"], p["dims"], p["precision"])


register_description("gemm", _from_description)
