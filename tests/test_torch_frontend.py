"""PyTorch in (autotune.torch): torch.compile(backend="autotune"), the torch.export frontend, eager
fallback for unsupported operators, tensors at the boundary without copies, tuning from a torch
module that the ONNX path of the same model then uses. Skipped where torch is not installed."""

from __future__ import annotations

import importlib.util
import io
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import autotune.torch as at  # noqa: E402
from autotune.graph import compile_model  # noqa: E402
from records import TuningDatabase  # noqa: E402


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.b2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.hardswish(self.b2(self.c2(x))) + F.avg_pool2d(x, 2)
        return F.log_softmax(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), -1)


class VideoNet(torch.nn.Module):
    """3-d convolutions and pools (NCDHW), as video models have them."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv3d(3, 8, 3, stride=(1, 2, 2), padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm3d(8)
        self.c2 = torch.nn.Conv3d(8, 8, (3, 1, 1), padding=(1, 0, 0), groups=4)

    def forward(self, x):
        x = F.max_pool3d(F.relu(self.b1(self.c1(x))), 2)
        return F.avg_pool3d(F.relu(self.c2(x)), (1, 2, 2)).flatten(1)


class Resample(torch.nn.Module):
    """Group norms and 2-d resampling as segmentation heads have them: bilinear by a scale factor
    and to a size with aligned corners, nearest by a factor and to a size."""

    def __init__(self) -> None:
        super().__init__()
        self.gn, self.gn1 = torch.nn.GroupNorm(2, 6), torch.nn.GroupNorm(1, 6, affine=False)

    def forward(self, x):
        parts = [F.interpolate(self.gn(x), scale_factor=1.5, mode="bilinear", align_corners=False),
                 F.interpolate(self.gn1(x), size=(13, 7), mode="bilinear", align_corners=True),
                 F.interpolate(x, scale_factor=2.0, mode="nearest"), F.interpolate(x, size=(5, 11))]
        return torch.cat([p.flatten(1) for p in parts], 1)


class Block(torch.nn.Module):
    """A transformer layer: layer norm, multi-head attention, GELU feed-forward."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, -1))
        a = ((q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5).softmax(-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


class Embed(torch.nn.Module):
    """Token ids and a padding mask: an embedding lookup, SiLU, a masked mean."""

    def __init__(self) -> None:
        super().__init__()
        self.e, self.lin = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 16)

    def forward(self, ids, mask):
        h = F.silu(self.lin(self.e(ids)))
        h = torch.where((mask > 0).unsqueeze(-1), h, torch.zeros_like(h))
        return h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


class WithBreak(torch.nn.Module):
    """A graph break (a print) and an operator the compiler lacks (Bessel J0)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x).relu()
        print("graph break")
        return torch.special.bessel_j0(self.lin(y)) + y * 2.0


class Gathers(torch.nn.Module):
    """A constant mask built by writes into a new tensor, a table indexed by a constant buffer (both
    folded at import), select and as_strided on an input, torch.gather by a run-time index and by an
    index smaller than the input on another axis."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(9, 4))
        self.register_buffer("pos", torch.arange(9).reshape(3, 3))
        self.register_buffer("rows", torch.tensor([[[2, 0, 1], [1, 1, 0]]] * 2))  # (2, 2, 3) into (2, 3, 4)

    def forward(self, x):
        mask = torch.zeros(3, 3)
        mask[:, 2:] = -1.0
        y = (x + self.table[self.pos].sum(1)).transpose(1, 2) @ mask
        picked = torch.gather(x, 2, x.argmax(2, keepdim=True)).transpose(1, 2)  # (2, 1, 3)
        cut = torch.gather(x, 1, self.rows).sum((1, 2)).view(2, 1, 1)
        return y + x[:, 0].unsqueeze(-1) + x.as_strided((2, 4, 1), (12, 1, 1)) + picked * cut


class Edges(torch.nn.Module):
    """Convolutions padded "valid" and "same" (ATen then writes one padding for every spatial dim),
    a rotary split whose pass-through half is empty (Phi-3 rotates every channel), slice writes
    (Funnel's pooling) and repeat (SwiftFormer's positional tiling)."""

    def __init__(self) -> None:
        super().__init__()
        self.valid = torch.nn.Conv2d(3, 8, 3, padding="valid")
        self.same = torch.nn.Conv2d(8, 8, 4, padding="same", bias=False)

    def forward(self, x):
        y = self.same(self.valid(x))
        rot = y.shape[-1]
        y = torch.cat([y[..., :rot].sin(), y[..., rot:] * 2.0], -1)
        y = torch.slice_scatter(y, y[:, :2].cos(), 1, 3, 5)
        y = torch.slice_scatter(y, y[..., ::3] * 0.5, -1, 0, None, 3)
        return y.repeat(2, 1, 1, 2, 1)


def _inputs(name: str):
    g = torch.Generator().manual_seed(1)
    if name == "embed":
        mask = torch.ones(2, 7, dtype=torch.int64)
        mask[0, 4:] = 0
        return (torch.randint(0, 50, (2, 7), generator=g), mask)
    shapes = {"convnet": (2, 3, 16, 16), "edges": (2, 3, 12, 11), "gathers": (2, 3, 4),
              "video": (1, 3, 4, 12, 12), "resample": (1, 6, 9, 10)}
    shape = shapes.get(name, (2, 8, 32))
    return (torch.randn(*shape, generator=g),)


def _close(got, want) -> None:
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name,cls",
    [("convnet", ConvNet), ("block", Block), ("embed", Embed), ("gathers", Gathers), ("video", VideoNet),
     ("resample", Resample), ("edges", Edges)],
)
def test_torch_compile_backend_matches_eager(name, cls, caplog):
    torch.manual_seed(0)
    model = cls().eval()
    args = _inputs(name)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        got = torch.compile(model, backend="autotune")(*args)
        want = model(*args)
    _close(got, want)
    assert any("nothing runs eagerly" in r.getMessage() for r in caplog.records), caplog.text


