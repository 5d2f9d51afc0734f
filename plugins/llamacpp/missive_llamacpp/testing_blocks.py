"""The building blocks of the tiny GGUFs :mod:`missive_llamacpp.testing_archs` describes.

Each function gives the tensors one kind of block holds (``{name: numpy
shape}``, rows = output size: the reverse of llama.cpp's ``{ne0, ne1...}``)
or the metadata keys that size it, as llama.cpp's loaders read them
(``load_arch_tensors``/``load_arch_hparams`` in ``src/models/<arch>.cpp``;
names from gguf-py's ``constants.py``), at tiny sizes:

* attention: the plain ``attn_q/k/v/output``, with biases or RMS norms of
  Q and K; DeepSeek's multi-head latent attention (a low-rank query
  ``attn_q_a``/``attn_q_b``, the compressed KV ``attn_kv_a_mqa`` and its
  per-head ``attn_k_b``/``attn_v_b``);
* feed-forward: the SwiGLU ``ffn_gate/up/down``, or a mixture of experts
  (``ffn_gate_inp`` routing to the stacked ``ffn_{gate,up,down}_exps``)
  with shared experts (``*_shexp``) and an expert-selection bias
  (``exp_probs_b``);
* recurrent mixers: Mamba-2 (``ssm_in``, ``ssm_conv1d``, ``ssm_a``/``ssm_d``
  ...) and Qwen3.5's gated DeltaNet (``attn_qkv``, ``attn_gate``,
  ``ssm_alpha``/``ssm_beta``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Shapes",
    "TinyModel",
    "attention",
    "ffn",
    "experts",
    "expert_keys",
    "SOFTMAX",
    "SIGMOID",
    "mla",
    "mla_keys",
    "Q_LORA",
    "mamba2",
    "ssm_keys",
    "gated_delta_net",
    "delta_net_keys",
]

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


def attention(m: TinyModel, *, bias: bool = False, qk_norm: str = "") -> Shapes:
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


def ffn(m: TinyModel, norm: str = "ffn_norm") -> Shapes:
    """The SwiGLU feed-forward, after the ``norm`` llama.cpp names it by."""
    return {
        f"{norm}.weight": (m.n_embd,),
        "ffn_gate.weight": (m.n_ff, m.n_embd),
        "ffn_up.weight": (m.n_ff, m.n_embd),
        "ffn_down.weight": (m.n_embd, m.n_ff),
    }


def experts(
    m: TinyModel, *, n_ff: int = 0, probs_bias: bool = False, shared: int = 0, norm: str = "ffn_norm"
) -> Shapes:
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


def expert_keys(m: TinyModel, **more: Any) -> dict[str, Any]:
    return {
        "expert_count": m.n_expert,
        "expert_used_count": m.n_expert_used,
        "expert_feed_forward_length": m.n_ff_exp,
        **more,
    }


#: llama.cpp's ``llama_expert_gating_func_type``: softmax 1, sigmoid 2.
SOFTMAX, SIGMOID = 1, 2

# DeepSeek's multi-head latent attention, tiny: a query through a rank-32
# projection, a KV compressed to 32 numbers plus a 16-wide shared RoPE key;
# per head, 16 dimensions without position and 16 with (key 32, value 32).
Q_LORA, _KV_LORA, _ROPE, _NOPE, _V = 32, 32, 16, 16, 32


def mla(m: TinyModel) -> Shapes:
    """DeepSeek-V2/V3's attention as GGUFs converted since llama.cpp split ``attn_kv_b``."""
    return {
        "attn_norm.weight": (m.n_embd,),
        "attn_q_a_norm.weight": (Q_LORA,),
        "attn_q_a.weight": (Q_LORA, m.n_embd),
        "attn_q_b.weight": (m.n_head * (_NOPE + _ROPE), Q_LORA),
        "attn_kv_a_norm.weight": (_KV_LORA,),
        "attn_kv_a_mqa.weight": (_KV_LORA + _ROPE, m.n_embd),
        "attn_k_b.weight": (m.n_head, _KV_LORA, _NOPE),
        "attn_v_b.weight": (m.n_head, _V, _KV_LORA),
        "attn_output.weight": (m.n_embd, m.n_head * _V),
    }


def mla_keys(m: TinyModel) -> dict[str, Any]:
    # The MLA cache holds one compressed "head": key = latent + RoPE part, value = latent.
    return {
        "attention.head_count_kv": 1,
        "attention.q_lora_rank": Q_LORA,
        "attention.kv_lora_rank": _KV_LORA,
        "attention.key_length": _KV_LORA + _ROPE,
        "attention.value_length": _KV_LORA,
        "attention.key_length_mla": _NOPE + _ROPE,
        "attention.value_length_mla": _V,
        "rope.dimension_count": _ROPE,
    }


# Mamba-2 mixers of the hybrids, tiny: inner width 2 x 64 (granitehybrid
# supports only that expansion), 8 heads of 16, a state of 16, one group.
_SSM_INNER, _SSM_HEADS, _SSM_STATE, _SSM_CONV = 128, 8, 16, 4


def mamba2(m: TinyModel) -> Shapes:
    """A Mamba-2 mixer block (``nemotron_h``, ``granitehybrid``: llama.cpp ``build_mamba2_layer``)."""
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


def ssm_keys(head_count_kv: list[int]) -> dict[str, Any]:
    """Mamba-2's sizes, and which blocks are recurrent: those whose ``head_count_kv`` is 0."""
    return {
        "attention.head_count_kv": head_count_kv,  # 0: a Mamba-2 layer
        "ssm.conv_kernel": _SSM_CONV,
        "ssm.inner_size": _SSM_INNER,
        "ssm.state_size": _SSM_STATE,
        "ssm.time_step_rank": _SSM_HEADS,
        "ssm.group_count": 1,
    }


# Qwen3.5's gated DeltaNet (linear attention), tiny: 2 key heads and 4 value
# heads of 16 (``ssm.group_count``, ``ssm.time_step_rank``, ``ssm.state_size``).
_DELTA_K_HEADS, _DELTA_V_HEADS, _DELTA_DIM = 2, 4, 16


def gated_delta_net(m: TinyModel) -> Shapes:
    """Qwen3.5's linear-attention mixer (llama.cpp ``src/models/qwen35.cpp``)."""
    key, value = _DELTA_K_HEADS * _DELTA_DIM, _DELTA_V_HEADS * _DELTA_DIM
    return {
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


def delta_net_keys() -> dict[str, Any]:
    """The gated DeltaNet's sizes, in the ``ssm.*`` keys llama.cpp reads them from."""
    return {
        "ssm.conv_kernel": _SSM_CONV,
        "ssm.inner_size": _DELTA_V_HEADS * _DELTA_DIM,
        "ssm.state_size": _DELTA_DIM,
        "ssm.time_step_rank": _DELTA_V_HEADS,
        "ssm.group_count": _DELTA_K_HEADS,
    }
