"""``thinking: {"type": "between_tools"}`` on local models.

The API defines it as "thinking turned off, and any short progress updates
the model writes between tool calls come back as thinking blocks" (SDK
docstring of ``ThinkingTypes.between_tools``, anthropic 2.15; Anthropic docs,
"What's new in Claude Opus 5.5": text between tool calls comes back in
``thinking`` blocks). Mapped onto a local model:

* its reasoning switch is off, as for ``disabled`` (the plan's ``requested``
  is False: :mod:`missive.driver.thinking`), and reasoning it writes anyway is
  dropped (its tokens still count);
* answer text followed by a tool call in the same answer is a progress
  update: it becomes a thinking block (signed like any other, so it can be
  replayed); text after the last call, or in an answer without calls, stays
  text. A model cannot announce which kind of text it writes, so the text of
  an answer that may still call a tool is held until a call starts (thinking)
  or the answer ends (text): a streaming client receives it in one piece, a
  cost the API does not have;
* a model that cannot call tools, or a request that offers none (or forces
  ``tool_choice: none``), has no "between tool calls": the request is
  answered as ``disabled``, the fallback the API documents for a model
  without ``between_tools`` (``BetaFallbackParam.thinking``);
* replayed, such a thinking block is rendered back as the text the model
  wrote (:func:`as_text`), not as reasoning, so the prompt shows what the
  model actually produced.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from ..driver.conversation import Conversation
from ..driver.events import Finished, GenerationEvent, TextDelta, ThinkingDelta, ToolCallStart
from ..protocol.schema.blocks import TextBlock, ThinkingBlock

__all__ = ["progress_as_thinking", "as_text"]


async def progress_as_thinking(
    source: AsyncIterator[GenerationEvent], *, calls_possible: bool
) -> AsyncGenerator[GenerationEvent, None]:
    """``source`` with the model's own reasoning dropped and, when
    ``calls_possible``, the text before each tool call turned into thinking.

    Tokens are kept on the events that replace others, so ``output_tokens``
    is unchanged: dropped reasoning becomes an empty :class:`TextDelta`
    carrying its tokens.
    """
    held: list[TextDelta] = []
    try:
        async for event in source:
            if isinstance(event, ThinkingDelta):
                yield TextDelta("", tokens=event.tokens)  # thinking is off: counted, not shown
            elif isinstance(event, TextDelta) and calls_possible:
                held.append(event)
            elif isinstance(event, ToolCallStart):
                progress, tokens = "".join(t.text for t in held).strip(), sum(t.tokens for t in held)
                held = []
                # Whitespace around a call is no progress update (the core
                # drops it between blocks): counted, not shown.
                yield ThinkingDelta(progress, tokens=tokens) if progress else TextDelta("", tokens=tokens)
                yield event
            else:
                if isinstance(event, Finished):
                    for delta in held:
                        yield delta
                    held = []
                yield event
        for delta in held:
            yield delta
    finally:
        await source.aclose()  # type: ignore[attr-defined]


def as_text(conversation: Conversation) -> None:
    """Render the kept thinking blocks of assistant turns as text, in place:
    under ``between_tools`` they are progress text the model wrote."""
    for turn in conversation.turns:
        if turn.role == "assistant":
            turn.blocks = [
                TextBlock(type="text", text=b.thinking) if isinstance(b, ThinkingBlock) else b
                for b in turn.blocks
                if not isinstance(b, ThinkingBlock) or b.thinking
            ]
