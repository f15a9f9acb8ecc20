"""Integer element types beyond int32/int64 computed by real kernels: 8/16/32/64-bit signed and
unsigned arithmetic that wraps as numpy's does, ONNX's sub-byte int4/uint4/int2/uint2 through Cast,
Pow across integer and float operands, and float Mod with the divisor's sign (fmod=0). Each model is
compiled with gcc and run on fresh random inputs; references are computed independently (Python
integers, float64, ml_dtypes' own conversions)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import helper, numpy_helper  # noqa: E402

from autotune.graph import compile_model, from_onnx  # noqa: E402


def _code(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], consts: dict | None = None):  # noqa: ANN202
    """A one-graph model of ``nodes`` (the constant ``axis1`` = [1] and ``consts`` as initializers),
    its outputs typed by onnx's shape inference."""
    consts = {"axis1": np.array([1], np.int64), **(consts or {})}
    graph = helper.make_graph(
        nodes,
        "ints",
        [helper.make_tensor_value_info(n, _code(str(a.dtype)), a.shape) for n, a in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return onnx.shape_inference.infer_shapes(model)


def _run(nodes: list, inputs: dict, outputs: list[str], tmp_path, model=None) -> list[np.ndarray]:  # noqa: ANN001
    """``nodes`` (or ``model``) compiled for the CPU with no database and run on ``inputs``."""
    model = model or _model(nodes, inputs, outputs)
    module = compile_model(from_onnx(model), db=None, verbose=False, cache_dir=str(tmp_path), workers=1)
    return module.run(inputs)


def _wrap(values: np.ndarray, dtype: str) -> np.ndarray:
    """Python integers (an object array) reduced modulo 2**bits into ``dtype``'s range."""
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    out = [((int(v) - int(info.min)) % span) + int(info.min) for v in values.reshape(-1)]
    return np.array(out, dtype=object).reshape(values.shape)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64", "int8", "int16"])
def test_integer_arithmetic_wraps_like_numpy(dtype: str, tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(sum(map(ord, dtype)))
    info = np.iinfo(dtype)
    shape = (4, 16)
    x = rng.integers(int(info.min), int(info.max), size=shape, dtype=dtype, endpoint=True)
    y = rng.integers(int(info.min), int(info.max), size=shape, dtype=dtype, endpoint=True)
    y[0, :3] = 0  # a zero divisor gives 0 (numpy's value) instead of trapping
    y[1, :2] = x[1, :2]
    nodes = [
        helper.make_node("Add", ["x", "y"], ["add"]),
        helper.make_node("Sub", ["x", "y"], ["sub"]),
        helper.make_node("Mul", ["x", "y"], ["mul"]),
        helper.make_node("Div", ["x", "y"], ["div"]),
        helper.make_node("Mod", ["x", "y"], ["mod"]),
        helper.make_node("Mod", ["x", "y"], ["fmod"], fmod=1),
        helper.make_node("Max", ["x", "y"], ["max"]),
        # a fused chain: each intermediate wraps before the next operation reads it
        helper.make_node("Mul", ["add", "x"], ["addmul"]),
        helper.make_node("Less", ["addmul", "y"], ["less"]),
        helper.make_node("ReduceMax", ["x", "axis1"], ["rmax"], keepdims=0),
        helper.make_node("ReduceSum", ["x", "axis1"], ["rsum"], keepdims=0),
    ]
    outs = ["add", "sub", "mul", "div", "mod", "fmod", "max", "less", "rmax", "rsum"]
    got = dict(zip(outs, _run(nodes, {"x": x, "y": y}, outs, tmp_path)))

    a, b = x.astype(object), y.astype(object)  # exact Python integers
    nz = np.where(b == 0, 1, b)
    trunc = np.array([abs(p) // abs(q) * (1 if (p < 0) == (q < 0) else -1) for p, q in zip(a.flat, nz.flat)],
                     dtype=object).reshape(shape)
    fmod = a - trunc * nz
    floor = np.array([p // q for p, q in zip(a.flat, nz.flat)], dtype=object).reshape(shape)
    want = {
        "add": _wrap(a + b, dtype),
        "sub": _wrap(a - b, dtype),
        "mul": _wrap(a * b, dtype),
        "div": np.where(b == 0, 0, _wrap(trunc, dtype)),
        "mod": np.where(b == 0, 0, a - floor * nz),
        "fmod": np.where(b == 0, 0, fmod),
        "max": np.maximum(a, b),
        "less": _wrap(_wrap(a + b, dtype) * a, dtype) < b,
        "rmax": np.array([max(row) for row in a], dtype=object),
        "rsum": _wrap(np.array([sum(row) for row in a], dtype=object), dtype),
    }
    for name in outs:
        assert got[name].dtype == (np.bool_ if name == "less" else np.dtype(dtype)), name
        np.testing.assert_array_equal(got[name].astype(object), want[name], err_msg=name)


def test_reduce_identities_of_integer_and_bool_types(tmp_path) -> None:  # noqa: ANN001
    """A max over unsigned values starts from 0 (their lowest), not a wrapped negative; a max / min
    over bools is any / all (rows of all False and all True included)."""
    rng = np.random.default_rng(2)
    x = np.zeros((3, 5), np.uint32)
    x[0, 1] = 7
    b = rng.integers(0, 2, size=(6, 5)).astype(bool)
    b[0], b[1] = False, True
    nodes = [
        helper.make_node("ReduceMax", ["x", "axis1"], ["m"], keepdims=0),
        helper.make_node("ReduceMax", ["b", "axis1"], ["any"], keepdims=0),
        helper.make_node("ReduceMin", ["b", "axis1"], ["all"], keepdims=0),
    ]
    m, anyb, allb = _run(nodes, {"x": x, "b": b}, ["m", "any", "all"], tmp_path)
    np.testing.assert_array_equal(m, np.array([7, 0, 0], np.uint32))
    np.testing.assert_array_equal(anyb, b.any(axis=1))
    np.testing.assert_array_equal(allb, b.all(axis=1))


SUB_BYTE = ["int4", "uint4", "int2", "uint2"]


def test_float_to_every_integer_type(tmp_path) -> None:  # noqa: ANN001
    """float32 -> each integer type, truncating toward zero; in range for the 8- to 64-bit types (and
    negative values into unsigned ones, wrapping as numpy does), and for the sub-byte types also out
    of range, where ml_dtypes (and ONNX's test data) give 0."""
    rng = np.random.default_rng(7)
    wide = ["uint8", "uint16", "uint32", "uint64", "int8", "int16"]
    inputs, nodes, outs, want = {}, [], [], {}
    for dt in wide + SUB_BYTE:
        info = ml_dtypes.iinfo(dt) if dt in SUB_BYTE else np.iinfo(dt)
        lo, hi = float(info.min), float(min(int(info.max), 2**24))
        if dt in SUB_BYTE:
            lo, hi = lo - 3, hi + 3
        elif dt.startswith("u"):  # negative values wrap (undefined in ONNX; numpy's and the kernels' rule)
            lo = -1000.0
        x = rng.uniform(lo, hi, size=(40,)).astype(np.float32)
        name = f"x_{dt}"
        inputs[name] = x
        nodes.append(helper.make_node("Cast", [name], [f"c_{dt}"], to=_code(dt)))
        outs.append(f"c_{dt}")
        with np.errstate(invalid="ignore"):
            want[dt] = x.astype(np.dtype(dt))  # ml_dtypes' and numpy's own conversions
    got = dict(zip(outs, _run(nodes, inputs, outs, tmp_path)))
    for dt in wide + SUB_BYTE:
        g = got[f"c_{dt}"]
        assert g.dtype == np.dtype(dt), dt
        np.testing.assert_array_equal(g.astype(np.int64), want[dt].astype(np.int64), err_msg=dt)


@pytest.mark.parametrize("dt", SUB_BYTE)
def test_sub_byte_inputs_and_wrapping_casts(dt: str, tmp_path) -> None:  # noqa: ANN001
    """A sub-byte model input read as its value (float32, int8, int32), and integers cast into the
    type keeping their low bits, then read back."""
    rng = np.random.default_rng(sum(map(ord, dt)))
    info = ml_dtypes.iinfo(dt)
    q = rng.integers(int(info.min), int(info.max), size=(5, 6), endpoint=True).astype(np.dtype(dt))
    n = rng.integers(-300, 300, size=(5, 6)).astype(np.int64)
    nodes = [
        helper.make_node("Cast", ["q"], ["f"], to=_code("float32")),
        helper.make_node("Cast", ["q"], ["i8"], to=_code("int8")),
        helper.make_node("Transpose", ["q"], ["t"], perm=[1, 0]),
        helper.make_node("Cast", ["t"], ["i32"], to=_code("int32")),
        helper.make_node("Cast", ["n"], ["w"], to=_code(dt)),
        helper.make_node("Cast", ["w"], ["back"], to=_code("int64")),
    ]
    outs = ["f", "i8", "i32", "w", "back"]
    got = dict(zip(outs, _run(nodes, {"q": q, "n": n}, outs, tmp_path)))
    value = q.astype(np.int64)
    np.testing.assert_array_equal(got["f"], value.astype(np.float32))
    np.testing.assert_array_equal(got["i8"], value.astype(np.int8))
    np.testing.assert_array_equal(got["i32"], value.T.astype(np.int32))
    bits = 4 if dt.endswith("4") else 2
    low = n & ((1 << bits) - 1)
    wrapped = low - (1 << bits) * (low >= (1 << (bits - 1))) if not dt.startswith("u") else low
    assert got["w"].dtype == np.dtype(dt)
    np.testing.assert_array_equal(got["w"].astype(np.int64), wrapped)
    np.testing.assert_array_equal(got["back"], wrapped)


def test_pow_across_types(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    f = rng.uniform(0.5, 2.0, size=(12,)).astype(np.float32) * rng.choice([-1, 1], size=12).astype(np.float32)
    fe = rng.uniform(-2.0, 3.0, size=(12,)).astype(np.float32)
    i32 = rng.integers(0, 7, size=(12,)).astype(np.int32)  # a negative base to a fractional power is NaN
    e32 = rng.integers(0, 9, size=(12,)).astype(np.int32)
    b64 = rng.integers(-40, 41, size=(12,)).astype(np.int64)
    e64 = rng.integers(-3, 40, size=(12,)).astype(np.int64)
    u64 = rng.integers(0, 7, size=(12,)).astype(np.uint64)
    pos = np.abs(f) + np.float32(0.5)
    nodes = [
        helper.make_node("Pow", ["f", "e32"], ["f_i"]),
        helper.make_node("Pow", ["f", "u64"], ["f_u"]),
        helper.make_node("Pow", ["i32", "pos"], ["i_f"]),
        helper.make_node("Pow", ["b64", "e64"], ["i_i"]),
        helper.make_node("Pow", ["pos", "fe"], ["f_f"]),
    ]
    inputs = {"f": f, "e32": e32, "u64": u64, "i32": i32, "pos": pos, "b64": b64, "e64": e64, "fe": fe}
    outs = ["f_i", "f_u", "i_f", "i_i", "f_f"]
    got = dict(zip(outs, _run(nodes, inputs, outs, tmp_path)))
    f64 = f.astype(np.float64)
    np.testing.assert_allclose(got["f_i"], f64 ** e32, rtol=1e-6)
    np.testing.assert_allclose(got["f_u"], f64 ** u64.astype(np.float64), rtol=1e-6)
    assert got["i_f"].dtype == np.int32
    np.testing.assert_array_equal(got["i_f"], np.trunc(i32.astype(np.float64) ** pos.astype(np.float64)))
    exact = []
    for b, e in zip(b64.tolist(), e64.tolist()):  # wraps modulo 2**64; a negative power truncates
        v = pow(b, e, 2**64) if e >= 0 else (1 if b == 1 else (-1) ** (e & 1) if b == -1 else 0)
        exact.append(v - 2**64 if v >= 2**63 else v)
    assert got["i_i"].dtype == np.int64
    np.testing.assert_array_equal(got["i_i"], np.array(exact, dtype=np.int64))
    np.testing.assert_allclose(got["f_f"], pos.astype(np.float64) ** fe, rtol=1e-5)


def test_float_mod_takes_the_divisor_sign(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(11)
    x = (rng.uniform(-9, 9, size=(32,))).astype(np.float32)
    y = (rng.uniform(0.5, 4, size=(32,)) * rng.choice([-1, 1], size=32)).astype(np.float32)
    edge_x = np.array([0.0, -0.0, -3.0, 3.0, 1.0, np.inf, 1.0, np.nan, 6.0, -6.0], np.float32)
    edge_y = np.array([-2.0, 2.0, np.inf, -np.inf, -np.inf, 2.0, 0.0, 2.0, 3.0, 3.0], np.float32)
    x, y = np.concatenate([x, edge_x]), np.concatenate([y, edge_y])
    (got,) = _run([helper.make_node("Mod", ["x", "y"], ["m"], fmod=0)], {"x": x, "y": y}, ["m"], tmp_path)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.mod(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    same_sign = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[same_sign]), np.signbit(want[same_sign]))


def test_a_sub_byte_output_is_measured_and_checked(tmp_path) -> None:  # noqa: ANN001
    """The measuring worker holds an int4 output as ml_dtypes' int4 (not an opaque void type), so a
    tuned kernel's bytes are checked against the reference: right ones pass, a wrong one fails."""
    from autotune.measure import Builder, BuildOptions, CpuRunner, ErrorKind, RunOptions

    src = """
void neg4(void** args) {
    const unsigned char* a = (const unsigned char*)args[0];
    unsigned char* c = (unsigned char*)args[1];
    for (int i = 0; i < 16; ++i) c[i] = (unsigned char)((0 - (((a[i] & 15) ^ 8) - 8)) & 15);
}
"""
    a = np.arange(-7, 8, dtype=np.int64)
    a = np.append(a, 3).astype(ml_dtypes.int4)
    want = (-a.astype(np.int64)).astype(ml_dtypes.int4)
    with Builder(BuildOptions(cache_dir=str(tmp_path)), workers=1) as b:
        res = b.build("neg4", src)
        assert res.error_kind is None, res.error_msg
        with CpuRunner() as r:
            opts = RunOptions(repeat=2, min_repeat_ms=1.0, timeout_s=20.0)
            r.set_task("ok", [a], [want], [((16,), "int4")])
            ok = r.run(res.lib_path, "neg4", "ok", opts)
            assert ok.error_kind is None, ok.error_msg
            wrong = want.copy()
            wrong[3] = ml_dtypes.int4(0)
            r.set_task("bad", [a], [wrong], [((16,), "int4")])
            bad = r.run(res.lib_path, "neg4", "bad", opts)
            assert bad.error_kind is ErrorKind.WRONG_ANSWER


def test_bitwise_operators(tmp_path) -> None:  # noqa: ANN001
    """BitwiseAnd/Or/Xor/Not and BitShift both ways over signed and unsigned types; shifts by a
    negative amount or by the width or more give the sign fill alone (ONNX's rule)."""
    rng = np.random.default_rng(5)
    inputs, nodes, outs, want = {}, [], [], {}
    for dt in ["uint8", "int8", "int16", "uint32", "int64", "uint64"]:
        info, bits = np.iinfo(dt), 8 * np.dtype(dt).itemsize
        x = rng.integers(int(info.min), int(info.max), size=(24,), dtype=dt, endpoint=True)
        y = rng.integers(int(info.min), int(info.max), size=(24,), dtype=dt, endpoint=True)
        s = rng.integers(max(int(info.min), -3), bits + 3, size=(24,)).astype(dt)
        inputs.update({f"x_{dt}": x, f"y_{dt}": y, f"s_{dt}": s})
        a, b, k = (v.astype(object) for v in (x, y, s))
        for op, fn in (("BitwiseAnd", lambda p, q: p & q), ("BitwiseOr", lambda p, q: p | q),
                       ("BitwiseXor", lambda p, q: p ^ q)):
            nodes.append(helper.make_node(op, [f"x_{dt}", f"y_{dt}"], [f"{op}_{dt}"]))
            want[f"{op}_{dt}"] = _wrap(np.array([fn(p, q) for p, q in zip(a, b)], dtype=object), dt)
        nodes.append(helper.make_node("BitwiseNot", [f"x_{dt}"], [f"not_{dt}"]))
        want[f"not_{dt}"] = _wrap(np.array([~p for p in a], dtype=object), dt)
        nodes.append(helper.make_node("BitShift", [f"x_{dt}", f"s_{dt}"], [f"shl_{dt}"], direction="LEFT"))
        left = [p << q if 0 <= q < bits else 0 for p, q in zip(a, k)]
        want[f"shl_{dt}"] = _wrap(np.array(left, dtype=object), dt)
        nodes.append(helper.make_node("BitShift", [f"x_{dt}", f"s_{dt}"], [f"shr_{dt}"], direction="RIGHT"))
        right = [p >> q if 0 <= q < bits else (-1 if p < 0 else 0) for p, q in zip(a, k)]
        want[f"shr_{dt}"] = np.array(right, dtype=object)
    outs = list(want)
    got = dict(zip(outs, _run(nodes, inputs, outs, tmp_path)))
    for name in outs:
        dt = name.rsplit("_", 1)[1]
        assert got[name].dtype == np.dtype(dt), name
        np.testing.assert_array_equal(got[name].astype(object), want[name], err_msg=name)


def test_sub_byte_values_move_through_data_movement(tmp_path) -> None:  # noqa: ANN001
    """Pad (with a negative pad value), Concat, Gather, Slice, Expand and Flatten copy int4 values
    unchanged, as onnx's reference evaluator computes them."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(9)
    q = rng.integers(-8, 8, size=(4, 6)).astype(ml_dtypes.int4)
    consts = {
        "pads": np.array([0, 1, 0, 2], np.int64), "pv": np.array(-3, np.int8).astype(ml_dtypes.int4),
        "idx": np.array([2, 0, 1], np.int64), "st": np.array([1], np.int64), "en": np.array([5], np.int64),
        "ax": np.array([1], np.int64), "shp": np.array([2, 4, 6], np.int64),
    }
    nodes = [
        helper.make_node("Pad", ["q", "pads", "pv"], ["pad"]),
        helper.make_node("Concat", ["q", "q"], ["cat"], axis=1),
        helper.make_node("Gather", ["q", "idx"], ["g"], axis=0),
        helper.make_node("Slice", ["q", "st", "en", "ax"], ["sl"]),
        helper.make_node("Expand", ["q", "shp"], ["ex"]),
        helper.make_node("Flatten", ["q"], ["fl"]),
    ]
    outs = ["pad", "cat", "g", "sl", "ex", "fl"]
    model = _model(nodes, {"q": q}, outs, consts)
    got = _run(nodes, {"q": q}, outs, tmp_path, model)
    want = ReferenceEvaluator(model).run(None, {"q": q})
    for name, g, w in zip(outs, got, want):
        assert g.dtype == np.dtype(ml_dtypes.int4) and g.shape == w.shape, name
        np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64), err_msg=name)


def test_quantize_and_dequantize_at_run_time(tmp_path) -> None:  # noqa: ANN001
    """QuantizeLinear (round half to even, saturating) and DequantizeLinear with per-tensor, per-axis
    and blocked scales and zero points computed at run time, into and from int8 / uint8 / uint16 /
    int4, against numpy in float32 (ties included: x / scale lands on halves)."""
    rng = np.random.default_rng(13)
    x = (rng.integers(-600, 600, size=(2, 6, 4)) * 0.25).astype(np.float32)
    inputs = {
        "x": x,
        "s_t": np.array(0.5, np.float32), "z_t": np.array(3, np.int8),
        "s_a": rng.uniform(0.2, 2.0, size=(6,)).astype(np.float32),
        "z_a": rng.integers(0, 256, size=(6,)).astype(np.uint8),
        "s_b": rng.uniform(0.5, 4.0, size=(2, 6, 2)).astype(np.float32),
        "z_b": rng.integers(-8, 8, size=(2, 6, 2)).astype(ml_dtypes.int4),
        "s_u": np.array([0.01], np.float32), "z_u": np.array([30000], np.uint16),
    }
    blocked = {"axis": 2, "block_size": 3}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_t", "z_t"], ["q_t"]),
        helper.make_node("QuantizeLinear", ["x", "s_a", "z_a"], ["q_a"], axis=1),
        helper.make_node("QuantizeLinear", ["x", "s_b", "z_b"], ["q_b"], **blocked),
        helper.make_node("QuantizeLinear", ["x", "s_u", "z_u"], ["q_u"]),
        helper.make_node("DequantizeLinear", ["q_t", "s_t", "z_t"], ["d_t"]),
        helper.make_node("DequantizeLinear", ["q_a", "s_a", "z_a"], ["d_a"], axis=1),
        helper.make_node("DequantizeLinear", ["q_b", "s_b", "z_b"], ["d_b"], **blocked),
    ]
    outs = ["q_t", "q_a", "q_b", "q_u", "d_t", "d_a", "d_b"]
    got = dict(zip(outs, _run(nodes, inputs, outs, tmp_path)))
    per = {
        "t": (inputs["s_t"], inputs["z_t"]),
        "a": (inputs["s_a"].reshape(1, 6, 1), inputs["z_a"].reshape(1, 6, 1)),
        "b": (np.repeat(inputs["s_b"], 3, axis=2)[:, :, :4], np.repeat(inputs["z_b"], 3, axis=2)[:, :, :4]),
        "u": (inputs["s_u"], inputs["z_u"]),
    }
    for key, (s, z) in per.items():
        info = ml_dtypes.iinfo(z.dtype)
        q = np.clip(np.rint(x / s) + z.astype(np.float32), int(info.min), int(info.max))
        assert got[f"q_{key}"].dtype == z.dtype, key
        np.testing.assert_array_equal(got[f"q_{key}"].astype(np.int64), q.astype(np.int64), err_msg=key)
        if f"d_{key}" in got:
            d = (q.astype(np.float32) - z.astype(np.float32)) * s
            np.testing.assert_array_equal(got[f"d_{key}"], d.astype(np.float32), err_msg=key)


def test_dynamic_quantize_linear(tmp_path) -> None:  # noqa: ANN001
    """DynamicQuantizeLinear (expanded into its function body: run-time min / max, scale, zero point,
    QuantizeLinear) against ONNX's formula in float32 on fresh random inputs."""
    rng = np.random.default_rng(17)
    x = rng.uniform(-3.0, 5.0, size=(3, 7)).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])]
    y, scale, zp = _run(nodes, {"x": x}, ["y", "scale", "zp"], tmp_path)
    lo, hi = np.float32(min(0.0, x.min())), np.float32(max(0.0, x.max()))
    s = np.float32((hi - lo) / np.float32(255))
    z = np.clip(np.rint((np.float32(0) - lo) / s), 0, 255)
    np.testing.assert_array_equal(scale, s)
    np.testing.assert_array_equal(zp, z.astype(np.uint8))
    np.testing.assert_array_equal(y, np.clip(np.rint(x / s) + z, 0, 255).astype(np.uint8))


def test_integer_matrix_products(tmp_path) -> None:  # noqa: ANN001
    """MatMulInteger and QLinearMatMul (a per-column b scale) on fresh random 8-bit operands: the
    int32 product exact, the requantized result as onnx computes it (the product times the float32
    combined scale in float64, rounded half to even, saturated); a sum too long to be exact in
    float32 is refused by name."""
    from autotune.graph.frontend import UnsupportedModelError
    from autotune.graph.ops.quantize import EXACT_PRODUCT_TERMS

    rng = np.random.default_rng(21)
    k = EXACT_PRODUCT_TERMS
    a = rng.integers(0, 256, size=(3, k)).astype(np.uint8)
    b = rng.integers(-128, 128, size=(k, 5)).astype(np.int8)
    inputs = {
        "a": a, "b": b, "az": np.array(131, np.uint8), "bz": np.array(-7, np.int8),
        "a_s": np.array(0.02, np.float32), "b_s": rng.uniform(0.01, 0.03, size=(5,)).astype(np.float32),
        "y_s": np.array(9.5, np.float32), "y_z": np.array(120, np.uint8),
    }
    nodes = [
        helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["c"]),
        helper.make_node("QLinearMatMul", ["a", "a_s", "az", "b", "b_s", "bz", "y_s", "y_z"], ["q"]),
    ]
    c, q = _run(nodes, inputs, ["c", "q"], tmp_path)
    exact = (a.astype(np.int64) - 131) @ (b.astype(np.int64) + 7)
    assert c.dtype == np.int32
    np.testing.assert_array_equal(c, exact)
    m = inputs["a_s"] * inputs["b_s"] / inputs["y_s"]  # float32, as onnx forms it
    want = np.clip(np.rint(exact * m.astype(np.float64) + 120), 0, 255).astype(np.uint8)
    assert q.dtype == np.uint8
    np.testing.assert_array_equal(q, want)
    # a longer sum, at the largest magnitudes: exact in pieces of at most k terms added in int32
    # (one float32 sum of these 700 terms of 65025 would round: it passes 2**24)
    big = {"a": np.full((2, 700), 255, np.uint8), "b": np.full((700, 3), 255, np.uint8)}
    big["a"][0, :3] = 254  # an odd sum past 2**24: float32 could not hold it
    (c,) = _run([helper.make_node("MatMulInteger", ["a", "b"], ["c"])], big, ["c"], tmp_path)
    np.testing.assert_array_equal(c, big["a"].astype(np.int64) @ big["b"].astype(np.int64))
    assert c[0, 0] > 1 << 24 and c[0, 0] % 2 == 1
    # a product large enough for Strassen's form is not given it: its sums would leave the integers
    from autotune.graph import prepare

    w = rng.integers(-128, 128, size=(256, 768)).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w"], ["c"])],
                   {"a": rng.integers(0, 256, size=(128, 256)).astype(np.uint8)}, ["c"], {"w": w})
    prepared = prepare(model, forms="strassen")
    products = [n for n in prepared.graph.nodes if n.op == "MatMul"]
    assert not prepared.forms and products and all(n.attrs.get("exact") for n in products)
    from autotune.graph.ops.quantize import INT32_PRODUCT_TERMS

    n = INT32_PRODUCT_TERMS + 1
    long = {"a": np.zeros((2, n), np.uint8), "b": np.zeros((n, 2), np.uint8)}
    model = _model([helper.make_node("MatMulInteger", ["a", "b"], ["c"])], long, ["c"])
    with pytest.raises(UnsupportedModelError, match=f"sum of {n} products"):
        from_onnx(model)


@pytest.mark.parametrize(
    "xdt,c,k,attrs",
    [("uint8", 64, 3, dict(pads=[1, 1, 1, 1])),  # 576 terms: three exact pieces of channels
     ("int8", 300, 1, dict(strides=[2, 2])),  # a 1x1 convolution over 300 channels
     ("uint8", 16, 3, dict(group=16, pads=[1, 1, 1, 1])),  # depthwise
     ("uint8", 8, 5, dict(dilations=[2, 1], pads=[2, 0, 2, 0]))],
    ids=["3x3-pieces", "1x1-300", "depthwise", "5x5-dilated"],
)
def test_integer_convolutions_are_exact(xdt: str, c: int, k: int, attrs: dict, tmp_path) -> None:  # noqa: ANN001
    """ConvInteger and QLinearConv (per-channel weight zero points, scales and an int32 bias) match
    onnx's reference evaluator element for element, sums past 2**24 included; the products carry
    ``exact``, so neither Winograd nor Strassen takes them."""
    from onnx.reference import ReferenceEvaluator

    from autotune.graph import prepare

    rng = np.random.default_rng(c + k)
    groups = attrs.get("group", 1)
    m = 8 if groups == 1 else c
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, size=(1, c, 9, 10)).astype(xdt)
    x[0, :, :3] = info.max  # a corner at the largest magnitude
    w = rng.integers(-128, 128, size=(m, c // groups, k, k)).astype(np.int8)
    w[0] = -128
    inputs = {"x": x, "xz": np.array(info.min, xdt), "wz": rng.integers(-2, 3, m).astype(np.int8),
              "xs": np.array(0.05, np.float32), "ws": rng.uniform(0.01, 0.02, m).astype(np.float32),
              "ys": np.array(3.0, np.float32), "yz": np.array(7, np.int8),
              "bias": rng.integers(-5000, 5000, m).astype(np.int32)}
    consts = {n: inputs.pop(n) for n in ("wz", "ws", "ys", "yz", "bias")}
    consts["w"] = w
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["c"], **attrs),
             helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["q"],
                              **attrs)]
    model = _model(nodes, inputs, ["c", "q"], consts)
    got = _run(nodes, inputs, ["c", "q"], tmp_path, model=model)
    want = ReferenceEvaluator(model).run(None, inputs)
    for g, r in zip(got, want):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g, r)
    assert np.abs(got[0]).max() > 1 << 14 or k == 1
    prepared = prepare(model, forms="winograd2")
    products = [n for n in prepared.graph.nodes if n.op == "Conv"]
    assert not prepared.forms and products and all(n.attrs.get("exact") for n in products)