def test_hugging_face_bert_with_a_padding_mask(caplog):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    from bench.gallery.models import import_transformers

    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, vocab_size=60)
    bert = transformers.BertModel(config).eval()
    ids = torch.randint(0, 60, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 5:] = 0

    def encode(i, m):
        return bert(input_ids=i, attention_mask=m).last_hidden_state

    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        got = torch.compile(encode, backend="autotune")(ids, mask)
        want = encode(ids, mask)
    _close(got, want)
    assert any("nothing runs eagerly" in r.getMessage() for r in caplog.records), caplog.text


def test_graph_break_and_unsupported_op_fall_back_alone(caplog):
    torch.manual_seed(0)
    model = WithBreak().eval()
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        got = torch.compile(model, backend="autotune")(x)
        want = model(x)
    _close(got, want)
    lines = [r.getMessage() for r in caplog.records if "compiled region" in r.getMessage()]
    assert len(lines) == 2, lines  # one graph before the break, one after
    eager = [ln for ln in lines if "eager PyTorch for" in ln]
    assert len(eager) == 1 and eager[0].endswith("eager PyTorch for 1 op(s): aten.special_bessel_j0.default")


class BrokenLayers(torch.nn.Module):
    """Layers of one class with a graph break inside each (X-MOD's language adapters read a tensor
    as a Python number): Dynamo runs each piece's graph for every layer, with that layer's weights."""

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x).relu()
            torch._dynamo.graph_break()
            return self.b(y) + x

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(self.Layer() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_graph_run_for_several_modules_uses_each_ones_weights(caplog):
    torch.manual_seed(0)
    model = BrokenLayers().eval()
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="autotune")
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        _close(fast(x), model(x))
        _close(fast(x * 2), model(x * 2))  # each layer's modules kept: nothing compiled again
        compiled = [r for r in caplog.records if "another module's weights" in r.getMessage()]
        assert len(compiled) == 4, caplog.text  # two pieces, each for the second and third layer
        model.layers[1].b.weight.mul_(-1.0)  # weights changed in place: compiled again
        _close(fast(x), model(x))
    assert sum("another module's weights" in r.getMessage() for r in caplog.records) == 5


