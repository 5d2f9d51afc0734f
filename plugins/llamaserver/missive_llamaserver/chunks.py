"""llama-server's chat completion chunks -> Missive events.

The OpenAI stream translation (:class:`missive_openai.chunks.ChunkTranslator`)
plus what llama-server adds or does differently
(``server_task_result_cmpl_*::to_json_oaicompat_chat_stream`` in
``tools/server/server-task.cpp``):

* every chunk may carry ``timings``; the last one (usage chunk) does:
  ``{cache_n, prompt_n, prompt_ms, predicted_n, ...}``, ``cache_n`` being the
  prompt tokens reused from the KV cache (``cache_prompt``); the usage chunk
  has ``prompt_tokens`` (the whole prompt) and
  ``prompt_tokens_details.cached_tokens`` (the same reuse). ik_llama.cpp has
  neither ``cached_tokens`` nor ``cache_n``: its ``timings.prompt_n`` is the
  part of the prompt it evaluated, so the reuse is ``prompt_tokens -
  prompt_n``. Either way it becomes ``cache_read_input_tokens``;
* with ``return_progress`` (not sent), ``prompt_progress`` chunks with
  ``choices: []`` are ignored like any chunk without choices;
* ``delta.reasoning_content`` is the reasoning (``reasoning_format``
  ``deepseek``): thinking deltas, which the core drops when the request did
  not ask for thinking (their tokens still count in the usage);
* a forced tool call (:mod:`.forced`) arrives as ``content``: it is read back
  into a ``tool_use`` block at the end;
* ``finish_reason``: ``stop`` (end of generation or a stop word), ``length``,
  ``tool_calls``.
"""

from __future__ import annotations

from typing import Any

from missive.api import Finished, GenerationEvent, ThinkingDelta
from missive_openai.chunks import ChunkTranslator

from .forced import ForcedCall

__all__ = ["LlamaChunkTranslator"]


class LlamaChunkTranslator(ChunkTranslator):
    """See the module doc.

    Args:
        tool_choice, forced_name: as :class:`ChunkTranslator` (the mode the
            server was asked to honour: ``auto``, or None).
        forced: the reader of a grammar-forced call, for ``any``/``tool``.
        show_thinking: emit ``reasoning_content`` as thinking deltas (False: a
            cache warm-up, which shows nothing).
    """

    def __init__(
        self,
        *,
        tool_choice: str | None = None,
        forced_name: str | None = None,
        forced: ForcedCall | None = None,
        show_thinking: bool = True,
    ) -> None:
        super().__init__(tool_choice=tool_choice, forced_name=forced_name)
        self.forced = forced
        self.show_thinking = show_thinking
        self.timings: dict[str, Any] | None = None
        self._usage_has_cache = False

    def feed(self, chunk: Any) -> list[GenerationEvent]:
        events = super().feed(chunk)
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            self._usage_has_cache = isinstance(details, dict) and "cached_tokens" in details
        if not self.show_thinking:
            events = [e for e in events if not isinstance(e, ThinkingDelta)]
        if self.forced is not None:
            events = self.forced.feed(events)
        return events

    def _cache_from_timings(self) -> None:
        """Fill the usage's cached part from ``timings`` when the usage lacks it."""
        usage, timings = self.usage, self.timings
        if usage is None or timings is None or self._usage_has_cache:
            return
        cached = timings.get("cache_n")
        if not isinstance(cached, int):
            evaluated = timings.get("prompt_n")
            cached = (
                usage.prompt_tokens - evaluated if isinstance(evaluated, int) and evaluated >= 0 else None
            )
        if isinstance(cached, int):
            usage.cached_tokens = max(0, min(cached, usage.prompt_tokens))

    def finish(self, *, ended_cleanly: bool) -> list[GenerationEvent]:
        self._cache_from_timings()
        events = super().finish(ended_cleanly=ended_cleanly)
        if self.forced is None:
            return events
        finished = events.pop()
        assert isinstance(finished, Finished)
        return [*events, *self.forced.finish(truncated=self.finish_reason == "length"), finished]
