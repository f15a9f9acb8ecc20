"""The built-in named workloads with their numpy references."""

from __future__ import annotations

import numpy as np

from .ops import conv, elementwise, nn, norm, pool
from .registry import register
from .tensor import placeholder
from .workload import Workload


def _np_gelu(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    verf = np.vectorize(erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + verf(x / sqrt(2.0)))


@register("matmul", ["m", "n", "k"], "C[m,n] = A[m,k] @ B[k,n]")
def matmul(m: int, n: int, k: int) -> Workload:
    a = placeholder((m, k), name="A")
    b = placeholder((k, n), name="B")
    return Workload("matmul", [a, b], [nn.matmul(a, b)], lambda a, b: [a @ b], baseline=lambda a, b: [a @ b])


@register("dense", ["m", "n", "k"], "Y[m,n] = X[m,k] @ W[n,k]^T")
def dense(m: int, n: int, k: int) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    fn = lambda x, w: [x @ w.T]  # noqa: E731
    return Workload("dense", [x, w], [nn.dense(x, w)], fn, baseline=fn)


@register("dense_bias", ["m", "n", "k"], "X @ W^T + bias, fused")
def dense_bias(m: int, n: int, k: int) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    bias = placeholder((n,), name="bias")
    out = nn.dense_epilogue(x, w, bias, None)
    fn = lambda x, w, b: [x @ w.T + b]  # noqa: E731
    return Workload("dense_bias", [x, w, bias], [out], fn, baseline=fn)


def _dense_act(m: int, n: int, k: int, act: str, name: str) -> Workload:
    x = placeholder((m, k), name="X")
    w = placeholder((n, k), name="W")
    bias = placeholder((n,), name="bias")
    out = nn.dense_epilogue(x, w, bias, act)

    def ref(x, w, b):  # noqa: ANN001, ANN202
        y = x @ w.T + b
        return [np.maximum(y, 0.0) if act == "relu" else _np_gelu(y)]

    fast = (lambda x, w, b: [np.maximum(x @ w.T + b, 0)]) if act == "relu" else None
    return Workload(name, [x, w, bias], [out], ref, baseline=fast)


@register("dense_bias_relu", ["m", "n", "k"], "relu(X @ W^T + bias), fused")
def dense_bias_relu(m: int, n: int, k: int) -> Workload:
    return _dense_act(m, n, k, "relu", "dense_bias_relu")


@register("dense_bias_gelu", ["m", "n", "k"], "gelu(X @ W^T + bias), fused")
def dense_bias_gelu(m: int, n: int, k: int) -> Workload:
    return _dense_act(m, n, k, "gelu", "dense_bias_gelu")


@register("batch_matmul", ["b", "m", "n", "k"], "C[b] = A[b] @ B[b]")
def batch_matmul(b: int, m: int, n: int, k: int) -> Workload:
    x = placeholder((b, m, k), name="A")
    y = placeholder((b, k, n), name="B")
    fn = lambda x, y: [x @ y]  # noqa: E731
    return Workload("batch_matmul", [x, y], [nn.batch_matmul(x, y)], fn, baseline=fn)


def np_conv2d_nchw(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1):
    """Direct float64 reference convolution through im2col-style strided views."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, f, oh, ow), dtype=np.float64)
    fpg = f // groups
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        ws = w[g * fpg : (g + 1) * fpg]
        for r in range(kh):
            for s in range(kw):
                ys, xs0 = r * dilation, s * dilation
                rows = slice(ys, ys + stride * (oh - 1) + 1, stride)
                patch = xs[:, :, rows, xs0 : xs0 + stride * (ow - 1) + 1 : stride]
                out[:, g * fpg : (g + 1) * fpg] += np.einsum("nchw,fc->nfhw", patch, ws[:, :, r, s])
    return out


def _im2col_windows(xp: np.ndarray, axes: tuple[int, int], kh: int, kw: int, stride: int, dilation: int):
    """Strided (kh, kw) windows of ``xp`` over ``axes``, appended as the last two dims (a view)."""
    span = (dilation * (kh - 1) + 1, dilation * (kw - 1) + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=axes)
    sl = [slice(None)] * win.ndim
    sl[axes[0]] = sl[axes[1]] = slice(None, None, stride)
    sl[-2] = sl[-1] = slice(None, None, dilation)
    return win[tuple(sl)]


def im2col_conv2d_nchw(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1
) -> np.ndarray:
    """Fast NCHW conv in the input dtype: im2col (one copy) then one (batched) matmul."""
    n = x.shape[0]
    f, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x
    win = _im2col_windows(xp, (2, 3), kh, kw, stride, dilation)  # n, c, oh, ow, kh, kw
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, cg * kh * kw, oh * ow)
    wmat = w.reshape(groups, f // groups, cg * kh * kw)
    return np.matmul(wmat, cols).reshape(n, f, oh, ow)


def im2col_conv2d_nhwc(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1
) -> np.ndarray:
    """Fast NHWC / HWIO conv in the input dtype: im2col (one copy) then one (batched) matmul."""
    n = x.shape[0]
    kh, kw, cg, f = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    win = _im2col_windows(xp, (1, 2), kh, kw, stride, dilation)  # n, oh, ow, c, kh, kw
    oh, ow = win.shape[1], win.shape[2]
    if groups == 1:
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(n * oh * ow, kh * kw * cg)
        return (cols @ w.reshape(kh * kw * cg, f)).reshape(n, oh, ow, f)
    fpg = f // groups
    cols = win.reshape(n * oh * ow, groups, cg, kh, kw).transpose(1, 0, 3, 4, 2)
    cols = cols.reshape(groups, -1, kh * kw * cg)
    wmat = w.reshape(kh, kw, cg, groups, fpg).transpose(3, 0, 1, 2, 4).reshape(groups, kh * kw * cg, fpg)
    return np.matmul(cols, wmat).transpose(1, 0, 2).reshape(n, oh, ow, f)


@register(
    "conv2d",
    ["n", "c", "h", "w", "f", "kh", "kw", "stride", "pad"],
    "NCHW conv2d (+ optional dilation, groups)",
    optional={"dilation": 1, "groups": 1},
)
def conv2d(n, c, h, w, f, kh, kw, stride, pad, dilation=1, groups=1) -> Workload:  # noqa: ANN001
    if c % groups:
        raise ValueError(f"channels {c} not divisible by groups {groups}")
    data = placeholder((n, c, h, w), name="data")
    weight = placeholder((f, c // groups, kh, kw), name="weight")
    out = conv.conv2d_nchw(data, weight, stride, pad, dilation, groups)
    return Workload(
        "conv2d",
        [data, weight],
        [out],
        lambda x, wt: [np_conv2d_nchw(x, wt, stride, pad, dilation, groups)],
        baseline=lambda x, wt: [im2col_conv2d_nchw(x, wt, stride, pad, dilation, groups)],
    )


@register("relu", ["n"], "relu over a vector")
def relu(n: int) -> Workload:
    x = placeholder((n,), name="x")
    fn = lambda x: [np.maximum(x, 0)]  # noqa: E731
    return Workload("relu", [x], [elementwise.relu(x)], fn, baseline=fn)


def np_conv2d_nhwc(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1):
    """Float64 NHWC / HWIO reference convolution: one einsum per kernel tap and group."""
    n, h, wd, c = x.shape
    kh, kw, cg, f = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, oh, ow, f), dtype=np.float64)
    fpg = f // groups
    for g in range(groups):
        for r in range(kh):
            for s in range(kw):
                y0, x0 = r * dilation, s * dilation
                rows = slice(y0, y0 + stride * (oh - 1) + 1, stride)
                cols = slice(x0, x0 + stride * (ow - 1) + 1, stride)
                patch = xp[:, rows, cols, g * cg : (g + 1) * cg]
                wg = w[r, s, :, g * fpg : (g + 1) * fpg]
                out[..., g * fpg : (g + 1) * fpg] += np.einsum("nyxc,cf->nyxf", patch, wg)
    return out


@register(
    "conv2d_nhwc",
    ["n", "h", "w", "c", "f", "kh", "kw", "stride", "pad"],
    "NHWC conv2d, HWIO weights (+ optional dilation, groups)",
    optional={"dilation": 1, "groups": 1},
)
def conv2d_nhwc(n, h, w, c, f, kh, kw, stride, pad, dilation=1, groups=1) -> Workload:  # noqa: ANN001
    if c % groups:
        raise ValueError(f"channels {c} not divisible by groups {groups}")
    data = placeholder((n, h, w, c), name="data")
    weight = placeholder((kh, kw, c // groups, f), name="weight")
    out = conv.conv2d_nhwc(data, weight, stride, pad, dilation, groups)
    return Workload(
        "conv2d_nhwc",
        [data, weight],
        [out],
        lambda x, wt: [np_conv2d_nhwc(x, wt, stride, pad, dilation, groups)],
        baseline=lambda x, wt: [im2col_conv2d_nhwc(x, wt, stride, pad, dilation, groups)],
    )


def _windows(xp: np.ndarray, kh: int, kw: int, stride: int, oh: int, ow: int, dilation: int = 1):
    """Yield ``(r, s, view)``: the strided NCHW view of ``xp`` under kernel tap ``(r, s)``."""
    for r in range(kh):
        for s in range(kw):
            y0, x0 = r * dilation, s * dilation
            rows = slice(y0, y0 + stride * (oh - 1) + 1, stride)
            yield r, s, xp[:, :, rows, x0 : x0 + stride * (ow - 1) + 1 : stride]


@register(
    "depthwise_conv2d",
    ["n", "c", "h", "w", "kh", "kw", "stride", "pad"],
    "depthwise NCHW conv2d, weights [c,1,kh,kw]",
)
def depthwise_conv2d(n, c, h, w, kh, kw, stride, pad) -> Workload:  # noqa: ANN001
    data = placeholder((n, c, h, w), name="data")
    weight = placeholder((c, 1, kh, kw), name="weight")
    out = conv.depthwise_conv2d_nchw(data, weight, stride, pad)
    oh, ow = out.shape[2], out.shape[3]

    def ref(x, wt):  # noqa: ANN001, ANN202
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        acc = np.zeros((n, c, oh, ow))
        for r, s, view in _windows(xp, kh, kw, stride, oh, ow):
            acc += view * wt[:, 0, r, s][None, :, None, None]
        return [acc]

    return Workload("depthwise_conv2d", [data, weight], [out], ref)


def _pool_shape(h: int, w: int, k: int, stride: int, pad: int) -> tuple[int, int]:
    return (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1


@register("max_pool2d", ["n", "c", "h", "w", "k", "stride", "pad"], "NCHW max pool, k x k window")
def max_pool2d(n, c, h, w, k, stride, pad) -> Workload:  # noqa: ANN001
    data = placeholder((n, c, h, w), name="data")
    out = pool.max_pool2d_nchw(data, k, stride, pad)

    def ref(x):  # noqa: ANN001, ANN202
        oh, ow = _pool_shape(h, w, k, stride, pad)
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
        acc = np.full((n, c, oh, ow), -np.inf)
        for _, _, view in _windows(xp, k, k, stride, oh, ow):
            acc = np.maximum(acc, view)
        return [acc]

    return Workload("max_pool2d", [data], [out], ref)


@register(
    "avg_pool2d",
    ["n", "c", "h", "w", "k", "stride", "pad"],
    "NCHW average pool, k x k window; padding excluded from the count (ONNX count_include_pad=0)",
)
def avg_pool2d(n, c, h, w, k, stride, pad) -> Workload:  # noqa: ANN001
    data = placeholder((n, c, h, w), name="data")
    out = pool.avg_pool2d_nchw(data, k, stride, pad)

    def ref(x):  # noqa: ANN001, ANN202
        oh, ow = _pool_shape(h, w, k, stride, pad)
        widths = ((0, 0), (0, 0), (pad, pad), (pad, pad))
        xp = np.pad(x, widths)
        ones = np.pad(np.ones_like(x), widths)
        total = np.zeros((n, c, oh, ow))
        count = np.zeros((n, c, oh, ow))
        taps = zip(_windows(xp, k, k, stride, oh, ow), _windows(ones, k, k, stride, oh, ow))
        for (_, _, view), (_, _, mask) in taps:
            total += view
            count += mask
        return [total / count]

    return Workload("avg_pool2d", [data], [out], ref)


@register("global_avg_pool2d", ["n", "c", "h", "w"], "NCHW global average pool -> [n,c,1,1]")
def global_avg_pool2d(n: int, c: int, h: int, w: int) -> Workload:
    data = placeholder((n, c, h, w), name="data")
    out = pool.global_avg_pool2d_nchw(data)
    return Workload("global_avg_pool2d", [data], [out], lambda x: [x.mean(axis=(2, 3), keepdims=True)])


@register("softmax", ["rows", "cols"], "softmax over the last axis")
def softmax(rows: int, cols: int) -> Workload:
    x = placeholder((rows, cols), name="x")

    def ref(x):  # noqa: ANN001, ANN202
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]

    return Workload("softmax", [x], [norm.softmax(x)], ref)


@register("layernorm", ["rows", "cols"], "layer norm over the last axis with gamma, beta; eps=1e-5")
def layernorm(rows: int, cols: int) -> Workload:
    x = placeholder((rows, cols), name="x")
    gamma = placeholder((cols,), name="gamma")
    beta = placeholder((cols,), name="beta")

    def ref(x, g, b):  # noqa: ANN001, ANN202
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return [(x - mu) / np.sqrt(var + 1e-5) * g + b]

    return Workload("layernorm", [x, gamma, beta], [norm.layernorm(x, gamma, beta, 1e-5)], ref)


@register("add", ["n"], "a + b over vectors")
def add(n: int) -> Workload:
    a, b = placeholder((n,), name="a"), placeholder((n,), name="b")
    fn = lambda a, b: [a + b]  # noqa: E731
    return Workload("add", [a, b], [elementwise.add(a, b)], fn, baseline=fn)


@register("mul", ["n"], "a * b over vectors")
def mul(n: int) -> Workload:
    a, b = placeholder((n,), name="a"), placeholder((n,), name="b")
    fn = lambda a, b: [a * b]  # noqa: E731
    return Workload("mul", [a, b], [elementwise.mul(a, b)], fn, baseline=fn)


@register("gelu", ["n"], "exact (erf) gelu over a vector")
def gelu(n: int) -> Workload:
    x = placeholder((n,), name="x")
    return Workload("gelu", [x], [elementwise.gelu(x)], lambda x: [_np_gelu(x)])


@register("bias_add_relu", ["m", "n"], "relu(x + bias[n]), fused")
def bias_add_relu(m: int, n: int) -> Workload:
    x = placeholder((m, n), name="x")
    bias = placeholder((n,), name="bias")
    out = elementwise.bias_add_relu(x, bias)
    fn = lambda x, b: [np.maximum(x + b, 0)]  # noqa: E731
    return Workload("bias_add_relu", [x, bias], [out], fn, baseline=fn)


@register("add_relu_mul", ["m", "n"], "relu(a + b) * c, one fused elementwise chain")
def add_relu_mul(m: int, n: int) -> Workload:
    a, b, c = (placeholder((m, n), name=nm) for nm in "abc")
    out = elementwise.add_relu_mul(a, b, c)
    fn = lambda a, b, c: [np.maximum(a + b, 0) * c]  # noqa: E731
    return Workload("add_relu_mul", [a, b, c], [out], fn, baseline=fn)
