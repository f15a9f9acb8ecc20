"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss compiled (lowered to their operators) and
checked against a plain float64 loop over the targets on fresh random scores, targets and weights,
with ignored targets and every reduction."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402


def reference(scores: np.ndarray, target: np.ndarray, weight: np.ndarray | None, reduction: str,
              ii: int | None, softmax: bool) -> tuple[np.ndarray, np.ndarray]:
    x = scores.astype(np.float64)
    if softmax:
        x = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    loss = np.zeros(target.shape)
    counted = np.zeros(target.shape)
    for pos in np.ndindex(*target.shape):
        c = int(target[pos])
        if c == ii:
            continue
        w = 1.0 if weight is None else float(weight[c])
        loss[pos] = -x[(pos[0], c, *pos[1:])] * w
        counted[pos] = w
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / counted.sum()
    return np.asarray(loss), x


@pytest.mark.parametrize(
    "op,reduction,weighted,ii",
    [("NegativeLogLikelihoodLoss", "mean", True, 1), ("NegativeLogLikelihoodLoss", "none", False, -1),
     ("SoftmaxCrossEntropyLoss", "sum", True, None), ("SoftmaxCrossEntropyLoss", "mean", False, 2)],
)
def test_losses(op: str, reduction: str, weighted: bool, ii: int | None, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(len(op) + len(reduction) + (ii or 0))
    n, c, d = 3, 5, 4
    scores = rng.standard_normal((n, c, d)).astype(np.float32)
    target = rng.integers(0, c, (n, d)).astype(np.int64)
    if ii is not None:
        target[0, :2] = ii  # some targets ignored (-1 lies outside the classes)
    weight = rng.uniform(0.5, 2.0, c).astype(np.float32) if weighted else None
    softmax = op == "SoftmaxCrossEntropyLoss"
    attrs = {"reduction": reduction, **({"ignore_index": ii} if ii is not None else {})}
    outs = ["loss", "log_prob"] if softmax else ["loss"]
    node = helper.make_node(op, ["x", "t", "w"] if weighted else ["x", "t"], outs, **attrs)
    loss_shape = [n, d] if reduction == "none" else []
    g = helper.make_graph(
        [node], "loss",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, scores.shape),
         helper.make_tensor_value_info("t", TensorProto.INT64, target.shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, loss_shape)]
        + ([helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, scores.shape)] if softmax else []),
        initializer=[numpy_helper.from_array(weight, "w")] if weighted else [],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    module = compile_model(from_onnx(m), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    got = module.run({"x": scores, "t": target})
    want, log_prob = reference(scores, target, weight, reduction, ii, softmax)
    assert got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    if softmax:
        np.testing.assert_allclose(got[1], log_prob, rtol=1e-5, atol=1e-6)