def test_tensors_cross_without_copies():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
    x = torch.randn(8, 16)
    compiled = at.compile(model, (x,))
    (region,) = compiled.regions
    seen: list[list[int]] = []
    real_run = region.executable.run_pointers

    def spy(pointers):  # the addresses the compiled entry point is called with
        seen.append(list(pointers))
        real_run(pointers)

    region.executable.run_pointers = spy
    out = compiled(x)
    assert seen[-1] == [x.data_ptr(), out.data_ptr()]
    _close(out, model(x).detach())
    xt = torch.randn(16, 8).t()  # not contiguous: made contiguous once, still right
    _close(compiled(xt), model(xt).detach())
    assert seen[-1][0] != xt.data_ptr()
    with pytest.raises(ValueError, match="compiled for inputs"):
        compiled(torch.randn(4, 16))


def test_new_shape_compiles_for_that_shape(caplog):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()).eval()
    fast = torch.compile(model, backend="autotune")
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        for rows in (3, 5, 7):
            x = torch.randn(rows, 16)
            _close(fast(x), model(x))
    per_shape = [r.getMessage() for r in caplog.records if "compiling for shapes" in r.getMessage()]
    assert len(per_shape) >= 2, caplog.text  # Dynamo went dynamic: one module per seen shape


def test_backend_options_are_checked():
    with pytest.raises(ValueError, match="unknown autotune backend option 'trials'"):
        at.Options.parse({"trials": 3})
    with pytest.raises(ValueError, match="tune_trials"):
        at.Options.parse({"tune_trials": -1})


def _onnx_bytes(model, args) -> bytes:
    buf = io.BytesIO()
    try:
        torch.onnx.export(model, args, buf, dynamo=False)
    except Exception as err:  # noqa: BLE001 - the legacy exporter is optional in a torch build
        pytest.skip(f"torch.onnx.export does not work here: {err}")
    return buf.getvalue()


@pytest.mark.parametrize("name,cls", [("convnet", ConvNet), ("block", Block)])
def test_torch_and_onnx_give_the_same_task_keys(name, cls):
    from autotune.graph import prepare
    from autotune.torch.backend import export_aten
    from autotune.torch.partition import find_regions

    torch.manual_seed(0)
    model, args = cls().eval(), _inputs(name)
    regions, _ = find_regions(export_aten(model, args), name)
    from_torch = {t.key: t.label for r in regions for t in prepare(r.graph).tasks}
    from_onnx = {t.key: t.label for t in prepare(_onnx_bytes(model, args)).tasks}
    assert len(from_torch) >= 5 and from_torch == from_onnx


