"""What conversation management adds to an answer.

* ``context_management: {"applied_edits": [...]}`` when the request had
  ``context_management`` (``BetaContextManagementResponse``): in the
  streamed ``message_delta`` (where the SDK's accumulator reads it) and so
  in the non-streaming message folded from it;
* ``usage.iterations`` with a ``fallback_message`` entry when a fallback
  model answered (:mod:`missive.routing.chain`);
* the answer of a compaction request as one ``compaction`` block
  (:class:`missive.context_management.compaction.CompactionStream`);
* whole blocks opening the answer, before the model's (the MCP connector's
  ``mcp_tool_listing`` blocks, :mod:`missive.tools.mcp`): each a
  ``content_block_start`` holding the block and its ``content_block_stop``,
  the model's blocks numbered after them (:class:`LeadingBlocks`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from ..routing.chain import iteration
from ..thinking.signing import Signer

__all__ = [
    "EventStream",
    "ContextExtras",
    "AnswerStream",
    "CompactionStream",
    "LeadingBlocks",
    "finish_stream",
]

log = logging.getLogger("missive.compaction")

Event = dict[str, Any]


class EventStream(Protocol):
    """What an :class:`~missive.serving.answer.Answer` drives: a
    :class:`~missive.messages.stream.MessageStream` or a wrapper of one."""

    async def start(self) -> Event: ...

    def events(self) -> AsyncGenerator[Event, None]: ...

    async def aclose(self) -> None: ...


@dataclass
class ContextExtras:
    """What the preparation of one request found (part of its
    :class:`~missive.serving.service.Prepared`).

    Attributes:
        applied_edits: the edits applied; None when the request had no
            ``context_management`` (the response then has none either).
        original_tokens: prompt tokens before the edits, when counted.
        compaction: the request is a compaction request.
    """

    applied_edits: list[dict[str, Any]] | None = None
    original_tokens: int | None = None
    compaction: bool = False


class _Wrapper:
    """An :class:`EventStream` that changes the events of another one."""

    def __init__(self, inner: EventStream) -> None:
        self._inner = inner

    async def start(self) -> Event:
        first: Event = await self._inner.start()
        return first

    async def aclose(self) -> None:
        await self._inner.aclose()


class AnswerStream(_Wrapper):
    """An answer whose ``message_delta`` gets ``context_management`` and
    ``usage.iterations`` (see the module doc)."""

    def __init__(self, inner: EventStream, extras: ContextExtras, fallback_model: str | None) -> None:
        super().__init__(inner)
        self._extras = extras
        self._fallback_model = fallback_model

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


class CompactionStream(_Wrapper):
    """The answer of a compaction request (:mod:`missive.context_management.compaction`):
    its content is one ``compaction`` block holding the model's text, signed
    (:meth:`~missive.thinking.signing.Signer.sign_compaction`). It is sent
    whole once the model has finished: ``content_block_start`` (``content``
    null, the signature), one ``compaction_delta`` with the content,
    ``content_block_stop`` (the SDK's accumulator sets ``content`` from the
    delta, it does not append); ``stop_reason`` is ``compaction``, or
    ``max_tokens`` for a summary cut short."""

    def __init__(self, inner: EventStream, signer: Signer) -> None:
        super().__init__(inner)
        self._signer = signer

    async def events(self) -> AsyncGenerator[Event, None]:
        text: list[str] = []
        async with aclosing(self._inner.events()) as inner:
            async for event in inner:
                kind = event["type"]
                if kind == "content_block_delta" and event["delta"]["type"] == "text_delta":
                    text.append(event["delta"]["text"])
                elif kind == "message_delta":
                    summary = "".join(text).strip()
                    content = summary or None
                    signature = self._signer.sign_compaction(summary) if content else None
                    if content is None:
                        log.warning("compaction produced no summary")
                    block = {
                        "type": "compaction",
                        "content": None,
                        "signature": signature,
                        "encrypted_content": None,
                    }
                    yield {"type": "content_block_start", "index": 0, "content_block": block}
                    yield {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "compaction_delta", "content": content, "encrypted_content": None},
                    }
                    yield {"type": "content_block_stop", "index": 0}
                    stop = event["delta"]["stop_reason"]
                    # A summary cut by max_tokens is incomplete: said so, as the API says of any answer.
                    reason = "max_tokens" if stop == "max_tokens" else "compaction"
                    yield {**event, "delta": {"stop_reason": reason, "stop_sequence": None}}
                elif kind == "message_stop":
                    yield event


class LeadingBlocks(_Wrapper):
    """An answer opened by whole blocks (see the module doc)."""

    def __init__(self, inner: EventStream, blocks: list[Event]) -> None:
        super().__init__(inner)
        self._blocks = blocks

    async def events(self) -> AsyncGenerator[Event, None]:
        for index, block in enumerate(self._blocks):
            yield {"type": "content_block_start", "index": index, "content_block": block}
            yield {"type": "content_block_stop", "index": index}
        shift = len(self._blocks)
        async with aclosing(self._inner.events()) as inner:
            async for event in inner:
                if "index" in event:
                    event = {**event, "index": event["index"] + shift}
                yield event


def finish_stream(
    stream: EventStream,
    extras: ContextExtras,
    signer: Signer,
    fallback_model: str | None = None,
    leading: list[Event] | None = None,
) -> EventStream:
    """``stream`` wrapped for what ``extras``, ``fallback_model`` and
    ``leading`` add (itself when there is nothing to add)."""
    if extras.compaction:
        stream = CompactionStream(stream, signer)
    if leading:
        stream = LeadingBlocks(stream, leading)
    if extras.applied_edits is None and fallback_model is None:
        return stream
    return AnswerStream(stream, extras, fallback_model)
