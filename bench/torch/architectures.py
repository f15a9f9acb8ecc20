"""torch.compile(backend="autotune") across architectures: does each compile whole and match eager?

    python bench/torch/architectures.py [--models tv:resnet18,hf:bert,...] [--dtype float16] [--json FILE]

Models: torchvision's classification models (``tv:NAME``, random weights, 1x3x224x224) and Hugging
Face transformers (``hf:NAME``, small random configs: 2 layers, hidden 64, 4 heads; token ids and an
attention mask of length 16, or a 1x3x64x64 image), and any model of the ONNX gallery
(``gallery:NAME``, ``python -m bench.gallery --list``: built and scaled as for its export, with
its example inputs), each in its own process (a crash or a hang is
that model's row, ``--timeout`` seconds). Per model: whether every operator of Dynamo's graphs was
compiled or which ran in eager PyTorch, the largest difference from eager relative to the output's
largest value, and whether the output depends on the input at all (a random classifier can map
every input to the same logits, which makes its comparison weak; parameters initialized to zeros
are drawn at random instead). Untuned (empty database): this
measures correctness and coverage, not speed.

``--dtype float16`` / ``bfloat16``: the model and its float inputs in that type. Both the compiled
module and eager PyTorch are then compared with the float32 evaluation of the same (16-bit) weights
and inputs (``rel_err`` and ``eager_rel_err``): eager computes in the 16-bit type, the compiled
regions in float32 with their 16-bit outputs rounded. A model whose float32 outputs lie beyond the
16-bit type's range (random weights can do that to a deep network) is listed as ``out_of_range`` and
left out of the worst error.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TORCHVISION = ("resnet18 mobilenet_v3_small efficientnet_b0 convnext_tiny regnet_y_400mf shufflenet_v2_x1_0 "
               "squeezenet1_1 densenet121 googlenet mnasnet0_5 vit_b_16 swin_t maxvit_t efficientnet_v2_s "
               "resnext50_32x4d inception_v3 alexnet vgg11").split()
TRANSFORMERS = ("bert gpt2 distilbert roberta t5 vit albert electra llama mistral qwen2 opt deberta convnext "
                "swin bart mobilebert xlm_roberta phi gemma").split()
DEFAULT = [f"tv:{m}" for m in TORCHVISION] + [f"hf:{m}" for m in TRANSFORMERS]
ROOT = Path(__file__).resolve().parents[2]  # the children import bench.gallery from here
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def _hf(name: str) -> tuple[Any, tuple]:
    import torch

    from bench.gallery.models import import_transformers

    T = import_transformers()

    classes = {
        "bert": "Bert", "gpt2": "GPT2", "distilbert": "DistilBert", "roberta": "Roberta", "vit": "ViT",
        "albert": "Albert", "electra": "Electra", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2",
        "opt": "OPT", "deberta": "DebertaV2", "convnext": "ConvNext", "swin": "Swin", "bart": "Bart",
        "mobilebert": "MobileBert", "xlm_roberta": "XLMRoberta", "phi": "Phi", "gemma": "Gemma", "t5": "T5",
    }
    stem = classes[name]
    config_cls = getattr(T, f"{stem}Config")
    model_cls = T.T5EncoderModel if name == "t5" else getattr(T, f"{stem}Model")
    special = {
        "gpt2": dict(n_embd=64, n_layer=2, n_head=4),
        "t5": dict(d_model=64, num_layers=2, num_heads=4, d_ff=128, d_kv=16),
        "opt": dict(SMALL, ffn_dim=128, word_embed_proj_dim=64),
        "bart": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128),
        "convnext": dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
        "swin": dict(embed_dim=16, depths=[1, 1], num_heads=[2, 4], image_size=64, window_size=4),
        "vit": dict(SMALL, image_size=64, patch_size=16),
        "mobilebert": dict(SMALL, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32),
        "albert": dict(SMALL, embedding_size=32),
        "phi": dict(SMALL, vocab_size=1000),
    }
    for decoder in ("llama", "mistral", "qwen2", "gemma"):
        special[decoder] = dict(SMALL, num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    config = config_cls(**special.get(name, SMALL))
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    if name in ("convnext", "swin", "vit"):
        return model, (torch.randn(1, 3, 64, 64),)
    ids = torch.randint(0, 1000, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0
    return model, {"gpt2": (ids,), "bart": (ids, mask, ids)}.get(name, (ids, mask))


def _first(out: Any) -> Any:
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return _first(out[0]) if isinstance(out, (tuple, list)) else out


def check(spec: str, dtype: str | None = None) -> dict:
    """One model, in this process: compile, run, compare (the row of the table)."""
    import copy

    import torch

    import autotune.torch  # noqa: F401 - registers the backend

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("autotune.torch").addHandler(Keep())
    logging.getLogger("autotune.torch").setLevel(logging.INFO)
    torch.manual_seed(0)
    kind, name = spec.split(":")
    if kind == "gallery":
        from bench.gallery.export import _example_inputs, well_scaled
        from bench.gallery.models import MODELS

        gspec = MODELS[name]
        model, args = well_scaled(gspec.build(), gspec), _example_inputs(gspec)
    elif kind == "tv":
        from bench.gallery.models import import_torchvision

        tvm = import_torchvision().models
        model, args = getattr(tvm, name)(weights=None).eval(), (torch.randn(1, 3, 224, 224),)
        with torch.no_grad():  # a classifier initialized to zeros would answer 0 for every input
            for p in model.parameters():
                if p.is_floating_point() and not p.any():
                    p.normal_(0.0, 0.02)
    else:
        model, args = _hf(name)
    narrow: dict = {}
    if dtype:
        model = model.to(getattr(torch, dtype))
        args = tuple(a.to(getattr(torch, dtype)) if a.is_floating_point() else a for a in args)
    t0 = time.perf_counter()
    with torch.no_grad():
        plain = want = _first(model(*args))
        got = _first(torch.compile(model, backend="autotune")(*args))
        if dtype:  # both against the float32 evaluation of the 16-bit weights and inputs
            wide = copy.deepcopy(model).float()
            want = _first(wide(*(a.float() if a.is_floating_point() else a for a in args)))
            narrow = {"dtype": str(got.dtype).removeprefix("torch."),
                      "eager_rel_err": float((plain.float() - want).abs().max() / want.abs().max()),
                      # random weights can take a deep model's outputs past the 16-bit type's range
                      "out_of_range": bool(want.abs().max() > torch.finfo(got.dtype).max)}
            got = got.float()
        other = _first(model(*(torch.randn_like(a) if a.is_floating_point() else a for a in args)))
        if kind == "gallery" and not any(a.is_floating_point() for a in args):  # token ids only
            other = _first(model(*(torch.roll(a, 1, -1) if i == 0 else a for i, a in enumerate(args))))
    scale = float(want.abs().max())
    eager = [ln.split("eager PyTorch for ", 1)[1] for ln in lines if "eager PyTorch for" in ln]
    return {"model": spec, "status": "ok", "seconds": round(time.perf_counter() - t0, 1),
            "graphs": sum("compiled region" in ln for ln in lines), "eager_ops": eager,
            "rel_err": float((got - want).abs().max()) / max(scale, 1e-30),
            "output_depends_on_input": bool(kind == "hf" or not torch.equal(plain, other)),
            **narrow}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT),
                   help="comma-separated tv:NAME / hf:NAME / gallery:NAME")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--dtype", choices=["float16", "bfloat16"], default=None,
                   help="run the model in this 16-bit float type")
    p.add_argument("--one", help=argparse.SUPPRESS)  # (a child process: one model, its row on stdout)
    args = p.parse_args(argv)
    if args.one:
        print("ROW " + json.dumps(check(args.one, args.dtype)), flush=True)
        return 0
    rows = []
    for spec in [m for m in args.models.split(",") if m]:
        t0 = time.perf_counter()
        try:
            cmd = [sys.executable, "-m", "bench.torch.architectures", "--one", spec]
            done = subprocess.run(cmd + (["--dtype", args.dtype] if args.dtype else []),
                                  cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
            row = next((json.loads(ln[4:]) for ln in done.stdout.splitlines() if ln.startswith("ROW ")), None)
            if row is None:
                err = (done.stderr.strip().splitlines() or ["no output"])[-1]
                row = {"model": spec, "status": "failed", "error": err[:300]}
        except subprocess.TimeoutExpired:
            row = {"model": spec, "status": "timeout", "error": f"over {args.timeout:g} s"}
        row.setdefault("seconds", round(time.perf_counter() - t0, 1))
        rows.append(row)
        vs_eager = f"eager {row['eager_rel_err']:.1e}, " if "eager_rel_err" in row else ""
        ran = "whole graph compiled" if not row.get("eager_ops") else "eager: " + "; ".join(row["eager_ops"])
        detail = (f"rel err {row['rel_err']:.1e}, {vs_eager}{ran}"
                  + ("" if row["output_depends_on_input"] else " (output does not depend on the input)")
                  + (" (float32 output beyond the 16-bit range)" if row.get("out_of_range") else "")
                  if row["status"] == "ok" else row["error"])
        print(f"{spec:28s} {row['status']:8s} {detail}", flush=True)
    ok = [r for r in rows if r["status"] == "ok"]
    summary = {"models": len(rows), "ok": len(ok), "whole_graph": sum(not r["eager_ops"] for r in ok),
               "worst_rel_err": max((r["rel_err"] for r in ok if r["output_depends_on_input"]
                                     and not r.get("out_of_range")), default=None),
               "out_of_range": [r["model"] for r in ok if r.get("out_of_range")]}
    print(json.dumps(summary), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
