"""The status an in-process model reports (``/v1/status``, ``missive ps``, the console):
its slots and what they hold, the shared KV pool's counters, the host-memory
prompt cache."""

from __future__ import annotations

from typing import Any

from .batcher import Batcher
from .host_cache import HostPromptCache
from .runner import ContextStates, ModelInfo, Runner, Speculative

__all__ = ["engine_status", "engine_choices", "speculation_counts"]


def engine_status(
    runner: Runner, info: ModelInfo | None, batcher: Batcher | None, host_cache: HostPromptCache | None
) -> dict[str, Any]:
    """``{"loaded": bool}``, and once loaded ``slots`` (sequences decoded
    together), ``slots_in_use``, ``slot_states``
    (:meth:`~missive.engine.batcher.Batcher.slot_states`); with a KV pool
    the slots share, ``kv_pool_tokens`` and how often it made a request wait
    (``kv_pool_waits``), emptied an idle slot (``kv_pool_evictions``),
    paused a running sequence (``kv_pool_pauses``); with a host-memory
    prompt cache ``host_cache_bytes``, ``host_cache_entries``,
    ``host_cache_max_bytes``; with speculative decoding
    (:func:`speculation_counts`) ``spec_decode_draft_tokens`` and
    ``spec_decode_accepted_tokens``."""
    out: dict[str, Any] = {"loaded": info is not None}
    if batcher is not None:
        out["slots"] = batcher.slots
        out["slots_in_use"] = batcher.active
        if info is not None:
            held = (
                (lambda slot: len(runner.context_tokens(slot))) if isinstance(runner, ContextStates) else None
            )
            out["slot_states"] = batcher.slot_states(held)
            if info.pool_tokens:
                out["kv_pool_tokens"] = info.pool_tokens
                out.update({f"kv_pool_{k}": v for k, v in batcher.pool_events.items()})
    if host_cache is not None:
        out.update(
            host_cache_bytes=host_cache.nbytes,
            host_cache_entries=len(host_cache),
            host_cache_max_bytes=host_cache.max_bytes,
        )
    out.update(speculation_counts(runner))
    return out


def speculation_counts(runner: Runner) -> dict[str, int]:
    """``spec_decode_draft_tokens`` (draft tokens verified) and
    ``spec_decode_accepted_tokens`` (those the model agreed with) of a
    :class:`~missive.engine.runner.Speculative` runner since it was made;
    ``{}`` for another runner."""
    if not isinstance(runner, Speculative):
        return {}
    drafted, accepted = runner.draft_counts()
    return {"spec_decode_draft_tokens": drafted, "spec_decode_accepted_tokens": accepted}


def engine_choices(
    info: ModelInfo | None, template: str, tool_format: str, reasoning: str | None
) -> dict[str, Any]:
    """The context window, slots, KV pool, chat template family
    (:func:`~missive.models.sources.gguf.template_family`), tool call format,
    reasoning format (``none``: the model does not reason) and default
    sampling (:meth:`~missive.sampling.SamplingDefaults.describe`) of a
    loaded model; ``{}`` before it is loaded."""
    if info is None:
        return {}
    from ..models.sources.gguf import template_family

    return {
        "context_window": info.context_window,
        "slots": info.slots,
        "kv_pool_tokens": info.pool_tokens or info.slots * info.context_window,
        "chat_template": template_family(template),
        "tool_format": tool_format,
        "reasoning_format": reasoning or "none",
        "sampling": info.sampling.describe(),
    }
