"""The llama.cpp architectures :mod:`missive_llamacpp.testing_gguf` writes.

Per architecture (llama.cpp's ``general.architecture``), an :class:`Arch`:
its metadata keys and the tensors of each block, as llama.cpp's loader of
that architecture reads them (``load_arch_hparams``/``load_arch_tensors`` in
llama.cpp's ``src/models/<arch>.cpp``, which the build of llama-cpp-python
0.3.36 holds; key and tensor names from gguf-py's ``constants.py``), built
of the blocks of :mod:`missive_llamacpp.testing_blocks`. Tensors not named
here are the ones every architecture shares: ``token_embd``,
``output_norm``, ``output``.

Every model is tiny (a few hundred KiB to 1.3 MiB at the default
:class:`TinyModel`): two to four blocks of width 64, four experts where the
architecture has them, so it loads in well under a second. Each entry names
the family models it stands for; where llama.cpp's loader sets a minimum
(Llama 4's four blocks, the hybrids' kinds of block), the entry says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .testing_blocks import (
    Q_LORA,
    SIGMOID,
    Shapes,
    TinyModel,
    attention,
    delta_net_keys,
    expert_keys,
    experts,
    ffn,
    gated_delta_net,
    mamba2,
    mla,
    mla_keys,
    ssm_keys,
)

__all__ = ["TinyModel", "Arch", "ARCHS", "Shapes"]


@dataclass(frozen=True)
class Arch:
    """What an architecture's GGUF holds beyond the shared tensors.

    Attributes:
        block: the tensors of block ``i``: ``{name: numpy shape}`` (rows =
            output size, the reverse of llama.cpp's ``{ne0, ne1...}``).
        keys: metadata beyond the common ones (``block_count``,
            ``attention.head_count``...; a key given here replaces the
            common one), ``{key without the arch prefix: value}``: floats
            are written as float32, ints as uint32, bools as bools, lists as
            arrays.
        tensors: more tensors outside the blocks (``rope_freqs.weight``).
        n_layer: blocks, where the architecture needs more than the
            model's (a hybrid's three kinds of layer); 0: the model's.
    """

    block: Callable[[TinyModel, int], Shapes]
    keys: Callable[[TinyModel], dict[str, Any]] = field(default=lambda m: {})
    tensors: Callable[[TinyModel], Shapes] = field(default=lambda m: {})
    n_layer: int = 0


def _deepseek2(m: TinyModel, i: int) -> Shapes:
    # Block 0 dense (``leading_dense_block_count``), the others routed + one shared expert.
    mlp = ffn(m) if i == 0 else experts(m, probs_bias=True, shared=1)
    return mla(m) | mlp


# DeepSeek-V3.2's lightning indexer (sparse attention's key selection), tiny:
# one head of 64 (DeepSeek-V3.2: 64 of 128). At 32 wide, llama.cpp's graph
# fails a matmul shape check in the Hadamard rotation of the indexer keys.
_INDEXER_HEADS, _INDEXER_DIM = 1, 64


def _deepseek32(m: TinyModel, i: int) -> Shapes:
    return _deepseek2(m, i) | {
        "indexer.k_norm.weight": (_INDEXER_DIM,),
        "indexer.k_norm.bias": (_INDEXER_DIM,),
        "indexer.proj.weight": (_INDEXER_HEADS, m.n_embd),
        "indexer.attn_k.weight": (_INDEXER_DIM, m.n_embd),
        "indexer.attn_q_b.weight": (_INDEXER_HEADS * _INDEXER_DIM, Q_LORA),
    }


def _deepseek_keys(m: TinyModel) -> dict[str, Any]:
    """DeepSeek-V3's: one shared expert, a dense first block, sigmoid routing."""
    return mla_keys(m) | expert_keys(
        m,
        expert_shared_count=1,
        leading_dense_block_count=1,
        expert_gating_func=SIGMOID,
        expert_weights_norm=True,
        expert_weights_scale=2.5,
    )


def _nemotron_h(m: TinyModel, i: int) -> Shapes:
    """Nemotron-H's three kinds of block: Mamba-2, attention, a squared-ReLU MLP."""
    if i == 0:
        return mamba2(m)
    if i == 1:
        return attention(m)
    return {
        "attn_norm.weight": (m.n_embd,),  # every block's one norm
        "ffn_up.weight": (m.n_ff, m.n_embd),
        "ffn_down.weight": (m.n_embd, m.n_ff),
    }


