"""Tiny random-weight MLX model folders whose caches cannot always be trimmed.

mlx-lm builds a model from ``config.json`` alone (``mlx_lm.models.<type>.Model``
of ``ModelArgs.from_dict``), so a folder of a few hundred kilobytes of random
weights is a real model of that architecture to mlx-lm, with the caches its
``make_cache`` makes:

* ``lfm2`` (Liquid's hybrid): short-convolution layers, each an
  ``ArraysCache`` (a recurrent state that cannot be cut back), between
  attention layers (``KVCache``);
* ``gemma3_text``: sliding-window layers (a ``RotatingKVCache`` of
  ``sliding_window`` tokens, trimmable only until it first wraps) between
  global ones (``KVCache``).

The tokenizer files (and the chat template) are SmolLM2's, copied from the
converted folder, so prompts render and tokenize as for the real model; the
answers are random tokens, which is all a test of the prompt cache needs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

LAYERS = 4


def _config(kind: str, base: dict[str, Any]) -> dict[str, Any]:
    common = {
        "vocab_size": base["vocab_size"],
        "hidden_size": 64,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "bos_token_id": base.get("bos_token_id"),
        "eos_token_id": base.get("eos_token_id"),
        "tie_word_embeddings": True,
    }
    if kind == "lfm2":
        return {
            **common,
            "model_type": "lfm2",
            "norm_eps": 1e-5,
            "conv_bias": False,
            "conv_L_cache": 3,
            "block_dim": 64,
            "block_ff_dim": 128,
            "block_multiple_of": 16,
            "block_ffn_dim_multiplier": 1.0,
            "block_auto_adjust_ff_dim": False,
            "layer_types": ["conv", "full_attention", "conv", "full_attention"],
        }
    if kind == "gemma3_text":
        return {
            **common,
            "model_type": "gemma3_text",
            "head_dim": 32,
            "intermediate_size": 128,
            "sliding_window": 32,  # layers 0 and 2 keep the last 32 tokens
            "sliding_window_pattern": 2,
            "rms_norm_eps": 1e-6,
            "query_pre_attn_scalar": 32,
        }
    raise ValueError(kind)


def build_tiny(kind: str, tokenizer_dir: Path, out: Path) -> Path:
    """Write a random-weight ``kind`` model (``lfm2`` or ``gemma3_text``) into ``out``."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    out.mkdir(parents=True, exist_ok=True)
    config = _config(kind, json.loads((tokenizer_dir / "config.json").read_text()))
    module = importlib.import_module(f"mlx_lm.models.{kind}")
    mx.random.seed(0)
    model = module.Model(module.ModelArgs.from_dict(config))
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out
