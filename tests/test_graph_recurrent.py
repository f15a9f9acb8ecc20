"""RNN / GRU / LSTM unrolled over their static sequence, checked against a float64 numpy form of
ONNX's equations on fresh random inputs and weights: sequence lengths, initial states in batch-major
layout, clipping, peepholes, linear_before_reset, both directions and a Relu activation."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402

ACT = {"Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0)}


def reference(op: str, x, w, r, b, lens, h0, c0, p, attrs):  # noqa: ANN001, ANN201, PLR0913
    """ONNX's equations, one direction (forward), sequence-major x [seq, batch, in]."""
    hs = attrs["hidden_size"]
    acts = [ACT[a] for a in attrs.get("activations", {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                                                      "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op])]
    clip = attrs.get("clip")

    def pre(v):  # noqa: ANN001, ANN202
        return np.clip(v, -clip, clip) if clip is not None else v

    g = w.shape[0] // hs
    wb, rb = (b[: g * hs], b[g * hs :]) if b is not None else (np.zeros(g * hs), np.zeros(g * hs))
    h, c = h0.copy(), c0.copy()
    ys = []
    for t in range(x.shape[0]):
        gx, gr = x[t] @ w.T + wb, h @ r.T + rb
        blk = [slice(k * hs, (k + 1) * hs) for k in range(g)]
        if op == "RNN":
            nh, nc = acts[0](pre(gx + gr)), c
        elif op == "GRU":
            z, rr = acts[0](pre(gx[:, blk[0]] + gr[:, blk[0]])), acts[0](pre(gx[:, blk[1]] + gr[:, blk[1]]))
            if attrs.get("linear_before_reset"):
                cand = gx[:, blk[2]] + rr * gr[:, blk[2]]
            else:
                cand = gx[:, blk[2]] + (rr * h) @ r[blk[2]].T + rb[blk[2]]
            nh, nc = (1 - z) * acts[1](pre(cand)) + z * h, c
        else:
            pi, po, pf = (p[k * hs : (k + 1) * hs] for k in range(3)) if p is not None else (0, 0, 0)
            i = acts[0](pre(gx[:, blk[0]] + gr[:, blk[0]] + pi * c))
            f = acts[0](pre(gx[:, blk[2]] + gr[:, blk[2]] + pf * c))
            nc = f * c + i * acts[1](pre(gx[:, blk[3]] + gr[:, blk[3]]))
            o = acts[0](pre(gx[:, blk[1]] + gr[:, blk[1]] + po * nc))
            nh = o * acts[2](nc)
        live = (t < lens)[:, None] if lens is not None else np.ones((x.shape[1], 1), bool)
        ys.append(np.where(live, nh, 0))
        h, c = np.where(live, nh, h), np.where(live, nc, c)
    return np.stack(ys), h, c


@pytest.mark.parametrize("op,attrs", [
    ("LSTM", {"hidden_size": 3, "clip": 0.9}),
    ("GRU", {"hidden_size": 4, "linear_before_reset": 1}),
    ("RNN", {"hidden_size": 3, "activations": ["Relu"]}),
], ids=["lstm-lens-peepholes-clip-batch-major", "gru-linear-before-reset", "rnn-relu"])
def test_recurrent_forward(op: str, attrs: dict, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(len(op) + attrs["hidden_size"])
    seq, batch, size, hs = 4, 3, 2, attrs["hidden_size"]
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    x = rng.standard_normal((seq, batch, size)).astype(np.float32)
    w = rng.standard_normal((1, g * hs, size)).astype(np.float32) * 0.7
    r = rng.standard_normal((1, g * hs, hs)).astype(np.float32) * 0.7
    b = rng.standard_normal((1, 2 * g * hs)).astype(np.float32) * 0.3
    feeds = {"X": x, "W": w, "R": r, "B": b}
    lens = h0 = c0 = p = None
    layout = 1 if op == "LSTM" else 0
    if op == "LSTM":  # batch-major, partial lengths, initial states and peepholes
        lens = np.array([4, 2, 3], np.int32)
        h0, c0 = (rng.standard_normal((batch, 1, hs)).astype(np.float32) for _ in range(2))
        p = rng.standard_normal((1, 3 * hs)).astype(np.float32)
        feeds = {"X": x.transpose(1, 0, 2).copy(), "W": w, "R": r, "B": b, "L": lens, "H0": h0, "C0": c0,
                 "P": p}
    names = list(feeds)
    vi = helper.make_tensor_value_info
    kinds = {"L": TensorProto.INT32}
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outs, layout=layout, **attrs)
    ins = [vi(k, kinds.get(k, TensorProto.FLOAT), v.shape) for k, v in feeds.items()]
    ranks = {"Y": 4, "Y_h": 3, "Y_c": 3}
    results = [vi(o, TensorProto.FLOAT, [f"{o}{d}" for d in range(ranks[o])]) for o in outs]
    graph = helper.make_graph([node], "rnn", ins, results)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    got = module.run(feeds)
    f64 = [None if v is None else v.astype(np.float64) for v in (x, w[0], r[0], b[0])]
    hz = np.zeros((batch, hs))
    y, h, c = reference(op, *f64, lens, hz if h0 is None else h0[:, 0].astype(np.float64),
                        hz if c0 is None else c0[:, 0].astype(np.float64), None if p is None else p[0], attrs)
    if layout:
        want = [y.transpose(1, 0, 2)[:, :, None], h[:, None], c[:, None]]
    else:
        want = [y[:, None], h[None], c[None]]
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-5)
