"""Tiny random-weight vision model folders for mlx-vlm (see :mod:`missive_mlx.vision`).

mlx-vlm builds a model from ``config.json`` alone (``mlx_vlm.utils.
get_model_and_args``: ``mlx_vlm.models.<model_type>.Model`` of its
``ModelConfig``, ``VisionConfig`` and ``TextConfig``), so a few megabytes of
random weights are a real model of that family to mlx-vlm: its vision tower,
its projector, its language model (Qwen's M-RoPE attention...), and its
processor, read from ``preprocessor_config.json``.

The tokenizer files (and the chat template) are SmolLM2's, copied from the
converted folder, with the family's image tokens added as special tokens
(ids after SmolLM2's 49152): Qwen2-VL's ``<|vision_start|>``,
``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>``; Gemma 3's
``<start_of_image>``, ``<end_of_image>``, ``<image_soft_token>`` (named in
``tokenizer_config.json`` as ``boi_token`` / ``eoi_token`` /
``image_token``, which transformers' ``Gemma3Processor`` reads). The answers
are random tokens: the tests check the plumbing (placement, counts, caching).

``preprocessor_config.json`` holds the family's processor settings, sized
down: Qwen2.5-VL's (patch 14, merge 2, temporal patch 2, CLIP mean and std)
with ``max_pixels`` 28 * 28 * 64, so an image takes at most 64 tokens;
Gemma 3's (``Gemma3ImageProcessor``, mean and std 0.5) resizing to the
tower's 56 x 56 pixels: 16 SigLIP patches of 14, pooled 2 x 2 into
:data:`GEMMA_TOKENS_PER_IMAGE` soft tokens (``processor_config.json``'s
``image_seq_length``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Largest image a tiny Qwen model reads: 64 tokens of 28 x 28 pixels.
QWEN_MAX_PIXELS = 28 * 28 * 64

#: Largest image a tiny Qwen3-VL reads: 64 tokens of 32 x 32 pixels.
QWEN3_MAX_PIXELS = 32 * 32 * 64

#: Longest image side a tiny Mistral 3 reads: 8 x 8 tokens of 16 x 16 pixels.
MISTRAL_MAX_EDGE = 128

#: Per kind of the Mistral 3 layout: the longest image side and the pixels
#: a token (Mistral 3: patch 8 x merge 2; Pixtral: patch 8, no merge).
MISTRAL_GEOMETRY = {"mistral3": (MISTRAL_MAX_EDGE, 16), "pixtral": (64, 8)}

#: Gemma 3's image tokens: ``mm_tokens_per_image`` soft tokens an image.
GEMMA_TOKENS_PER_IMAGE = 4

_TOKENS = {
    "qwen2_5_vl": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
    "gemma3": ["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
    "qwen3_vl": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
    "qwen3_vl_moe": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
    "mistral3": ["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
    "pixtral": ["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
}

#: Gemma 3's tokenizer_config.json names its image tokens (the processor reads them).
_TOKENIZER_EXTRA = {
    "gemma3": {
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
}


def _config(kind: str, ids: dict[str, int], base: dict[str, Any], vocab: int) -> dict[str, Any]:
    text = {
        "vocab_size": vocab,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    if kind == "qwen2_5_vl":
        return {
            **text,
            "model_type": "qwen2_5_vl",
            "rope_theta": 1e6,
            # head_dim 32: 16 rotary frequencies split among time, height, width
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
            "bos_token_id": base.get("bos_token_id"),
            "eos_token_id": base.get("eos_token_id"),
            "image_token_id": ids["<|image_pad|>"],
            "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"],
            "vision_end_token_id": ids["<|vision_end|>"],
            "vision_config": {
                "model_type": "qwen2_5_vl",
                "depth": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "out_hidden_size": 64,
                "num_heads": 2,
                "patch_size": 14,
                "spatial_patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "window_size": 112,
                "fullatt_block_indexes": [1],
                "in_channels": 3,
            },
        }
    if kind == "qwen3_vl_moe":  # Qwen3-VL's with 4 experts (2 a token) in each text layer
        config = _config("qwen3_vl", ids, base, vocab)
        moe = {"num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": []}
        config["text_config"].update(model_type="qwen3_vl_moe", moe_intermediate_size=32, **moe)
        config["vision_config"]["model_type"] = "qwen3_vl_moe"
        return {**config, "model_type": "qwen3_vl_moe"}
    if kind == "qwen3_vl":
        return {
            "model_type": "qwen3_vl",
            "image_token_id": ids["<|image_pad|>"],
            "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"],
            "vision_end_token_id": ids["<|vision_end|>"],
            "vocab_size": vocab,
            "bos_token_id": base.get("bos_token_id"),
            "eos_token_id": base.get("eos_token_id"),
            "tie_word_embeddings": True,
            "text_config": {
                **text,
                "model_type": "qwen3_vl",
                "head_dim": 32,
                "rope_theta": 5e6,
                # 16 rotary frequencies split among time, height, width, interleaved
                "rope_scaling": {
                    "rope_type": "default",
                    "mrope_section": [4, 6, 6],
                    "mrope_interleaved": True,
                },
            },
            # patches of 16 pixels, 2 x 2 merged into a token; the outputs of
            # blocks 0 and 1 added to the text model's layers 0 and 1 (deepstack)
            "vision_config": {
                "model_type": "qwen3_vl",
                "depth": 3,
                "hidden_size": 32,
                "intermediate_size": 64,
                "out_hidden_size": 64,
                "num_heads": 2,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "num_position_embeddings": 64,
                "deepstack_visual_indexes": [0, 1],
                "in_channels": 3,
            },
        }
    if kind == "pixtral":  # Mistral 3's without the patch merger: a token a patch, a bias in the projector
        config = _config("mistral3", ids, base, vocab)
        for key in ("spatial_merge_size", "multimodal_projector_bias"):
            del config[key]
        config["vision_config"]["image_size"] = MISTRAL_GEOMETRY["pixtral"][0]
        return {**config, "model_type": "pixtral"}
    if kind == "mistral3":
        return {
            "model_type": "mistral3",
            "image_token_index": ids["[IMG]"],
            "spatial_merge_size": 2,
            "vision_feature_layer": -1,
            "multimodal_projector_bias": False,
            "vocab_size": vocab,
            "bos_token_id": base.get("bos_token_id"),
            "eos_token_id": base.get("eos_token_id"),
            "text_config": {**text, "model_type": "mistral", "head_dim": 32, "rope_theta": 1e6},
            # Pixtral: patches of 8 pixels, 2 x 2 merged into a token by the projector
            "vision_config": {
                "model_type": "pixtral",
                "num_hidden_layers": 2,
                "hidden_size": 32,
                "head_dim": 16,
                "intermediate_size": 64,
                "num_attention_heads": 2,
                "image_size": MISTRAL_MAX_EDGE,
                "patch_size": 8,
                "rope_theta": 10000.0,
            },
        }
    if kind == "gemma3":
        return {
            "model_type": "gemma3",
            "hidden_size": 64,  # mlx-vlm scales the image features by it (the text model's)
            "vocab_size": vocab,  # mlx-lm's text-only gemma3 reads it here
            "image_token_index": ids["<image_soft_token>"],
            "boi_token_index": ids["<start_of_image>"],
            "eoi_token_index": ids["<end_of_image>"],
            "mm_tokens_per_image": GEMMA_TOKENS_PER_IMAGE,
            "bos_token_id": base.get("bos_token_id"),
            "eos_token_id": base.get("eos_token_id"),
            "text_config": {
                **text,
                "model_type": "gemma3_text",
                "head_dim": 32,
                "query_pre_attn_scalar": 32,
                "sliding_window": 512,
                "sliding_window_pattern": 2,  # layer 0 sliding (RotatingKVCache), layer 1 global
                "mm_tokens_per_image": GEMMA_TOKENS_PER_IMAGE,
            },
            # SigLIP: 56 x 56 pixels in 16 patches of 14, pooled 2 x 2 into 4 soft tokens
            "vision_config": {
                "model_type": "siglip_vision_model",
                "num_hidden_layers": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_attention_heads": 2,
                "patch_size": 14,
                "image_size": 56,
                "layer_norm_eps": 1e-6,
            },
        }
    raise ValueError(kind)


def _preprocessor(kind: str) -> dict[str, Any]:
    if kind == "qwen2_5_vl":
        return {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "min_pixels": 56 * 56,
            "max_pixels": QWEN_MAX_PIXELS,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
        }
    if kind == "qwen3_vl_moe":
        return _preprocessor("qwen3_vl")
    if kind == "qwen3_vl":
        return {
            "image_processor_type": "Qwen2VLImageProcessorFast",
            "processor_class": "Qwen3VLProcessor",
            "patch_size": 16,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "size": {"shortest_edge": 64 * 64, "longest_edge": QWEN3_MAX_PIXELS},
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
        }
    if kind == "pixtral":
        return {
            **_preprocessor("mistral3"),
            "processor_class": "PixtralProcessor",
            "size": {"longest_edge": 64},
        }
    if kind == "mistral3":
        return {
            "image_processor_type": "PixtralImageProcessor",
            "processor_class": "Mistral3Processor",
            "patch_size": 8,
            "size": {"longest_edge": MISTRAL_MAX_EDGE},
            "resample": 3,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
        }
    if kind == "gemma3":
        return {
            "image_processor_type": "Gemma3ImageProcessor",
            "processor_class": "Gemma3Processor",
            "size": {"height": 56, "width": 56},
            "resample": 2,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": None,
            "do_pan_and_scan": None,
        }
    raise ValueError(kind)


def build_tiny_vision(kind: str, tokenizer_dir: Path, out: Path) -> Path:
    """Write a random-weight ``kind`` vision model (``qwen2_5_vl``, ``gemma3``,
    ``qwen3_vl``, ``qwen3_vl_moe``, ``mistral3``, ``pixtral``) into ``out``."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.utils import get_model_and_args
    from tokenizers import AddedToken, Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _TOKENS[kind]])
    tokenizer.save(str(out / "tokenizer.json"))
    tokenizer_config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    tokenizer_config.update(_TOKENIZER_EXTRA.get(kind, {}))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    ids = {t: tokenizer.token_to_id(t) for t in _TOKENS[kind]}
    base = json.loads((tokenizer_dir / "config.json").read_text())
    config = _config(kind, ids, base, tokenizer.get_vocab_size())
    module, _ = get_model_and_args(json.loads(json.dumps(config)))
    model_config = module.ModelConfig.from_dict(json.loads(json.dumps(config)))
    model_config.vision_config = module.VisionConfig.from_dict(config["vision_config"])
    model_config.text_config = module.TextConfig.from_dict(config.get("text_config") or config)
    mx.random.seed(0)
    model = module.Model(model_config)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor(kind), indent=2))
    if kind == "gemma3":
        processor = {"processor_class": "Gemma3Processor", "image_seq_length": GEMMA_TOKENS_PER_IMAGE}
        (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    if kind in ("mistral3", "pixtral"):
        processor = {
            "processor_class": "Mistral3Processor" if kind == "mistral3" else "PixtralProcessor",
            "patch_size": 8,
            "spatial_merge_size": 2 if kind == "mistral3" else 1,
        }
        (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    return out