def test_a_qdq_convolution_chain_keeps_nhwc_and_drops_the_round_trip_casts(tmp_path) -> None:  # noqa: ANN001
    """A QDQ model's quantize-dequantize pairs lower to Round, Clip and two Casts that return the
    clipped whole number unchanged: the casts are dropped and the chain stays NHWC (no transposes
    between the convolutions); the outputs are onnx's reference evaluation's, but where the float
    convolution's sum lands on the other side of a rounding tie (one quantization step)."""
    from onnx.reference import ReferenceEvaluator

    from autotune.graph import prepare

    rng = np.random.default_rng(5)
    s = np.array(0.05, np.float32)

    def qdq(x: str, y: str, zp: str) -> list:
        return [helper.make_node("QuantizeLinear", [x, "s", zp], [y + "_q"]),
                helper.make_node("DequantizeLinear", [y + "_q", "s", zp], [y])]

    consts = {"s": s, "zu": np.array(128, np.uint8), "zi": np.array(0, np.int8),
              "w1": rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8),
              "w2": rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8),
              "ws": np.full(8, 0.01, np.float32), "wz": np.zeros(8, np.int8)}
    nodes = [*qdq("x", "xd", "zu"),
             helper.make_node("DequantizeLinear", ["w1", "ws", "wz"], ["w1d"], axis=0),
             helper.make_node("DequantizeLinear", ["w2", "ws", "wz"], ["w2d"], axis=0),
             helper.make_node("Conv", ["xd", "w1d"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]), *qdq("r1", "r1d", "zu"),
             helper.make_node("Conv", ["r1d", "w2d"], ["c2"], pads=[1, 1, 1, 1]), *qdq("c2", "y", "zi")]
    inputs = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32) * 2}
    model = _model(nodes, inputs, ["y"], consts)
    ops = [n.op for n in prepare(model).graph.nodes]
    assert "Cast" not in ops and ops.count("Transpose") <= 2, ops  # into NHWC once, out once
    (got,) = _run(nodes, inputs, ["y"], tmp_path, model=model)
    (want,) = ReferenceEvaluator(model).run(None, inputs)
    steps = np.abs(got.astype(np.float64) - want) / s
    assert steps.max() <= 1.0 + 1e-6 and np.mean(steps > 0.5) < 0.01, steps.max()
