"""What conversation management adds to an answer.

* ``context_management: {"applied_edits": [...]}`` when the request had
  ``context_management`` (``BetaContextManagementResponse``): in the
  streamed ``message_delta`` (where the SDK's accumulator reads it) and so
  in the non-streaming message folded from it;
* ``usage.iterations`` with a ``fallback_message`` entry when a fallback
  model answered (:mod:`missive.context.fallbacks`);
* the answer of a compaction request as one ``compaction`` block
  (:class:`missive.context.compaction.CompactionStream`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from ..thinking.signing import Signer
from .compaction import CompactionStream
from .fallbacks import iteration

__all__ = ["Answer", "ContextExtras", "AnswerStream", "finish_stream"]

Event = dict[str, Any]


class Answer(Protocol):
    """What the routes drive: a :class:`~missive.pipeline.MessageStream` or a wrapper of one."""

    async def start(self) -> Event: ...

    def events(self) -> AsyncGenerator[Event, None]: ...

    async def aclose(self) -> None: ...


@dataclass
class ContextExtras:
    """What the preparation of one request found (kept in ``g``).

    Attributes:
        applied_edits: the edits applied; None when the request had no
            ``context_management`` (the response then has none either).
        original_tokens: prompt tokens before the edits, when counted.
        compaction: the request is a compaction request.
    """

    applied_edits: list[dict[str, Any]] | None = None
    original_tokens: int | None = None
    compaction: bool = False


class AnswerStream:
    """A :class:`~missive.pipeline.MessageStream` (or a compaction stream)
    whose ``message_delta`` gets the fields above."""

    def __init__(self, inner: Answer, extras: ContextExtras, fallback_model: str | None) -> None:
        self._inner = inner
        self._extras = extras
        self._fallback_model = fallback_model

    async def start(self) -> Event:
        first: Event = await self._inner.start()
        return first

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def events(self) -> AsyncGenerator[Event, None]:
        async with aclosing(self._inner.events()) as inner:
            async for event in inner:
                if event["type"] == "message_delta":
                    event = dict(event)
                    if self._extras.applied_edits is not None:
                        event["context_management"] = {"applied_edits": list(self._extras.applied_edits)}
                    if self._fallback_model is not None:
                        usage = dict(event["usage"])
                        usage["iterations"] = [iteration(self._fallback_model, usage)]
                        event["usage"] = usage
                yield event


def finish_stream(
    stream: Answer, extras: ContextExtras, signer: Signer, fallback_model: str | None = None
) -> Answer:
    """``stream`` wrapped for what ``extras`` and ``fallback_model`` add
    (itself when there is nothing to add)."""
    if extras.compaction:
        stream = CompactionStream(stream, signer)
    if extras.applied_edits is None and fallback_model is None:
        return stream
    return AnswerStream(stream, extras, fallback_model)