def _nemotron_h_moe(m: TinyModel, i: int) -> Shapes:
    """Nemotron 3 Nano: Nemotron-H with the MLP blocks turned into squared-ReLU experts."""
    if i < 2:
        return _nemotron_h(m, i)
    return {
        "attn_norm.weight": (m.n_embd,),
        "ffn_gate_inp.weight": (m.n_expert, m.n_embd),
        "exp_probs_b.bias": (m.n_expert,),
        "ffn_up_exps.weight": (m.n_expert, m.n_ff_exp, m.n_embd),
        "ffn_down_exps.weight": (m.n_expert, m.n_embd, m.n_ff_exp),
        "ffn_up_shexp.weight": (m.n_ff_exp, m.n_embd),
        "ffn_down_shexp.weight": (m.n_embd, m.n_ff_exp),
    }


def _granitehybrid(m: TinyModel, i: int) -> Shapes:
    """Granite 4.0-H: Mamba-2 or attention, then experts and a shared expert (H-Tiny/Small)."""
    mixer = mamba2(m) if i == 0 else attention(m)
    return mixer | experts(m, n_ff=m.n_ff, shared=1)


def _qwen35(m: TinyModel, i: int) -> Shapes:
    """Qwen3.5: gated DeltaNet blocks, every second one (here) gated full attention."""
    norms: Shapes = {"attn_norm.weight": (m.n_embd,), "post_attention_norm.weight": (m.n_embd,)}
    mlp = {name: shape for name, shape in ffn(m).items() if not name.startswith("ffn_norm")}
    if i % 2 == 0:
        return norms | mlp | gated_delta_net(m)
    gated = attention(m, qk_norm="head")
    gated["attn_q.weight"] = (2 * m.n_head * m.head_dim, m.n_embd)  # the query and its output gate
    return norms | mlp | gated


