"""Tiny random-weight GGUF language models, for tests.

:func:`write_tiny_gguf` writes a model of a few hundred KiB that llama.cpp
loads in well under a second: a decoder of ``n_layer`` blocks of width
``n_embd`` with random weights (numpy, seeded), a byte-level BPE vocabulary
(the 256 byte tokens of GPT-2's byte-to-unicode table, so any text can be
tokenized and generated) plus the caller's special tokens as ``CONTROL``
tokens (a family's ``<|im_end|>``, ``<tool_call>``...), and a chat template.
Its answers are noise, but everything around the weights is real: the
loader, the vocabulary, special-token tokenizing and detokenizing, the chat
template, and grammar-constrained sampling (under a grammar a random model
writes exactly what the grammar allows).

Architectures: :data:`ARCHS` maps a llama.cpp architecture name to what
it adds to the plain ``llama`` layout (keys, tensors); ``llama``, ``qwen2``,
``qwen3`` and ``granite`` are there. Another architecture is one more entry:
the metadata keys and tensor names are llama.cpp's (``src/llama-arch.cpp``,
the loader in ``src/llama-model.cpp``; gguf-py's ``constants.py`` names them
too). Needs the ``gguf`` package (llama.cpp's GGUF writer,
``missive-llamacpp[test]``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["TinyModel", "ARCHS", "write_tiny_gguf", "byte_tokens"]

#: Token types of ``tokenizer.ggml.token_type`` (llama.cpp ``llama_token_type``).
NORMAL, CONTROL = 1, 3


@dataclass(frozen=True)
class TinyModel:
    """Dimensions of a tiny model (small enough to load in milliseconds)."""

    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_layer: int = 2
    context_length: int = 4096
    seed: int = 0


@dataclass(frozen=True)
class Arch:
    """What an architecture adds to the ``llama`` layout.

    Attributes:
        keys: more metadata, ``{key without the arch prefix: value}`` (floats
            written as float32, ints as uint32).
        layer_tensors: more tensors of each block, ``{name: shape-function}``
            taking the model's dimensions (numpy shape: rows = output size).
        qkv_bias: the attention projections have biases (``qwen2``).
    """

    keys: dict[str, Any] = field(default_factory=dict)
    layer_tensors: dict[str, Callable[[TinyModel], tuple[int, ...]]] = field(default_factory=dict)
    qkv_bias: bool = False


def _head_dim(m: TinyModel) -> int:
    return m.n_embd // m.n_head


ARCHS: dict[str, Arch] = {
    "llama": Arch(),
    "qwen2": Arch(qkv_bias=True),
    "qwen3": Arch(layer_tensors={"attn_q_norm": lambda m: (_head_dim(m),), "attn_k_norm": lambda m: (_head_dim(m),)}),
    "granite": Arch(
        keys={"attention.scale": 0.25, "embedding_scale": 1.0, "residual_scale": 1.0, "logit_scale": 1.0},
    ),
}


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: token ``i`` is the character standing for byte ``i``."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tiny_gguf(
    path: pathlib.Path,
    *,
    arch: str = "llama",
    chat_template: str,
    special_tokens: Sequence[str] = (),
    eos: str | None = None,
    bos: str | None = None,
    model: TinyModel = TinyModel(),
    name: str = "tiny",
) -> pathlib.Path:
    """Write a tiny random-weight model to ``path`` and return it.

    Args:
        arch: a key of :data:`ARCHS` (llama.cpp's ``general.architecture``).
        chat_template: ``tokenizer.chat_template``.
        special_tokens: texts added as ``CONTROL`` tokens after the byte tokens.
        eos, bos: which of them ends generation / starts the prompt (default:
            the first special token is EOS; no BOS is added to prompts).
    """
    import gguf  # llama.cpp's GGUF writer (PyPI: gguf)

    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    spec = ARCHS[arch]
    m = model
    rng = np.random.default_rng(m.seed)
    tokens = byte_tokens()
    # A merge rule or two: llama.cpp's BPE loader needs the key; its result must be a token.
    merges = [f"{tokens[ord('a')]} {tokens[ord('b')]}"]
    tokens.append(tokens[ord("a")] + tokens[ord("b")])
    types = [NORMAL] * len(tokens)
    specials = [t for t in special_tokens if t not in tokens]
    tokens += specials
    types += [CONTROL] * len(specials)
    if eos is None and not specials:
        raise ValueError("an EOS token is needed: give special_tokens")
    eos_id = tokens.index(eos if eos is not None else specials[0])

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(m.context_length)
    writer.add_embedding_length(m.n_embd)
    writer.add_block_count(m.n_layer)
    writer.add_feed_forward_length(m.n_ff)
    writer.add_head_count(m.n_head)
    writer.add_head_count_kv(m.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(_head_dim(m))
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(0)  # all F32
    for key, value in spec.keys.items():
        if isinstance(value, float):
            writer.add_float32(f"{arch}.{key}", value)
        else:
            writer.add_uint32(f"{arch}.{key}", int(value))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(eos_id)
    if bos is not None:
        writer.add_bos_token_id(tokens.index(bos))
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    hd = _head_dim(m)
    n_vocab = len(tokens)
    writer.add_tensor("token_embd.weight", weight(n_vocab, m.n_embd))
    writer.add_tensor("output_norm.weight", np.ones(m.n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, m.n_embd))
    for i in range(m.n_layer):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(m.n_embd, dtype=np.float32))
        writer.add_tensor(f"{blk}.attn_q.weight", weight(m.n_head * hd, m.n_embd))
        writer.add_tensor(f"{blk}.attn_k.weight", weight(m.n_head_kv * hd, m.n_embd))
        writer.add_tensor(f"{blk}.attn_v.weight", weight(m.n_head_kv * hd, m.n_embd))
        if spec.qkv_bias:
            writer.add_tensor(f"{blk}.attn_q.bias", np.zeros(m.n_head * hd, dtype=np.float32))
            writer.add_tensor(f"{blk}.attn_k.bias", np.zeros(m.n_head_kv * hd, dtype=np.float32))
            writer.add_tensor(f"{blk}.attn_v.bias", np.zeros(m.n_head_kv * hd, dtype=np.float32))
        writer.add_tensor(f"{blk}.attn_output.weight", weight(m.n_embd, m.n_head * hd))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(m.n_embd, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(m.n_ff, m.n_embd))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(m.n_ff, m.n_embd))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(m.n_embd, m.n_ff))
        for tensor, shape in spec.layer_tensors.items():
            writer.add_tensor(f"{blk}.{tensor}.weight", np.ones(shape(m), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
