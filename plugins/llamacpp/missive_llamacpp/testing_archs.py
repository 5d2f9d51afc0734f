"""The llama.cpp architectures :mod:`missive_llamacpp.testing_gguf` writes.

Per architecture (llama.cpp's ``general.architecture``), an :class:`Arch`:
its metadata keys and the tensors of each block, as llama.cpp's loader of
that architecture reads them (``load_arch_hparams``/``load_arch_tensors`` in
llama.cpp's ``src/models/<arch>.cpp``, which the build of llama-cpp-python
0.3.36 holds; the key and tensor names are those of gguf-py's
``constants.py``). Tensors not named here are the ones every architecture
shares: ``token_embd``, ``output_norm``, ``output``.

Every model is tiny (a few hundred KiB at the default :class:`TinyModel`):
two or three blocks of width 64, four experts where the architecture has
them, so it loads in milliseconds. The parts an architecture is built of:

* attention: the plain ``attn_q/k/v/output``, with biases (``qwen2``,
  ``seed_oss``) or per-head RMS norms of Q and K (``qwen3``, ``glm4moe``;
  over all heads at once in ``minimax-m2``); DeepSeek's multi-head latent
  attention (``attn_q_a``/``attn_q_b`` through a low-rank query,
  ``attn_kv_a_mqa`` and the per-head ``attn_k_b``/``attn_v_b`` of the
  compressed KV);
* feed-forward: the SwiGLU ``ffn_gate/up/down``, or a mixture of experts
  (``ffn_gate_inp`` routing to the stacked ``ffn_{gate,up,down}_exps``),
  with shared experts (``*_shexp``), an expert-selection bias
  (``exp_probs_b``) and leading dense blocks where the family has them;
* Mamba-2 mixers (``ssm_in``, ``ssm_conv1d``, ``ssm_a``/``ssm_d``...)
  in the hybrids ``nemotron_h`` and ``granitehybrid``, whose per-layer
  ``attention.head_count_kv`` of 0 marks a recurrent layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TinyModel", "Arch", "ARCHS", "Shapes"]

#: Tensor name in a block (``attn_q.weight``; ``ssm_a`` has no suffix) -> numpy shape.
Shapes = dict[str, tuple[int, ...]]


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
    #: Experts of a mixture-of-experts block, and how many each token uses.
    n_expert: int = 4
    n_expert_used: int = 2
    #: Width of one expert's feed-forward (``expert_feed_forward_length``).
    n_ff_exp: int = 32

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


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


def _attention(m: TinyModel, *, bias: bool = False, qk_norm: str = "") -> Shapes:
    """``attn_q/k/v/output`` (llama.cpp ``create_tensor_qkv``).

    Args:
        bias: Q, K and V have biases (``qwen2``, ``seed_oss``).
        qk_norm: ``"head"``: RMS norms of one head's Q and K (``qwen3``);
            ``"all"``: of all heads' Q and K at once (``minimax-m2``).
    """
    q, kv = m.n_head * m.head_dim, m.n_head_kv * m.head_dim
    shapes: Shapes = {
        "attn_norm.weight": (m.n_embd,),
        "attn_q.weight": (q, m.n_embd),
        "attn_k.weight": (kv, m.n_embd),
        "attn_v.weight": (kv, m.n_embd),
        "attn_output.weight": (m.n_embd, q),
    }
    if bias:
        shapes |= {"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)}
    if qk_norm == "head":
        shapes |= {"attn_q_norm.weight": (m.head_dim,), "attn_k_norm.weight": (m.head_dim,)}
    elif qk_norm == "all":
        shapes |= {"attn_q_norm.weight": (q,), "attn_k_norm.weight": (kv,)}
    return shapes


def _ffn(m: TinyModel, norm: str = "ffn_norm") -> Shapes:
    """The SwiGLU feed-forward, after the ``norm`` llama.cpp names it by."""
    return {
        f"{norm}.weight": (m.n_embd,),
        "ffn_gate.weight": (m.n_ff, m.n_embd),
        "ffn_up.weight": (m.n_ff, m.n_embd),
        "ffn_down.weight": (m.n_embd, m.n_ff),
    }


def _experts(m: TinyModel, *, n_ff: int = 0, probs_bias: bool = False, shared: int = 0, norm: str = "ffn_norm") -> Shapes:
    """A mixture-of-experts feed-forward.

    Args:
        n_ff: one expert's width (default: ``m.n_ff_exp``).
        probs_bias: the routing's ``exp_probs_b`` (DeepSeek-V3's
            ``e_score_correction_bias``).
        shared: shared experts, run for every token beside the routed ones
            (one ``*_shexp`` of ``shared`` experts' width).
    """
    n_ff = n_ff or m.n_ff_exp
    shapes: Shapes = {
        f"{norm}.weight": (m.n_embd,),
        "ffn_gate_inp.weight": (m.n_expert, m.n_embd),
        "ffn_gate_exps.weight": (m.n_expert, n_ff, m.n_embd),
        "ffn_up_exps.weight": (m.n_expert, n_ff, m.n_embd),
        "ffn_down_exps.weight": (m.n_expert, m.n_embd, n_ff),
    }
    if probs_bias:
        shapes["exp_probs_b.bias"] = (m.n_expert,)
    if shared:
        width = n_ff * shared
        shapes |= {
            "ffn_gate_shexp.weight": (width, m.n_embd),
            "ffn_up_shexp.weight": (width, m.n_embd),
            "ffn_down_shexp.weight": (m.n_embd, width),
        }
    return shapes


def _expert_keys(m: TinyModel, **more: Any) -> dict[str, Any]:
    return {
        "expert_count": m.n_expert,
        "expert_used_count": m.n_expert_used,
        "expert_feed_forward_length": m.n_ff_exp,
        **more,
    }


#: llama.cpp's ``llama_expert_gating_func_type``: softmax 1, sigmoid 2.
_SOFTMAX, _SIGMOID = 1, 2

# DeepSeek's multi-head latent attention, tiny: a query through a rank-32
# projection, a KV compressed to 32 numbers plus a 16-wide shared RoPE key;
# per head, 16 dimensions without position and 16 with (key 32, value 32).
_Q_LORA, _KV_LORA, _ROPE, _NOPE, _V = 32, 32, 16, 16, 32


def _mla(m: TinyModel) -> Shapes:
    """DeepSeek-V2/V3's attention as GGUFs converted since llama.cpp split ``attn_kv_b``."""
    return {
        "attn_norm.weight": (m.n_embd,),
        "attn_q_a_norm.weight": (_Q_LORA,),
        "attn_q_a.weight": (_Q_LORA, m.n_embd),
        "attn_q_b.weight": (m.n_head * (_NOPE + _ROPE), _Q_LORA),
        "attn_kv_a_norm.weight": (_KV_LORA,),
        "attn_kv_a_mqa.weight": (_KV_LORA + _ROPE, m.n_embd),
        "attn_k_b.weight": (m.n_head, _KV_LORA, _NOPE),
        "attn_v_b.weight": (m.n_head, _V, _KV_LORA),
        "attn_output.weight": (m.n_embd, m.n_head * _V),
    }


def _mla_keys(m: TinyModel) -> dict[str, Any]:
    # The MLA cache holds one compressed "head": key = latent + RoPE part, value = latent.
    return {
        "attention.head_count_kv": 1,
        "attention.q_lora_rank": _Q_LORA,
        "attention.kv_lora_rank": _KV_LORA,
        "attention.key_length": _KV_LORA + _ROPE,
        "attention.value_length": _KV_LORA,
        "attention.key_length_mla": _NOPE + _ROPE,
        "attention.value_length_mla": _V,
        "rope.dimension_count": _ROPE,
    }


def _deepseek2(m: TinyModel, i: int) -> Shapes:
    # Block 0 dense (``leading_dense_block_count``), the others routed + one shared expert.
    ffn = _ffn(m) if i == 0 else _experts(m, probs_bias=True, shared=1)
    return _mla(m) | ffn


# DeepSeek-V3.2's lightning indexer (sparse attention's key selection): 2 heads
# of 128, DeepSeek-V3.2's own index_head_dim (at 32, the graph's Hadamard
# rotation of the indexer keys fails llama.cpp's matmul shape check).
_INDEXER_HEADS, _INDEXER_DIM = 2, 128


def _deepseek32(m: TinyModel, i: int) -> Shapes:
    return _deepseek2(m, i) | {
        "indexer.k_norm.weight": (_INDEXER_DIM,),
        "indexer.k_norm.bias": (_INDEXER_DIM,),
        "indexer.proj.weight": (_INDEXER_HEADS, m.n_embd),
        "indexer.attn_k.weight": (_INDEXER_DIM, m.n_embd),
        "indexer.attn_q_b.weight": (_INDEXER_HEADS * _INDEXER_DIM, _Q_LORA),
    }


def _deepseek_keys(m: TinyModel) -> dict[str, Any]:
    """DeepSeek-V3's: one shared expert, a dense first block, sigmoid routing."""
    return _mla_keys(m) | _expert_keys(
        m, expert_shared_count=1, leading_dense_block_count=1, expert_gating_func=_SIGMOID,
        expert_weights_norm=True, expert_weights_scale=2.5,
    )


# Mamba-2 mixers of the hybrids, tiny: inner width 2 x 64 (granitehybrid
# supports only that expansion), 8 heads of 16, a state of 16, one group.
_SSM_INNER, _SSM_HEADS, _SSM_STATE, _SSM_CONV = 128, 8, 16, 4


def _mamba2(m: TinyModel) -> Shapes:
    conv = _SSM_INNER + 2 * _SSM_STATE
    return {
        "attn_norm.weight": (m.n_embd,),
        "ssm_in.weight": (2 * _SSM_INNER + 2 * _SSM_STATE + _SSM_HEADS, m.n_embd),
        "ssm_conv1d.weight": (conv, _SSM_CONV),
        "ssm_conv1d.bias": (conv,),
        "ssm_dt.bias": (_SSM_HEADS,),
        "ssm_a": (_SSM_HEADS, 1),
        "ssm_d": (_SSM_HEADS, 1),
        "ssm_norm.weight": (1, _SSM_INNER),
        "ssm_out.weight": (m.n_embd, _SSM_INNER),
    }


def _ssm_keys(head_count_kv: list[int]) -> dict[str, Any]:
    return {
        "attention.head_count_kv": head_count_kv,  # 0: a Mamba-2 layer
        "ssm.conv_kernel": _SSM_CONV,
        "ssm.inner_size": _SSM_INNER,
        "ssm.state_size": _SSM_STATE,
        "ssm.time_step_rank": _SSM_HEADS,
        "ssm.group_count": 1,
    }


def _nemotron_h(m: TinyModel, i: int) -> Shapes:
    """Nemotron-H's three kinds of block: Mamba-2, attention, a squared-ReLU MLP."""
    if i == 0:
        return _mamba2(m)
    if i == 1:
        return _attention(m)
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
    mixer = _mamba2(m) if i == 0 else _attention(m)
    return mixer | _experts(m, n_ff=m.n_ff, shared=1)


# Qwen3.5's gated DeltaNet (linear attention), tiny: 2 key heads and 4 value
# heads of 16 (``ssm.group_count``, ``ssm.time_step_rank``, ``ssm.state_size``).
_DELTA_K_HEADS, _DELTA_V_HEADS, _DELTA_DIM = 2, 4, 16


def _qwen35(m: TinyModel, i: int) -> Shapes:
    """Qwen3.5: gated DeltaNet blocks, every second one (here) gated full attention."""
    norms: Shapes = {"attn_norm.weight": (m.n_embd,), "post_attention_norm.weight": (m.n_embd,)}
    ffn = {name: shape for name, shape in _ffn(m).items() if not name.startswith("ffn_norm")}
    if i % 2:
        q = m.n_head * m.head_dim
        attention = _attention(m, qk_norm="head")
        attention["attn_q.weight"] = (2 * q, m.n_embd)  # the query and its output gate
        return norms | attention | ffn
    key, value = _DELTA_K_HEADS * _DELTA_DIM, _DELTA_V_HEADS * _DELTA_DIM
    return norms | ffn | {
        "attn_qkv.weight": (2 * key + value, m.n_embd),
        "attn_gate.weight": (value, m.n_embd),
        "ssm_conv1d.weight": (2 * key + value, _SSM_CONV),
        "ssm_dt.bias": (_DELTA_V_HEADS,),
        "ssm_a": (_DELTA_V_HEADS,),
        "ssm_beta.weight": (_DELTA_V_HEADS, m.n_embd),
        "ssm_alpha.weight": (_DELTA_V_HEADS, m.n_embd),
        "ssm_norm.weight": (_DELTA_DIM,),
        "ssm_out.weight": (m.n_embd, value),
    }


def _qwen35_keys(m: TinyModel) -> dict[str, Any]:
    return {
        "full_attention_interval": 2,
        "rope.dimension_sections": [m.head_dim // 4, m.head_dim // 8, m.head_dim // 8, 0],  # M-RoPE: half the head
        "ssm.conv_kernel": _SSM_CONV,
        "ssm.inner_size": _DELTA_V_HEADS * _DELTA_DIM,
        "ssm.state_size": _DELTA_DIM,
        "ssm.time_step_rank": _DELTA_V_HEADS,
        "ssm.group_count": _DELTA_K_HEADS,
    }


def _gemma4(m: TinyModel, i: int) -> Shapes:
    """Gemma 4 (the dense 31B's layout, without per-layer embeddings)."""
    return _attention(m, qk_norm="head") | _ffn(m) | {
        "post_attention_norm.weight": (m.n_embd,),
        "post_ffw_norm.weight": (m.n_embd,),
    }


def _llama4(m: TinyModel, i: int) -> Shapes:
    # Every block routed (``interleave_moe_layer_step`` 1) with one shared expert.
    return _attention(m) | _experts(m, shared=1)


ARCHS: dict[str, Arch] = {
    "llama": Arch(block=lambda m, i: _attention(m) | _ffn(m)),
    # Ministral 3, Devstral 2 (src/models/mistral3.cpp): the llama layout.
    "mistral3": Arch(block=lambda m, i: _attention(m) | _ffn(m)),
    "qwen2": Arch(block=lambda m, i: _attention(m, bias=True) | _ffn(m)),
    "qwen3": Arch(block=lambda m, i: _attention(m, qk_norm="head") | _ffn(m)),
    "granite": Arch(
        block=lambda m, i: _attention(m) | _ffn(m),
        keys=lambda m: {"attention.scale": 0.25, "embedding_scale": 1.0, "residual_scale": 1.0, "logit_scale": 1.0},
    ),
    # Qwen3-Coder-30B-A3B / 480B-A35B (llama.cpp src/models/qwen3moe.cpp).
    "qwen3moe": Arch(
        block=lambda m, i: _attention(m, qk_norm="head") | _experts(m),
        keys=lambda m: _expert_keys(m),
    ),
    # Qwen3.5/3.6 dense (src/models/qwen35.cpp): a hybrid of gated DeltaNet and attention.
    "qwen35": Arch(block=_qwen35, keys=_qwen35_keys),
    # Seed-OSS-36B (src/models/seed-oss.cpp): QKV biases, a post-attention norm before the FFN.
    "seed_oss": Arch(block=lambda m, i: _attention(m, bias=True) | _ffn(m, norm="post_attention_norm")),
    # MiniMax-M2 (src/models/minimax-m2.cpp): Q/K norms over all heads, sigmoid routing with a bias.
    "minimax-m2": Arch(
        block=lambda m, i: _attention(m, qk_norm="all") | _experts(m, n_ff=m.n_ff, probs_bias=True),
        keys=lambda m: _expert_keys(m, expert_feed_forward_length=m.n_ff, expert_gating_func=_SIGMOID),
    ),
    # GLM-4.5/4.6/4.7 (src/models/glm4-moe.cpp): QKV biases, a dense first block, then
    # sigmoid-routed experts with a bias and a shared expert.
    "glm4moe": Arch(
        block=lambda m, i: _attention(m, bias=True, qk_norm="head")
        | (_ffn(m, norm="post_attention_norm") if i == 0 else _experts(m, probs_bias=True, shared=1, norm="post_attention_norm")),
        keys=lambda m: _expert_keys(
            m, expert_shared_count=1, leading_dense_block_count=1, expert_gating_func=_SIGMOID, expert_weights_norm=True
        ),
    ),
    # DeepSeek-V3/V3.1, Kimi-K2 (src/models/deepseek2.cpp).
    "deepseek2": Arch(block=_deepseek2, keys=_deepseek_keys),
    # DeepSeek-V3.2 (src/models/deepseek32.cpp): DeepSeek-V3 plus the lightning indexer.
    "deepseek32": Arch(
        block=_deepseek32,
        keys=lambda m: _deepseek_keys(m) | {
            "attention.indexer.head_count": _INDEXER_HEADS,
            "attention.indexer.key_length": _INDEXER_DIM,
            "attention.indexer.top_k": 2048,
        },
    ),
    # Llama 4 Scout/Maverick (src/models/llama4.cpp). Four blocks: every fourth skips
    # RoPE (llama.cpp's fixed n_no_rope_layer_step), and without such a block the
    # graph's attention-temperature input has no buffer (llama.cpp aborts).
    "llama4": Arch(
        block=_llama4,
        n_layer=4,
        keys=lambda m: _expert_keys(m, interleave_moe_layer_step=1),
    ),
    # Nemotron Nano 9B v2 (src/models/nemotron-h.cpp): a layer's kind from its
    # head_count_kv (0: no attention) and feed_forward_length (0: no MLP).
    "nemotron_h": Arch(
        block=_nemotron_h,
        n_layer=3,
        keys=lambda m: _ssm_keys([0, m.n_head_kv, 0])
        | {"feed_forward_length": [0, 0, m.n_ff], "attention.layer_norm_epsilon": 1e-5},  # read besides the RMS one
    ),
    # Nemotron 3 Nano 30B-A3B (the same loader, src/models/nemotron-h.cpp).
    "nemotron_h_moe": Arch(
        block=_nemotron_h_moe,
        n_layer=3,
        keys=lambda m: _ssm_keys([0, m.n_head_kv, 0]) | _expert_keys(m, expert_shared_feed_forward_length=m.n_ff_exp)
        | {"feed_forward_length": [0, 0, m.n_ff], "attention.layer_norm_epsilon": 1e-5},
    ),
    # Granite 4.0-H (src/models/granite-hybrid.cpp).
    "granitehybrid": Arch(
        block=_granitehybrid,
        keys=lambda m: _ssm_keys([0, m.n_head_kv]) | _expert_keys(m, expert_feed_forward_length=m.n_ff)
        | {"expert_shared_feed_forward_length": m.n_ff, "attention.scale": 0.25, "embedding_scale": 1.0,
           "residual_scale": 1.0, "logit_scale": 1.0},
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
