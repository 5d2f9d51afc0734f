"""Tiny random-weight GGUF language models, for tests.

:func:`write_tiny_gguf` writes a model of at most a MiB or so that llama.cpp
loads in well under a second: a decoder of ``n_layer`` blocks (more where
the architecture needs them) of width ``n_embd`` with random weights
(numpy, seeded), a byte-level BPE vocabulary (the 256 byte tokens of
GPT-2's byte-to-unicode table, so any text can be tokenized and generated)
plus the caller's special tokens as ``CONTROL``
tokens (a family's ``<|im_end|>``, ``<tool_call>``...), and a chat template.
Its answers are noise, but everything around the weights is real: the
loader, the vocabulary, special-token tokenizing and detokenizing, the chat
template, and grammar-constrained sampling (under a grammar a random model
writes exactly what the grammar allows).

Architectures: :data:`ARCHS` (:mod:`missive_llamacpp.testing_archs`) maps
a llama.cpp architecture name to its keys and the tensors of its blocks:
``llama``, ``mistral3``, ``qwen2``, ``qwen3``, ``granite``, ``qwen3moe``,
``qwen35``, ``seed_oss``, ``minimax-m2``, ``glm4moe``, ``deepseek2``,
``deepseek32``, ``llama4``, ``nemotron_h``, ``nemotron_h_moe``,
``granitehybrid`` and ``gemma4`` (mixtures of experts, latent attention,
Mamba-2 and gated-DeltaNet hybrids, sliding windows). Another architecture
is one more entry there. Needs the ``gguf`` package (llama.cpp's GGUF
writer, ``missive-llamacpp[test]``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .testing_archs import ARCHS, TinyModel

__all__ = ["TinyModel", "ARCHS", "write_tiny_gguf", "byte_tokens"]

#: Token types of ``tokenizer.ggml.token_type`` (llama.cpp ``llama_token_type``).
NORMAL, CONTROL = 1, 3


def byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: token ``i`` is the character standing for byte ``i``."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
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
    model: TinyModel = TinyModel(),  # noqa: B008 - frozen, so one shared default is safe
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

    n_layer = spec.n_layer or m.n_layer
    keys: dict[str, Any] = {
        "context_length": m.context_length,
        "embedding_length": m.n_embd,
        "block_count": n_layer,
        "feed_forward_length": m.n_ff,
        "attention.head_count": m.n_head,
        "attention.head_count_kv": m.n_head_kv,
        "attention.layer_norm_rms_epsilon": 1e-5,
        "rope.dimension_count": m.head_dim,
        "rope.freq_base": 10000.0,
        "vocab_size": len(tokens),
    }
    keys |= spec.keys(m)

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_file_type(0)  # all F32
    for key, value in keys.items():
        _add_key(writer, f"{arch}.{key}", value)
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

    n_vocab = len(tokens)
    tensors = {
        "token_embd.weight": (n_vocab, m.n_embd),
        "output_norm.weight": (m.n_embd,),
        "output.weight": (n_vocab, m.n_embd),
        **spec.tensors(m),
    }
    for i in range(n_layer):
        tensors |= {f"blk.{i}.{name}": shape for name, shape in spec.block(m, i).items()}
    for name, shape in tensors.items():
        writer.add_tensor(name, _initial(name, shape, rng))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_key(writer: Any, key: str, value: Any) -> None:
    """A metadata value in the type llama.cpp's converter writes it in."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    else:
        writer.add_array(key, list(value))


def _initial(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A tensor's values: norms 1, biases 0, Mamba's decay A negative, weights small noise."""
    if name.endswith(".bias"):
        return np.zeros(shape, dtype=np.float32)
    base = name.removesuffix(".weight")
    if "norm" in base or base.endswith(("ssm_d", "rope_freqs")):
        return np.ones(shape, dtype=np.float32)
    if base.endswith("ssm_a"):
        return -np.ones(shape, dtype=np.float32)  # A = -exp(A_log), as llama.cpp's converter stores it
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


def write_tiny_lora(
    path: pathlib.Path,
    base: pathlib.Path,
    *,
    targets: Sequence[str] = ("output.weight",),
    rank: int = 4,
    alpha: float = 4.0,
    magnitude: float = 4.0,
    seed: int = 7,
) -> pathlib.Path:
    """Write a random LoRA adapter for the model at ``base`` and return it.

    The format llama.cpp's ``llama_adapter_lora_init`` reads
    (``src/llama-adapter.cpp``): ``general.type = "adapter"``,
    ``adapter.type = "lora"``, ``adapter.lora.alpha``, the base's
    ``general.architecture``, and for each adapted weight of ggml shape
    ``[n_in, n_out]`` a pair ``NAME.lora_a`` ``[n_in, rank]`` and
    ``NAME.lora_b`` ``[rank, n_out]`` (numpy shapes reversed). ``magnitude``
    scales B: large enough that the adapter, not the tiny model's own
    weights, decides the greedy output.
    """
    import gguf

    reader = gguf.GGUFReader(base)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml order: [n_in, n_out]
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for name in targets:
        n_in, n_out = shapes[name][:2]
        writer.add_tensor(f"{name}.lora_a", rng.standard_normal((rank, n_in)).astype(np.float32))
        writer.add_tensor(
            f"{name}.lora_b", (magnitude * rng.standard_normal((n_out, rank))).astype(np.float32)
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
