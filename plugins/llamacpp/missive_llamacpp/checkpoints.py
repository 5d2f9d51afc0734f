"""Context checkpoints: reusing a cached prompt on models whose state cannot be cut anywhere.

A slot's KV cache of a plain transformer can be cut at any position
(``llama_memory_seq_rm``), so a new prompt reuses whatever prefix it shares
with the cached one. Two kinds of models cannot do that (:data:`Cut`):

* **recurrent and hybrid models** (Mamba, Mamba-2, short convolutions:
  Qwen3-Next, Qwen3.5, Granite 4-H, LFM2, Nemotron-H, Falcon-H1, Jamba):
  the recurrent state sums up every token read, so it can only go forward
  (``llama_memory_recurrent::seq_rm`` refuses a partial cut). A cached
  sequence that is a prefix of the prompt (the next turn of a
  conversation) is still reused whole, with nothing to cut;
* **sliding-window models** (Gemma 3, gpt-oss) without ``swa_full``: the
  window layers keep only the last ``n_swa`` positions (plus a micro-batch),
  so a cut is exact only while the window before it is still there
  (llama-server's ``pos_min`` test, ``tools/server/server-context.cpp``).

For both, llama-server keeps **context checkpoints** (``--ctx-checkpoints``,
ggml-org/llama.cpp#15293): copies of the part of a sequence's state that
cannot be cut (``llama_state_seq_get_data_ext`` with
``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: the recurrent state, the window
cache), taken while a prompt is read. A later prompt that parts from the
cached one restores the nearest checkpoint before the parting (its partial
state, then ``seq_rm`` cuts the full-attention layers, which can be cut,
after it) and reads only the rest. The runner takes them, as llama-server
does, before the batch that starts at the checkpoint's position:

* every ``checkpoint_interval`` tokens of a long prompt (what Claude
  Code's microcompact or a side request sharing the system prompt needs);
* :data:`END_OFFSET` and ``END_OFFSET + n_ubatch`` tokens before the
  prompt's end (llama-server's ``checkpoint_offsets``,
  ggml-org/llama.cpp#20288): the same prompt sent again, or one whose last
  turn is edited or replaced (up to ``n_ubatch`` tokens of it), restores
  one of them.

A slot keeps at most ``ctx_checkpoints`` of them, and at most its share of
the host-memory cache's bytes, oldest dropped first (llama-server drops the
oldest too); they travel with the slot's state into the host-memory cache.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import llama_cpp

from .prefix import reused_prefix

__all__ = ["END_OFFSET", "Checkpoint", "Cut", "keep", "plan_reuse", "positions", "restore", "take"]

#: How a model's state can be cut: ``any`` position, within the ``window``
#: still held (sliding-window layers), or ``none`` (recurrent state).
Cut = Literal["any", "window", "none"]

#: A checkpoint this many tokens before a prompt's end (llama-server's
#: ``checkpoint_offsets``: its last 4 tokens are decoded separately).
END_OFFSET = 4


@dataclass(frozen=True)
class Checkpoint:
    """A sequence's partial state after its first ``n_tokens`` tokens.

    Attributes:
        n_tokens: tokens the state covers (positions ``0 .. n_tokens - 1``).
        data: the bytes ``llama_state_seq_get_data_ext`` wrote (a ctypes array).
        size: how many of them.
    """

    n_tokens: int
    data: Any
    size: int


def plan_reuse(
    cached: Sequence[int],
    prompt: Sequence[int],
    *,
    cut: Cut,
    n_swa: int = 0,
    pos_min: int = 0,
    checkpoints: Sequence[Checkpoint] = (),
    clip: Callable[[int], int] | None = None,
) -> tuple[int, Checkpoint | None]:
    """Prompt tokens a state holding ``cached`` serves, and the checkpoint
    to restore first (None: cut the state itself there).

    The common prefix, less the prompt's last token when the prompt lies
    wholly inside it (its logits do not outlive the step that made them:
    :func:`~missive_llamacpp.prefix.reused_prefix`).

    Args:
        cut: how the model's state can be cut (:data:`Cut`).
        n_swa: the sliding window (``llama_model_n_swa``) for ``"window"``.
        pos_min: the first position the window layers still hold for this
            sequence (``llama_memory_seq_pos_min``).
        checkpoints: the state's checkpoints, by ``n_tokens`` ascending.
        clip: moves a reuse back to where it may end (an image is reused
            whole or not at all: ``MediaPrompt.image_start``); None: anywhere.
    """
    reuse = reused_prefix(cached, prompt, requires_eval=True)
    if clip is not None:
        reuse = clip(reuse)
    if reuse <= 0:
        return 0, None
    if reuse == len(cached) or cut == "any":
        return reuse, None  # nothing to cut, or a cut anywhere is exact
    if cut == "window" and 0 <= pos_min <= max(0, reuse - n_swa):
        return reuse, None  # the window before the cut is still held
    for checkpoint in reversed(checkpoints):
        if checkpoint.n_tokens <= reuse:
            return checkpoint.n_tokens, checkpoint
    return 0, None


def positions(
    n_prompt: int, start: int, *, interval: int, n_ubatch: int, avoid: Sequence[tuple[int, int]] = ()
) -> list[int]:
    """Where to take checkpoints while a prompt of ``n_prompt`` tokens is read
    from ``start`` (module documentation), ascending; never inside a span of
    ``avoid`` (an image: ``(start, end)``), never at ``start`` or 0."""
    wanted = set(range(interval, n_prompt, interval))
    wanted.update((n_prompt - END_OFFSET, n_prompt - END_OFFSET - n_ubatch))
    return sorted(p for p in wanted if start < p < n_prompt and not any(a < p < b for a, b in avoid))


def take(ctx: Any, seq_id: int, n_tokens: int) -> Checkpoint | None:
    """The partial state of sequence ``seq_id`` now, covering ``n_tokens``
    tokens (model thread, between decodes), or None when llama.cpp has none."""
    flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    size = int(llama_cpp.llama_state_seq_get_size_ext(ctx, seq_id, flags))
    if size <= 0:
        return None
    buffer = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data_ext(ctx, buffer, size, seq_id, flags))
    return Checkpoint(n_tokens, buffer, written) if written else None


def restore(ctx: Any, seq_id: int, checkpoint: Checkpoint) -> bool:
    """Put ``checkpoint``'s partial state into sequence ``seq_id`` (its
    full-attention cache is left as it is: the caller cuts it after
    ``checkpoint.n_tokens``). False when llama.cpp refused it."""
    flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    return (
        int(llama_cpp.llama_state_seq_set_data_ext(ctx, checkpoint.data, checkpoint.size, seq_id, flags)) != 0
    )


def keep(checkpoints: Sequence[Checkpoint], new: Checkpoint, *, count: int, nbytes: int) -> list[Checkpoint]:
    """``checkpoints`` with ``new`` added (replacing one at the same
    position), the oldest dropped while more than ``count`` or ``nbytes``
    are kept; a new list (other threads may be reading the old one)."""
    kept = sorted([c for c in checkpoints if c.n_tokens != new.n_tokens] + [new], key=lambda c: c.n_tokens)
    while kept and (len(kept) > count or sum(c.size for c in kept) > nbytes):
        kept.pop(0)
    return kept