def _qwen35_keys(m: TinyModel) -> dict[str, Any]:
    return delta_net_keys() | {
        "full_attention_interval": 2,
        # M-RoPE's sections (text, height, width...): the head's pairs of dimensions
        "rope.dimension_sections": [m.head_dim // 4, m.head_dim // 8, m.head_dim // 8, 0],
    }


def _gemma4(m: TinyModel, i: int) -> Shapes:
    """Gemma 4 (the dense 31B's layout, without per-layer embeddings)."""
    return (
        attention(m, qk_norm="head")
        | ffn(m)
        | {
            "post_attention_norm.weight": (m.n_embd,),
            "post_ffw_norm.weight": (m.n_embd,),
        }
    )


def _glm4moe(m: TinyModel, i: int) -> Shapes:
    # The FFN follows a ``post_attention_norm``: dense in block 0, experts after.
    if i == 0:
        mlp = ffn(m, norm="post_attention_norm")
    else:
        mlp = experts(m, probs_bias=True, shared=1, norm="post_attention_norm")
    return attention(m, bias=True, qk_norm="head") | mlp


def _nemotron_keys(m: TinyModel) -> dict[str, Any]:
    # Blocks: Mamba-2, attention, MLP or experts; layer_norm_epsilon is read besides the RMS one.
    return ssm_keys([0, m.n_head_kv, 0]) | {
        "feed_forward_length": [0, 0, m.n_ff],  # 0: no MLP in that block
        "attention.layer_norm_epsilon": 1e-5,
    }


#: Granite's scaling of embeddings, attention, residuals and logits (neutral here).
_GRANITE_SCALES = {"attention.scale": 0.25, "embedding_scale": 1.0, "residual_scale": 1.0, "logit_scale": 1.0}


def _llama4(m: TinyModel, i: int) -> Shapes:
    # Every block routed (``interleave_moe_layer_step`` 1) with one shared expert.
    return attention(m) | experts(m, shared=1)


ARCHS: dict[str, Arch] = {
    "llama": Arch(block=lambda m, i: attention(m) | ffn(m)),
    # Ministral 3, Devstral 2 (src/models/mistral3.cpp): the llama layout.
    "mistral3": Arch(block=lambda m, i: attention(m) | ffn(m)),
    "qwen2": Arch(block=lambda m, i: attention(m, bias=True) | ffn(m)),
    "qwen3": Arch(block=lambda m, i: attention(m, qk_norm="head") | ffn(m)),
    "granite": Arch(block=lambda m, i: attention(m) | ffn(m), keys=lambda m: _GRANITE_SCALES),
    # Qwen3-Coder-30B-A3B / 480B-A35B (llama.cpp src/models/qwen3moe.cpp).
    "qwen3moe": Arch(
        block=lambda m, i: attention(m, qk_norm="head") | experts(m),
        keys=lambda m: expert_keys(m),
    ),
    # Qwen3.5/3.6 dense (src/models/qwen35.cpp): a hybrid of gated DeltaNet and attention.
    "qwen35": Arch(block=_qwen35, keys=_qwen35_keys),
    # Seed-OSS-36B (src/models/seed-oss.cpp): QKV biases, a post-attention norm before the FFN.
    "seed_oss": Arch(block=lambda m, i: attention(m, bias=True) | ffn(m, norm="post_attention_norm")),
    # MiniMax-M2 (src/models/minimax-m2.cpp): Q/K norms over all heads, sigmoid routing with a bias.
    "minimax-m2": Arch(
        block=lambda m, i: attention(m, qk_norm="all") | experts(m, n_ff=m.n_ff, probs_bias=True),
        keys=lambda m: expert_keys(m, expert_feed_forward_length=m.n_ff, expert_gating_func=SIGMOID),
    ),
    # GLM-4.5/4.6/4.7 (src/models/glm4-moe.cpp): QKV biases, a dense first block, then
    # sigmoid-routed experts with a bias and a shared expert.
    "glm4moe": Arch(
        block=_glm4moe,
        keys=lambda m: expert_keys(
            m,
            expert_shared_count=1,
            leading_dense_block_count=1,
            expert_gating_func=SIGMOID,
            expert_weights_norm=True,
        ),
    ),
    # DeepSeek-V3/V3.1, Kimi-K2 (src/models/deepseek2.cpp).
    "deepseek2": Arch(block=_deepseek2, keys=_deepseek_keys),
    # DeepSeek-V3.2 (src/models/deepseek32.cpp): DeepSeek-V3 plus the lightning indexer.
    "deepseek32": Arch(
        block=_deepseek32,
        keys=lambda m: (
            _deepseek_keys(m)
            | {
                "attention.indexer.head_count": _INDEXER_HEADS,
                "attention.indexer.key_length": _INDEXER_DIM,
                "attention.indexer.top_k": 2048,
            }
        ),
    ),
    # Llama 4 Scout/Maverick (src/models/llama4.cpp). Four blocks: every fourth skips
    # RoPE (llama.cpp's fixed n_no_rope_layer_step), and without such a block the
    # graph's attention-temperature input has no buffer (llama.cpp aborts).
    "llama4": Arch(
        block=_llama4,
        n_layer=4,
        keys=lambda m: expert_keys(m, interleave_moe_layer_step=1),
    ),
    # Nemotron Nano 9B v2 (src/models/nemotron-h.cpp): a layer's kind from its
    # head_count_kv (0: no attention) and feed_forward_length (0: no MLP).
    "nemotron_h": Arch(block=_nemotron_h, n_layer=3, keys=_nemotron_keys),
    # Nemotron 3 Nano 30B-A3B (the same loader, src/models/nemotron-h.cpp).
    "nemotron_h_moe": Arch(
        block=_nemotron_h_moe,
        n_layer=3,
        keys=lambda m: _nemotron_keys(m) | expert_keys(m, expert_shared_feed_forward_length=m.n_ff_exp),
    ),
    # Granite 4.0-H (src/models/granite-hybrid.cpp).
    "granitehybrid": Arch(
        block=_granitehybrid,
        keys=lambda m: (
            ssm_keys([0, m.n_head_kv])
            | _GRANITE_SCALES
            | expert_keys(m, expert_feed_forward_length=m.n_ff, expert_shared_feed_forward_length=m.n_ff)
        ),
    ),
    # Gemma 4 (src/models/gemma4.cpp): sliding-window layers, then a global one.
    "gemma4": Arch(
        block=_gemma4,
        keys=lambda m: {
            "attention.sliding_window": 512,
            "attention.sliding_window_pattern": [True] * (m.n_layer - 1) + [False],
            "attention.key_length": m.head_dim,
            "attention.value_length": m.head_dim,
            "attention.key_length_swa": m.head_dim,
            "attention.value_length_swa": m.head_dim,
            "embedding_length_per_layer_input": 0,
        },
        tensors=lambda m: {"rope_freqs.weight": (m.head_dim // 2,)},
    ),
}