def test_tuning_a_torch_module_serves_its_onnx_export(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    x = torch.randn(8, 32)
    db_path = str(tmp_path / "t.db")
    summary = at.tune(model, (x,), trials=6, db=db_path, strategy="random")
    assert summary.new_trials > 0
    onnx_model = _onnx_bytes(model, (x,))
    with TuningDatabase(db_path) as db:
        module = compile_model(onnx_model, db=db, verbose=False)
    assert {mt.task.key for mt in summary.tasks} == {t.key for t in module.prepared.tasks}  # shared keys
    tuned = {mt.task.key for mt in summary.tasks if mt.new_trials}
    assert tuned and {c.task.key for c in module.choices if c.tuned} == tuned
    (got,) = module.run([x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name,cls", [("convnet", ConvNet), ("block", Block)])
def test_cuda_tensors_run_on_the_gpu_module(name, cls, caplog):
    """CUDA tensors in: the graph compiles for this machine's GPU, the module runs on device
    memory on PyTorch's current stream, and the outputs are CUDA tensors equal to eager's."""
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # eager in plain fp32
    model = cls().eval().cuda()
    args = tuple(a.cuda() for a in _inputs(name))
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        got = torch.compile(model, backend="autotune")(*args)
        want = model(*args)
    assert got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=1e-3, atol=1e-4)
    assert any("nothing runs eagerly" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_cross_without_copies_once_their_addresses_repeat():
    """A CUDA region called again on the same device addresses replays a graph captured on them:
    the input read and the output written where PyTorch holds them, no device-to-device copies;
    new addresses (or a misaligned view) take the copy path; every result equals eager's."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval().cuda()
    x = torch.randn(32, 64, device="cuda")
    compiled = at.compile(model, (x,), target="cuda")
    (region,) = compiled.regions
    want = model(x).detach().cpu()
    outs = [compiled(x) for _ in range(4)]  # the outputs kept: each call a new output address
    for o in outs:
        _close(o.cpu(), want)
    assert region.executable.device_runs() == (0, 4)
    del outs
    for _ in range(4):  # the output dropped each time: the caching allocator hands its block back
        _close(compiled(x).cpu(), want)
    direct, copied = region.executable.device_runs()
    assert direct >= 2 and direct + copied == 8, (direct, copied)
    shifted = torch.randn(32 * 64 + 1, device="cuda")[1:].view(32, 64)  # 4 bytes off: not aligned
    _close(compiled(shifted).cpu(), model(shifted).detach().cpu())
    _close(compiled(shifted).cpu(), model(shifted).detach().cpu())
    assert region.executable.device_runs()[1] == copied + 2
    torch.cuda.synchronize()


@pytest.mark.parametrize("spec", ["tv:resnet18", "tv:mobilenet_v3_small", "hf:gpt2", "hf:t5"])
def test_torchvision_and_transformers_models_compile_whole_and_match_eager(spec):
    """Real architectures (random weights; the checks of bench/torch/architectures.py): every
    operator of Dynamo's graphs compiled, the output within fp32 tolerance of eager and dependent
    on the input."""
    if importlib.util.find_spec("torchvision" if spec.startswith("tv:") else "transformers") is None:
        pytest.skip("torchvision / transformers not installed")
    from bench.torch.architectures import check

    torch._dynamo.reset()
    row = check(spec)
    assert row["graphs"] >= 1 and row["eager_ops"] == [], row
    assert row["rel_err"] < 1e-5 and row["output_depends_on_input"], row


def test_each_operator_definition_declares_its_aten_overloads_and_the_frontend_converts_them():
    """The torch mapping of an operator lives in its definition (``OpDef.aten``): every declared
    overload exists in torch, the frontend converts it into that operator, and a model of one such
    overload compiles to that operator and matches eager."""
    from autotune.graph.ops import OPS
    from autotune.torch.aten import _ELEMENTWISE, CONVERTERS

    declared = {(name, overload) for name, op in OPS.items() for overload in op.aten}
    assert len(declared) >= 50
    for name, overload in declared:
        packet, _, over = overload.partition(".")
        target = getattr(getattr(torch.ops.aten, packet), over)
        assert target in CONVERTERS and _ELEMENTWISE[target][0].lstrip("!") == name, overload

    class Model(torch.nn.Module):
        def forward(self, x, y):
            return torch.maximum(torch.sigmoid(x), y).amax(dim=1) + (x > y).sum(dim=1)

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    compiled = at.compile(Model(), (x, y))
    assert not compiled.report.fallback_ops
    _close(compiled(x, y), Model()(x, y))


def test_several_index_tensors_anywhere():
    """``x[:, i, j]`` (adjacent: the broadcast dims stay in place) and ``x[i, :, j]`` (apart: they go
    first), as ConvBERT's span gathers index, compile and match eager."""

    class Model(torch.nn.Module):
        def forward(self, x, i, j):
            return x[:, i, j] * 2.0, x[i, :, j], x[:, :, i, j], x[:, i, :, j], x[i, j]

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, 6, generator=g)
    i, j = torch.tensor([[0, 1, 2], [2, 2, -1]]), torch.tensor([1, 0, 2])
    compiled = at.compile(Model(), (x, i, j))
    assert not compiled.report.fallback_ops, compiled.report.fallback
    for got, want in zip(compiled(x, i, j), Model()(x, i, j)):
        assert got.shape == want.shape
        _close(got, want)


def test_a_dynamic_graph_with_the_modules_numbers_compiles_per_shape(caplog):
    """With ``dynamic=True`` Dynamo passes a layer norm's ``eps`` (a Python float of the module) as a
    0-d tensor read with ``.item()``: compiled in by value, each shape compiles whole."""
    torch.manual_seed(0)
    model = Block().eval()
    fast = torch.compile(model, backend="autotune", dynamic=True)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        for t in (5, 9, 5):
            x = torch.randn(2, t, 32)
            _close(fast(x), model(x))
    lines = [r.getMessage() for r in caplog.records]
    assert sum("compiling for shapes" in ln for ln in lines) == 2, lines
    assert sum("nothing runs eagerly" in ln for ln in lines) == 2
    assert not any("not exported" in ln for ln in lines)


def test_a_graph_that_cannot_be_exported_runs_eagerly(caplog, monkeypatch):
    import autotune.torch.backend as backend

    def refuse(module, args):
        raise RuntimeError("data-dependent expression")

    monkeypatch.setattr(backend, "export_aten", refuse)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    x = torch.randn(3, 8)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        _close(torch.compile(model, backend="autotune")(x), model(x))
    want = "not exported, runs in eager PyTorch (RuntimeError: data-dependent expression)"
    assert any(want in r.getMessage() for r in caplog.records), caplog.text


def test_truths_any_all_and_their_arithmetic():
    """A float is true where it is nonzero (negative ones too); T5's float16 overflow guard reduces
    ``isinf(x)`` over the whole tensor; masks multiplied (BART's) or added are And and Or."""

    class Model(torch.nn.Module):
        def forward(self, x, b):
            m = x > 0.5
            return (x.any(), x.all(), m.all(1), x.any(dim=(0, 2), keepdim=True), b.all(),
                    (x * 0.0).any(), torch.where(torch.isinf(x).any(), x * 2.0, x),
                    m * (x < 1.0), m + (x < -1.0), torch.maximum(m, x < 0), torch.minimum(m, x < 1), m * True)

    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    x[0, 0, 0], x[1] = 0.0, -1.0
    b = torch.tensor([True, True, False])
    compiled = at.compile(Model(), (x, b))
    assert not compiled.report.fallback_ops, compiled.report.fallback
    for got, want in zip(compiled(x, b), Model()(x, b)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,cls", [("convnet", ConvNet), ("block", Block)])
def test_a_16bit_module_is_computed_in_float32_and_answers_in_its_type(name, cls, dtype, caplog):
    """A module in float16 or bfloat16 compiles whole: the regions compute in float32 from the 16-bit
    weights and inputs and round their outputs to the 16-bit type once, so the answer is within one
    unit of that type of the float32 evaluation of the same weights and inputs."""
    import copy

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    model = cls().eval().to(dt)
    (x,) = _inputs(name)
    x = x.to(dt)
    torch._dynamo.reset()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="autotune.torch"):
        got = torch.compile(model, backend="autotune")(x)
        wide = copy.deepcopy(model).float()(x.float())
    assert got.dtype == dt
    assert any("nothing runs eagerly" in r.getMessage() for r in caplog.records), caplog.text
    eps = torch.finfo(dt).eps
    torch.testing.assert_close(got.float(), wide, rtol=eps, atol=eps * float(wide.abs().max()) * 0.01)
