"""The gallery's models: torchvision classifiers and Hugging Face encoders/decoders, random weights,
batch 1, nothing downloaded.

Each :class:`ModelSpec` names how to build the PyTorch module (imported lazily: torch, torchvision
and transformers are the ``[models]`` extra, never needed to read this list) and what its inputs
are, so that the evaluation side can make random inputs of the right kind without torch.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

SEQ = 128  # tokens per sequence for the text models
IMAGE = 224


@dataclass(frozen=True)
class InputSpec:
    """One model input: an image, a video clip or a signal (float32, standard normal), token ids (int64 in
    [0, vocab)) or an attention mask (int64 ones then zeros: a padded sequence)."""

    name: str
    kind: str  # "image" | "video" | "signal" | "token_ids" | "attention_mask"
    shape: tuple[int, ...]
    vocab: int = 0

    @property
    def is_float(self) -> bool:
        return self.kind in ("image", "video", "signal")

    @property
    def dtype(self) -> str:
        return "float32" if self.is_float else "int64"

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "shape": list(self.shape), "vocab": self.vocab}

    @staticmethod
    def from_json(d: dict) -> InputSpec:
        return InputSpec(d["name"], d["kind"], tuple(d["shape"]), int(d.get("vocab", 0)))


@dataclass(frozen=True)
class ModelSpec:
    """A gallery model: ``rank`` orders the cheap ones first (export and compile time)."""

    name: str
    family: str
    rank: int
    build: Callable[[], Any] = field(repr=False, compare=False)
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...] = ("logits",)
    note: str = ""


# --- torchvision ------------------------------------------------------------------------------------
def import_torchvision(skip_registrations: bool = False) -> Any:
    """``torchvision``, importable even where its compiled custom operators (``torchvision::nms``,
    ``roi_align``, ...) do not load against the installed torch.

    A torchvision wheel built for another torch variant (PyPI's CUDA build next to a CPU torch) fails
    at import in the modules that register those operators' meta/autograd kernels and ONNX
    symbolics. The classification models use none of them, so when the plain import fails (or with
    ``skip_registrations``) the three registration modules are replaced by empty ones and the import
    is tried again; detection ops (``torchvision.ops.nms`` ...) are then unusable, nothing else is.
    """
    if not skip_registrations:
        try:
            import torchvision

            return torchvision
        except Exception as err:  # noqa: BLE001 - any failure of the registrations: retry without them
            first = err
            for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
                del sys.modules[mod]
    else:
        first = None
    stubs = {
        "torchvision._meta_registrations": {},
        "torchvision._autograd_registrations": {},
        "torchvision.ops._register_onnx_ops": {"_register_custom_op": lambda: None},
    }
    for name, attrs in stubs.items():
        mod = types.ModuleType(name, "skipped: torchvision's custom-op registrations (import_torchvision)")
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    try:
        import torchvision
    except Exception as err:
        raise ImportError(f"torchvision does not import, even without its custom-op registrations: {err}"
                          + (f" (first error: {first})" if first else "")) from err
    return torchvision


def import_transformers() -> Any:
    """``transformers``, after torchvision where that is installed (transformers imports it, and
    would fail on the registrations ``import_torchvision`` skips)."""
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
    import transformers

    return transformers


def _tv(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        tv = import_torchvision()
        return getattr(tv.models, name)(weights=None, **kwargs)

    return build


def _tv_dense(kind: str, name: str) -> Callable[[], Any]:
    """A torchvision segmentation model (``kind`` "segmentation", random backbone too) returning
    its "out" map, or a video model (``kind`` "video")."""

    def build() -> Any:
        import torch

        tv = import_torchvision()
        extra = {"weights_backbone": None} if kind == "segmentation" else {}
        model = getattr(getattr(tv.models, kind), name)(weights=None, **extra)
        if kind != "segmentation":
            return model

        class Out(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, x: Any) -> Any:
                return self.model(x)["out"]

        return Out()

    return build


def _vit_tiny() -> Any:
    tv = import_torchvision()
    return tv.models.vision_transformer.VisionTransformer(
        image_size=IMAGE, patch_size=16, num_layers=2, num_heads=2, hidden_dim=128, mlp_dim=512)


def _image(size: int = IMAGE, width: int | None = None, batch: int = 1) -> tuple[InputSpec, ...]:
    return (InputSpec("x", "image", (batch, 3, size, width or size)),)


def _video(frames: int = 8, size: int = 112) -> tuple[InputSpec, ...]:
    return (InputSpec("x", "video", (1, 3, frames, size, size)),)


# --- Hugging Face -----------------------------------------------------------------------------------
TINY = {"layers": 2, "hidden": 128, "heads": 2, "ffn": 512}


def _text(kind: str, tiny: bool) -> Callable[[], Any]:
    """A builder of the transformers model ``kind`` (its default config, or the TINY sizes) wrapped so
    that forward(input_ids, attention_mask) returns one tensor, the last hidden state."""

    def build() -> Any:
        import torch

        tf = import_transformers()

        t = TINY
        if kind == "bert":
            cfg = tf.BertConfig(**({"num_hidden_layers": t["layers"], "hidden_size": t["hidden"],
                                    "num_attention_heads": t["heads"], "intermediate_size": t["ffn"]}
                                   if tiny else {}))
            model = tf.BertModel(cfg, add_pooling_layer=False)
        elif kind == "roberta":
            cfg = tf.RobertaConfig(**({"num_hidden_layers": t["layers"], "hidden_size": t["hidden"],
                                       "num_attention_heads": t["heads"], "intermediate_size": t["ffn"]}
                                      if tiny else {}))
            model = tf.RobertaModel(cfg, add_pooling_layer=False)
        elif kind == "distilbert":
            cfg = tf.DistilBertConfig(**({"n_layers": t["layers"], "dim": t["hidden"], "n_heads": t["heads"],
                                          "hidden_dim": t["ffn"]} if tiny else {}))
            model = tf.DistilBertModel(cfg)
        elif kind == "gpt2":
            cfg = tf.GPT2Config(**({"n_layer": t["layers"], "n_embd": t["hidden"], "n_head": t["heads"]}
                                   if tiny else {}))
            cfg.use_cache = False
            model = tf.GPT2Model(cfg)
        elif kind == "t5_encoder":
            cfg = tf.T5Config(**({"num_layers": t["layers"], "d_model": t["hidden"], "num_heads": t["heads"],
                                  "d_ff": t["ffn"], "d_kv": t["hidden"] // t["heads"]} if tiny else {}))
            cfg.use_cache = False
            model = tf.T5EncoderModel(cfg)
        else:
            raise ValueError(f"unknown text model kind {kind!r}")

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
                return out[0]

        return Wrapped()

    return build


# more Hugging Face families, small random configs (the text ones at the TINY sizes), each wrapped
# to return its last hidden state: kind -> (config class, model class, config arguments, what it
# reads: "tokens" (ids and an attention mask), "image" or "signal")
_HF_VOCAB = 1000
_HF_TINY = {"num_hidden_layers": TINY["layers"], "hidden_size": TINY["hidden"],
            "num_attention_heads": TINY["heads"], "intermediate_size": TINY["ffn"]}
_HF: dict[str, tuple[str, str, dict, str]] = {
    "gpt_neo": ("GPTNeoConfig", "GPTNeoModel",
                {"num_layers": TINY["layers"], "hidden_size": TINY["hidden"], "num_heads": TINY["heads"],
                 "attention_types": [[["global", "local"], 1]], "window_size": 16, "vocab_size": _HF_VOCAB},
                "tokens"),
    "bloom": ("BloomConfig", "BloomModel",
              {"n_layer": TINY["layers"], "hidden_size": TINY["hidden"], "n_head": TINY["heads"],
               "vocab_size": _HF_VOCAB}, "tokens"),
    "phi": ("PhiConfig", "PhiModel", dict(_HF_TINY, vocab_size=_HF_VOCAB), "tokens"),
    "gemma": ("GemmaConfig", "GemmaModel",
              dict(_HF_TINY, vocab_size=_HF_VOCAB, head_dim=TINY["hidden"] // TINY["heads"],
                   num_key_value_heads=1), "tokens"),
    "falcon": ("FalconConfig", "FalconModel",
               {"num_hidden_layers": TINY["layers"], "hidden_size": TINY["hidden"],
                "num_attention_heads": TINY["heads"], "vocab_size": _HF_VOCAB}, "tokens"),
    "xlm_roberta": ("XLMRobertaConfig", "XLMRobertaModel", dict(_HF_TINY, vocab_size=_HF_VOCAB), "tokens"),
    "electra": ("ElectraConfig", "ElectraModel", dict(_HF_TINY, vocab_size=_HF_VOCAB, embedding_size=64),
                "tokens"),
    "deit": ("DeiTConfig", "DeiTModel", dict(_HF_TINY, image_size=64, patch_size=16), "image"),
    "beit": ("BeitConfig", "BeitModel", dict(_HF_TINY, image_size=64, patch_size=16), "image"),
    "segformer": ("SegformerConfig", "SegformerModel",
                  {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [32, 64],
                   "num_attention_heads": [1, 2], "mlp_ratios": [2, 2], "patch_sizes": [7, 3],
                   "strides": [4, 2]}, "image"),
    "mobilevit": ("MobileViTConfig", "MobileViTModel", {"image_size": 64}, "image"),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model",
                 dict(_HF_TINY, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), "signal"),
    "hubert": ("HubertConfig", "HubertModel",
               dict(_HF_TINY, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), "signal"),
    "llama": ("LlamaConfig", "LlamaModel", dict(_HF_TINY, vocab_size=_HF_VOCAB, num_key_value_heads=1),
              "tokens"),
    "mistral": ("MistralConfig", "MistralModel",
                dict(_HF_TINY, vocab_size=_HF_VOCAB, num_key_value_heads=1, sliding_window=16), "tokens"),
    "qwen2": ("Qwen2Config", "Qwen2Model", dict(_HF_TINY, vocab_size=_HF_VOCAB, num_key_value_heads=2),
              "tokens"),
    "opt": ("OPTConfig", "OPTModel",
            {"num_hidden_layers": TINY["layers"], "hidden_size": TINY["hidden"],
             "num_attention_heads": TINY["heads"], "ffn_dim": TINY["ffn"],
             "word_embed_proj_dim": TINY["hidden"], "vocab_size": _HF_VOCAB}, "tokens"),
    "albert": ("AlbertConfig", "AlbertModel", dict(_HF_TINY, vocab_size=_HF_VOCAB, embedding_size=64),
               "tokens"),
    "deberta_v2": ("DebertaV2Config", "DebertaV2Model", dict(_HF_TINY, vocab_size=_HF_VOCAB), "tokens"),
    "mobilebert": ("MobileBertConfig", "MobileBertModel",
                   dict(_HF_TINY, vocab_size=_HF_VOCAB, intermediate_size=128, intra_bottleneck_size=64,
                        embedding_size=64, true_hidden_size=64), "tokens"),
    "squeezebert": ("SqueezeBertConfig", "SqueezeBertModel",
                    dict(_HF_TINY, vocab_size=_HF_VOCAB, embedding_size=TINY["hidden"]), "tokens"),
    "convbert": ("ConvBertConfig", "ConvBertModel",
                 dict(_HF_TINY, vocab_size=_HF_VOCAB, embedding_size=TINY["hidden"]), "tokens"),
    "clip_text": ("CLIPTextConfig", "CLIPTextModel",
                  dict(_HF_TINY, vocab_size=_HF_VOCAB, max_position_embeddings=SEQ), "tokens"),
    "clip_vision": ("CLIPVisionConfig", "CLIPVisionModel", dict(_HF_TINY, image_size=64, patch_size=16),
                    "image"),
    "dinov2": ("Dinov2Config", "Dinov2Model", dict(_HF_TINY, image_size=64, patch_size=16), "image"),
    "levit": ("LevitConfig", "LevitModel", {"image_size": 64}, "image"),
    "poolformer": ("PoolFormerConfig", "PoolFormerModel", {"depths": [1, 1, 1, 1],
                                                           "hidden_sizes": [16, 32, 64, 128]}, "image"),
    "hf_convnext": ("ConvNextConfig", "ConvNextModel", {"depths": [1, 1, 2, 1],
                                                        "hidden_sizes": [16, 32, 64, 128]}, "image"),
    "hf_resnet": ("ResNetConfig", "ResNetModel", {"depths": [1, 1, 1, 1], "hidden_sizes": [32, 64, 128, 256],
                                                  "layer_type": "bottleneck"}, "image"),
    "hf_swin": ("SwinConfig", "SwinModel", {"image_size": 64, "embed_dim": 32, "depths": [1, 2],
                                            "num_heads": [1, 2], "window_size": 4}, "image"),
}
# a second set: more encoders and decoders, vision and audio backbones, and task heads of one output
# channel or label (depth maps, a one-class segmentation, regression heads)
_TOK = dict(_HF_TINY, vocab_size=_HF_VOCAB)
_IMG = dict(_HF_TINY, image_size=64, patch_size=16)
_AUDIO = dict(_HF_TINY, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
_STAGES = {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128]}
_MIX = {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [32, 64],
        "num_attention_heads": [1, 2], "mlp_ratios": [2, 2], "patch_sizes": [7, 3], "strides": [4, 2]}
_REGNET = {"depths": [1, 1, 1, 1], "hidden_sizes": [32, 64, 128, 256], "groups_width": 16}
_HF_MORE: dict[str, tuple[str, str, dict, str]] = {
    "mpnet": ("MPNetConfig", "MPNetModel", _TOK, "tokens"),
    "roformer": ("RoFormerConfig", "RoFormerModel", dict(_TOK, embedding_size=128), "tokens"),
    "funnel": ("FunnelConfig", "FunnelBaseModel",
               {"block_sizes": [1, 1], "d_model": 128, "n_head": 2, "d_head": 64, "d_inner": 512,
                "vocab_size": _HF_VOCAB}, "tokens"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXModel", _TOK, "tokens"),
    "gptj": ("GPTJConfig", "GPTJModel",
             {"n_layer": 2, "n_embd": 128, "n_head": 2, "rotary_dim": 32, "vocab_size": _HF_VOCAB}, "tokens"),
    "stablelm": ("StableLmConfig", "StableLmModel", dict(_TOK, num_key_value_heads=2), "tokens"),
    "phi3": ("Phi3Config", "Phi3Model", dict(_TOK, num_key_value_heads=2, pad_token_id=0), "tokens"),
    "olmo": ("OlmoConfig", "OlmoModel", dict(_TOK, num_key_value_heads=2), "tokens"),
    "megatron_bert": ("MegatronBertConfig", "MegatronBertModel", _TOK, "tokens"),
    "rembert": ("RemBertConfig", "RemBertModel",
                dict(_TOK, input_embedding_size=64, output_embedding_size=64), "tokens"),
    "ibert": ("IBertConfig", "IBertModel", _TOK, "tokens"),
    "bert_generation": ("BertGenerationConfig", "BertGenerationEncoder", _TOK, "tokens"),
    "splinter": ("SplinterConfig", "SplinterModel", _TOK, "tokens"),
    "xmod": ("XmodConfig", "XmodModel", dict(_TOK, languages=["en_XX"], default_language="en_XX"), "tokens"),
    "esm": ("EsmConfig", "EsmModel",
            dict(_TOK, pad_token_id=1, position_embedding_type="rotary", max_position_embeddings=130),
            "tokens"),
    "data2vec_text": ("Data2VecTextConfig", "Data2VecTextModel", _TOK, "tokens"),
    "swinv2": ("Swinv2Config", "Swinv2Model",
               {"image_size": 64, "embed_dim": 32, "depths": [1, 2], "num_heads": [1, 2],
                "window_size": 4}, "image"),
    "convnextv2": ("ConvNextV2Config", "ConvNextV2Model", dict(_STAGES, depths=[1, 1, 2, 1]), "image"),
    "hf_regnet": ("RegNetConfig", "RegNetModel", _REGNET, "image"),
    "hf_efficientnet": ("EfficientNetConfig", "EfficientNetModel", {"image_size": 64}, "image"),
    "hf_mobilenet_v1": ("MobileNetV1Config", "MobileNetV1Model", {"image_size": 64, "depth_multiplier": 0.5},
                        "image"),
    "hf_mobilenet_v2": ("MobileNetV2Config", "MobileNetV2Model", {"image_size": 64, "depth_multiplier": 0.5},
                        "image"),
    "bit": ("BitConfig", "BitModel",
            {"depths": [1, 1, 1, 1], "hidden_sizes": [64, 128, 256, 512], "embedding_size": 32,
             "num_groups": 8}, "image"),
    "pvt": ("PvtConfig", "PvtModel", dict(_STAGES, image_size=64, num_attention_heads=[1, 2, 2, 4]), "image"),
    "focalnet": ("FocalNetConfig", "FocalNetModel",
                 {"image_size": 64, "embed_dim": 32, "depths": [1, 1, 1, 1]}, "image"),
    "swiftformer": ("SwiftFormerConfig", "SwiftFormerModel",
                    {"depths": [1, 1, 1, 1], "embed_dims": [16, 32, 64, 128]}, "image"),
    "yolos": ("YolosConfig", "YolosModel", dict(_IMG, image_size=[64, 64], num_detection_tokens=10), "image"),
    "vit_msn": ("ViTMSNConfig", "ViTMSNModel", _IMG, "image"),
    "data2vec_vision": ("Data2VecVisionConfig", "Data2VecVisionModel", _IMG, "image"),
    "glpn": ("GLPNConfig", "GLPNModel", _MIX, "image"),
    "wavlm": ("WavLMConfig", "WavLMModel", _AUDIO, "signal"),
    "sew": ("SEWConfig", "SEWModel", dict(_AUDIO, squeeze_factor=2), "signal"),
    "unispeech": ("UniSpeechConfig", "UniSpeechModel", _AUDIO, "signal"),
    "data2vec_audio": ("Data2VecAudioConfig", "Data2VecAudioModel", _AUDIO, "signal"),
    # heads of one output channel or label
    "glpn_depth": ("GLPNConfig", "GLPNForDepthEstimation",
                   dict(_STAGES, num_encoder_blocks=4, sr_ratios=[8, 4, 2, 1],
                        num_attention_heads=[1, 1, 2, 4], decoder_hidden_size=32), "image"),
    "dpt_depth": ("DPTConfig", "DPTForDepthEstimation",
                  dict(_IMG, num_hidden_layers=4, backbone_out_indices=[0, 1, 2, 3],
                       neck_hidden_sizes=[16, 32, 64, 128], fusion_hidden_size=32, head_in_index=-1),
                  "image"),
    "segformer_one_class": ("SegformerConfig", "SegformerForSemanticSegmentation",
                            dict(_MIX, num_labels=1, decoder_hidden_size=32), "image"),
    "bert_regression": ("BertConfig", "BertForSequenceClassification", dict(_TOK, num_labels=1), "tokens"),
    "vit_regression": ("ViTConfig", "ViTForImageClassification", dict(_IMG, num_labels=1), "image"),
    "regnet_regression": ("RegNetConfig", "RegNetForImageClassification", dict(_REGNET, num_labels=1),
                          "image"),
    "convnext_regression": ("ConvNextConfig", "ConvNextForImageClassification",
                            dict(_STAGES, depths=[1, 1, 2, 1], num_labels=1), "image"),
}
_HF_MORE_OUTPUT = {"glpn_depth": "predicted_depth", "dpt_depth": "predicted_depth"}  # else logits / state
_HF_MORE_FAMILY = {"mpnet": "MPNet", "roformer": "RoFormer", "funnel": "Funnel Transformer",
                   "gpt_neox": "GPT-NeoX", "gptj": "GPT-J", "stablelm": "StableLM", "phi3": "Phi-3",
                   "olmo": "OLMo", "megatron_bert": "Megatron-BERT", "rembert": "RemBERT",
                   "ibert": "I-BERT", "bert_generation": "BertGeneration", "splinter": "Splinter",
                   "xmod": "X-MOD", "esm": "ESM", "data2vec_text": "Data2Vec", "swinv2": "Swin",
                   "convnextv2": "ConvNeXt V2", "hf_regnet": "RegNet",
                   "hf_efficientnet": "EfficientNet V1", "hf_mobilenet_v1": "MobileNet V1",
                   "hf_mobilenet_v2": "MobileNet V2", "bit": "BiT", "pvt": "PVT", "focalnet": "FocalNet",
                   "swiftformer": "SwiftFormer", "yolos": "YOLOS", "vit_msn": "ViT",
                   "data2vec_vision": "Data2Vec", "glpn": "GLPN", "wavlm": "WavLM", "sew": "SEW",
                   "unispeech": "UniSpeech", "data2vec_audio": "Data2Vec", "glpn_depth": "GLPN",
                   "dpt_depth": "DPT", "segformer_one_class": "SegFormer", "bert_regression": "BERT",
                   "vit_regression": "ViT", "regnet_regression": "RegNet",
                   "convnext_regression": "ConvNeXt"}
_HF.update(_HF_MORE)
_HF_FAMILY = {"gpt_neo": "GPT-Neo", "bloom": "BLOOM", "phi": "Phi", "gemma": "Gemma", "falcon": "Falcon",
              "xlm_roberta": "XLM-RoBERTa", "electra": "ELECTRA", "deit": "DeiT", "beit": "BEiT",
              "segformer": "SegFormer", "mobilevit": "MobileViT", "wav2vec2": "Wav2Vec2", "hubert": "HuBERT",
              "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "opt": "OPT", "albert": "ALBERT",
              "deberta_v2": "DeBERTa-v2", "mobilebert": "MobileBERT", "squeezebert": "SqueezeBERT",
              "convbert": "ConvBERT", "clip_text": "CLIP", "clip_vision": "CLIP", "dinov2": "DINOv2",
              "levit": "LeViT", "poolformer": "PoolFormer", "hf_convnext": "ConvNeXt", "hf_resnet": "ResNet",
              "hf_swin": "Swin", **_HF_MORE_FAMILY}


def _hf(kind: str) -> Callable[[], Any]:
    """A builder of the transformers model ``kind`` of ``_HF``: forward(input_ids, attention_mask),
    forward(pixel_values) or forward(input_values) returns the last hidden state."""

    def build() -> Any:
        import torch

        tf = import_transformers()
        config_cls, model_cls, kwargs, _ = _HF[kind]
        names = [i.name for i in _hf_inputs(kind)]
        model = getattr(tf, model_cls)(getattr(tf, config_cls)(**kwargs))

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                return self.model(**dict(zip(names, args)), return_dict=False)[0]

        return Wrapped()

    return build


def _hf_inputs(kind: str) -> tuple[InputSpec, ...]:
    reads = _HF[kind][3]
    if reads == "signal":
        return (InputSpec("input_values", "signal", (1, 4000)),)  # a quarter second at 16 kHz
    if reads == "image":
        return (InputSpec("pixel_values", "image", (1, 3, 64, 64)),)
    return (InputSpec("input_ids", "token_ids", (1, SEQ), _HF_VOCAB),
            InputSpec("attention_mask", "attention_mask", (1, SEQ), _HF_VOCAB))


_VOCAB = {"bert": 30522, "roberta": 50265, "distilbert": 30522, "gpt2": 50257, "t5_encoder": 32128}
_FAMILY = {"bert": "BERT", "roberta": "RoBERTa", "distilbert": "DistilBERT", "gpt2": "GPT-2",
           "t5_encoder": "T5 encoder"}


def _tokens(kind: str) -> tuple[InputSpec, ...]:
    v = _VOCAB[kind]
    return (InputSpec("input_ids", "token_ids", (1, SEQ), v), InputSpec("attention_mask", "attention_mask",
                                                                          (1, SEQ), v))


def _specs() -> list[ModelSpec]:
    v: list[tuple[str, str, int, Callable[[], Any], tuple[InputSpec, ...], str]] = [
        ("squeezenet1_1", "SqueezeNet", 1, _tv("squeezenet1_1"), _image(), ""),
        ("mobilenet_v3_small", "MobileNet V3", 2, _tv("mobilenet_v3_small"), _image(), ""),
        ("shufflenet_v2_x1_0", "ShuffleNet", 3, _tv("shufflenet_v2_x1_0"), _image(), ""),
        ("resnet18", "ResNet", 4, _tv("resnet18"), _image(), ""),
        ("mnasnet1_0", "MNASNet", 5, _tv("mnasnet1_0"), _image(), ""),
        ("mobilenet_v2", "MobileNet V2", 6, _tv("mobilenet_v2"), _image(), ""),
        ("squeezenet1_0", "SqueezeNet", 7, _tv("squeezenet1_0"), _image(), ""),
        ("regnet_x_400mf", "RegNet", 8, _tv("regnet_x_400mf"), _image(), ""),
        ("regnet_y_400mf", "RegNet", 9, _tv("regnet_y_400mf"), _image(), ""),
        ("vit_tiny", "ViT", 10, _vit_tiny, _image(), "ViT-B/16's architecture, 2 layers of width 128"),
        ("mobilenet_v3_large", "MobileNet V3", 11, _tv("mobilenet_v3_large"), _image(), ""),
        ("efficientnet_b0", "EfficientNet V1", 12, _tv("efficientnet_b0"), _image(), ""),
        ("googlenet", "GoogLeNet", 13, _tv("googlenet", aux_logits=False, init_weights=True), _image(), ""),
        ("resnet50", "ResNet", 14, _tv("resnet50"), _image(), ""),
        ("densenet121", "DenseNet", 15, _tv("densenet121"), _image(), ""),
        ("resnext50_32x4d", "ResNeXt", 16, _tv("resnext50_32x4d"), _image(), ""),
        ("convnext_tiny", "ConvNeXt", 17, _tv("convnext_tiny"), _image(), ""),
        ("efficientnet_v2_s", "EfficientNet V2", 18, _tv("efficientnet_v2_s"), _image(), ""),
        ("inception_v3", "Inception", 19, _tv("inception_v3", aux_logits=False, init_weights=True),
         _image(299), "299x299 input"),
        ("swin_t", "Swin", 20, _tv("swin_t"), _image(), ""),
        ("wide_resnet50_2", "Wide-ResNet", 21, _tv("wide_resnet50_2"), _image(), ""),
        ("maxvit_t", "MaxViT", 22, _tv("maxvit_t"), _image(), ""),
        ("vit_b_16", "ViT", 23, _tv("vit_b_16"), _image(), ""),
        # other widths, depths and input shapes of the families above
        ("shufflenet_v2_x0_5", "ShuffleNet", 29, _tv("shufflenet_v2_x0_5"), _image(), ""),
        ("mnasnet0_75", "MNASNet", 29, _tv("mnasnet0_75"), _image(), ""),
        ("mobilenet_v2_193x257", "MobileNet V2", 29, _tv("mobilenet_v2"), _image(193, 257),
         "193x257 input"),
        ("regnet_y_800mf", "RegNet", 30, _tv("regnet_y_800mf"), _image(), ""),
        ("efficientnet_b1", "EfficientNet V1", 30, _tv("efficientnet_b1"), _image(240), "240x240 input"),
        ("efficientnet_b0_batch2", "EfficientNet V1", 30, _tv("efficientnet_b0"), _image(160, 200, 2),
         "batch 2, 160x200 input"),
        ("alexnet", "AlexNet", 31, _tv("alexnet"), _image(), ""),
        ("vgg11_bn", "VGG", 31, _tv("vgg11_bn"), _image(), ""),
        ("swin_v2_t", "Swin", 32, _tv("swin_v2_t"), _image(256), "256x256 input"),
        ("vit_b_32", "ViT", 32, _tv("vit_b_32"), _image(), ""),
        # dense prediction and video: segmentation maps, 3-d convolutions over frames
        ("fcn_resnet50", "FCN", 34, _tv_dense("segmentation", "fcn_resnet50"), _image(), "the \"out\" map"),
        ("deeplabv3_mobilenet_v3_large", "DeepLabV3", 34,
         _tv_dense("segmentation", "deeplabv3_mobilenet_v3_large"), _image(), "the \"out\" map"),
        ("lraspp_mobilenet_v3_large", "LR-ASPP", 34, _tv_dense("segmentation", "lraspp_mobilenet_v3_large"),
         _image(), "the \"out\" map"),
        ("r3d_18", "Video ResNet", 34, _tv_dense("video", "r3d_18"), _video(), "8 frames of 112x112"),
        ("mc3_18", "Video ResNet", 34, _tv_dense("video", "mc3_18"), _video(), "8 frames of 112x112"),
        ("r2plus1d_18", "Video ResNet", 34, _tv_dense("video", "r2plus1d_18"), _video(),
         "8 frames of 112x112"),
        # more depths and widths of the families above, and a video transformer
        ("resnet34", "ResNet", 36, _tv("resnet34"), _image(), ""),
        ("densenet169", "DenseNet", 36, _tv("densenet169"), _image(), ""),
        ("efficientnet_b3", "EfficientNet V1", 36, _tv("efficientnet_b3"), _image(300), "300x300 input"),
        ("regnet_y_1_6gf", "RegNet", 36, _tv("regnet_y_1_6gf"), _image(), ""),
        ("resnet50_one_class", "ResNet", 36, _tv("resnet50", num_classes=1), _image(160),
         "one output, 160x160 input"),
        ("swin3d_t", "Video Swin", 36, _tv_dense("video", "swin3d_t"), _video(), "8 frames of 112x112"),
    ]
    out = [ModelSpec(n, f, r, b, i, ("logits",), note) for n, f, r, b, i, note in v]
    for j, kind in enumerate(("bert", "distilbert", "roberta", "gpt2", "t5_encoder")):
        tiny = f"{TINY['layers']} layers, hidden {TINY['hidden']}, {TINY['heads']} heads, ffn {TINY['ffn']}"
        out.append(ModelSpec(f"{kind}_tiny", _FAMILY[kind], 1 + j, _text(kind, True), _tokens(kind),
                             ("last_hidden_state",), f"the default config at {tiny}"))
        out.append(ModelSpec(kind, _FAMILY[kind], 24 + j, _text(kind, False), _tokens(kind),
                             ("last_hidden_state",), "the default config"))
    for kind in _HF:
        inputs = _hf_inputs(kind)
        note = {"token_ids": "2 layers of width 128", "image": "small config, 64x64 image",
                "signal": "small config, a 4000-sample waveform"}[inputs[0].kind]
        head = re.search(r"For[A-Z]", _HF[kind][1]) is not None  # BertForSequenceClassification
        output = _HF_MORE_OUTPUT.get(kind, "logits" if head else "last_hidden_state")
        rank = 35 if kind in _HF_MORE else 33
        out.append(ModelSpec(kind, _HF_FAMILY[kind], rank, _hf(kind), inputs, (output,), note))
    return sorted(out, key=lambda s: (s.rank, s.name))


MODELS: dict[str, ModelSpec] = {s.name: s for s in _specs()}
