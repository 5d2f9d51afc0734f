"""One code path from driver events to the API's stream events.

:class:`MessageStream` consumes a driver's :mod:`~missive.events` and produces
the Messages API stream events as dicts (``message_start``,
``content_block_start``/``delta``/``stop``, ``message_delta``,
``message_stop``). Streaming requests serialize them as SSE
(:mod:`missive.sse`); non-streaming requests fold them with
:func:`accumulate` into the ``Message`` object. Both come from the same events,
so stream and non-stream answers are equivalent (contract section 4).

Rules applied here, for every driver (contract sections 3 and 4):

* blocks are opened and closed in index order, never interleaved;
* stop sequences are matched exactly on the text, with hold-back; on a match
  generation is stopped and ``stop_reason`` is ``stop_sequence``;
* reasoning written as text is separated by the driver's reasoning parser (if
  it returns one), then tool calls are parsed by its tool parser (if it
  returns one); only answer text outside calls is matched against stop
  sequences;
* thinking the client did not ask for (``thinking`` absent or ``disabled``)
  is dropped, though counted in ``output_tokens``; with ``display:
  "omitted"`` thinking blocks carry no text; every thinking block ends with
  exactly one ``signature_delta`` just before its ``content_block_stop``
  (:mod:`missive.thinking.signing`);
* ``stop_reason`` is ``tool_use`` whenever a tool call was emitted; with
  ``disable_parallel_tool_use`` generation stops after the first call;
* ``message_delta`` carries cumulative usage, input and cache fields repeated
  (corrected by :class:`~missive.events.Finished` when the driver learned the
  exact prompt split only at the end).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

from .driver import Driver, GenerationRequest
from .errors import ApiError, BadGatewayError, MissiveError
from .events import (
    Finished,
    GenerationEvent,
    Started,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .ids import tool_use_id
from .reasoning.base import ReasoningParser
from .stop_sequences import StopMatcher
from .thinking.signing import Signer
from .tools.parsers.base import CallArgs, CallEnd, CallStart, MalformedToolCall, Reasoning, Text, ToolParser

__all__ = ["MessageStream", "accumulate"]

log = logging.getLogger("missive.pipeline")

Event = dict[str, Any]


class MessageStream:
    """The API events of one answer.

    Usage::

        stream = MessageStream(driver, request, message_id=..., model=...)
        first = await stream.start()      # message_start; errors here are HTTP errors
        async for event in stream.events():
            ...                           # errors here happen mid-stream
    """

    def __init__(
        self,
        driver: Driver,
        request: GenerationRequest,
        *,
        message_id: str,
        model: str,
        signer: Signer | None = None,
    ) -> None:
        """``signer``: the server's thinking-block signer (a throwaway key when
        None, for drivers exercised outside a server)."""
        self.driver = driver
        self.request = request
        self.message_id = message_id
        self.model = model
        self._source: AsyncIterator[GenerationEvent] | None = None
        self._started: Started | None = None
        self._index = -1
        self._open: str | None = None
        self._tool_calls = 0
        self._output_tokens = 0
        self._held_space = ""
        self._signer = signer or Signer(secrets.token_bytes(32))
        self._thinking_text = ""
        self._thinking_blocks = 0

    async def start(self) -> Event:
        """Run the driver up to its :class:`Started` event; return ``message_start``.

        Raises:
            MissiveError: from the driver (prompt too long, backend down...).
        """
        self._source = self.driver.generate(self.request).__aiter__()
        try:
            first = await self._source.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise ApiError(f"driver '{self.driver.name}' ended without starting a message") from None
        except BaseException:
            await self.aclose()
            raise
        if not isinstance(first, Started):
            await self.aclose()
            raise ApiError(f"driver '{self.driver.name}' sent {type(first).__name__} before Started")
        self._started = first
        return {
            "type": "message_start",
            "message": {
                "id": self.message_id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**self._input_usage(), "output_tokens": 0},
            },
        }

    def _input_usage(self) -> dict[str, int]:
        started = self._started
        assert started is not None
        return {
            "input_tokens": started.input_tokens,
            "cache_creation_input_tokens": started.cache_creation_input_tokens,
            "cache_read_input_tokens": started.cache_read_input_tokens,
        }

    def _correct_input_usage(self, finished: Finished) -> None:
        """Apply the exact prompt usage a driver learned only at the end."""
        started = self._started
        assert started is not None
        self._started = Started(
            input_tokens=_first(finished.input_tokens, started.input_tokens),
            cache_read_input_tokens=_first(finished.cache_read_input_tokens, started.cache_read_input_tokens),
            cache_creation_input_tokens=_first(
                finished.cache_creation_input_tokens, started.cache_creation_input_tokens
            ),
        )

    async def aclose(self) -> None:
        """Stop the driver's generation (idempotent)."""
        source, self._source = self._source, None
        if source is not None and hasattr(source, "aclose"):
            await source.aclose()

    def _open_block(self, kind: str, block: dict[str, Any]) -> list[Event]:
        events = self._close_block()
        self._index += 1
        self._open = kind
        events.append({"type": "content_block_start", "index": self._index, "content_block": block})
        return events

    def _close_block(self) -> list[Event]:
        if self._open is None:
            return []
        events: list[Event] = []
        if self._open == "thinking":
            turn, first = self.request.thinking_position
            position = {"turn": turn, "block": first + self._thinking_blocks}
            if self.request.thinking.display == "omitted":
                # The client never sees the text: the signature carries it back.
                signature = self._signer.seal(self._thinking_text, **position)
            else:
                signature = self._signer.sign(self._thinking_text, **position)
            self._thinking_blocks += 1
            events.append(
                {
                    "type": "content_block_delta",
                    "index": self._index,
                    "delta": {"type": "signature_delta", "signature": signature},
                }
            )
        self._open = None
        events.append({"type": "content_block_stop", "index": self._index})
        return events

    def _thinking(self, text: str) -> list[Event]:
        """Events for reasoning text (the request wants thinking blocks)."""
        events: list[Event] = []
        if self._open != "thinking":
            events += self._open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self._thinking_text = ""
        self._thinking_text += text
        if self.request.thinking.display == "omitted" or not text:
            return events  # the block, its signature, no text (API: display "omitted")
        events.append(
            {"type": "content_block_delta", "index": self._index, "delta": {"type": "thinking_delta", "thinking": text}}
        )
        return events

    def _text(self, text: str) -> list[Event]:
        """Events for answer text.

        Whitespace that would open a new text block is held until real text
        follows, and dropped if a tool call or the end comes first: the
        newlines models write between and around tool calls are not content
        (the API never sends whitespace-only text blocks between tool_use
        blocks).
        """
        if not text:
            return []
        if self._open != "text":
            if not text.strip():
                self._held_space += text
                return []
            text, self._held_space = self._held_space + text, ""
        events = [] if self._open == "text" else self._open_block("text", {"type": "text", "text": ""})
        events.append(
            {"type": "content_block_delta", "index": self._index, "delta": {"type": "text_delta", "text": text}}
        )
        return events

    def _parsers(self) -> tuple[ReasoningParser | None, ToolParser | None]:
        request = self.request
        tool: ToolParser | None = None
        if request.tools and request.tool_choice.mode != "none":
            tool = self.driver.tool_parser(request)
        reasoning = None
        if tool is None or not getattr(tool, "handles_reasoning", False):
            reasoning = self.driver.reasoning_parser(request)
        return reasoning, tool

    def _split(
        self, reasoning: ReasoningParser | None, tool: ToolParser | None, pieces: list[object]
    ) -> list[GenerationEvent]:
        """Reasoning parser output through the tool parser, as generation events."""
        out: list[GenerationEvent] = []
        for piece in pieces:
            if isinstance(piece, Text) and tool is not None:
                out += [self._from_parse(parsed) for parsed in tool.feed(piece.text)]
            else:
                out.append(self._from_parse(piece))
        return out

    def _flush(self, reasoning: ReasoningParser | None, tool: ToolParser | None) -> list[GenerationEvent]:
        out = self._split(reasoning, tool, list(reasoning.finish())) if reasoning is not None else []
        if tool is not None:
            out += [self._from_parse(parsed) for parsed in tool.finish()]
        return out

    async def _parsed(self) -> AsyncIterator[GenerationEvent]:
        """The driver's events with reasoning and tool calls written as text
        turned into thinking and call events (tokens are counted on the
        driver's text deltas, the derived events carry 0)."""
        assert self._source is not None
        reasoning, tool = self._parsers()
        if reasoning is None and tool is None:
            async for event in self._source:
                yield event
            return
        flushed = False
        try:
            async for event in self._source:
                if isinstance(event, TextDelta):
                    self._output_tokens += event.tokens
                    pieces: list[object] = list(reasoning.feed(event.text)) if reasoning else [Text(event.text)]
                    for converted in self._split(reasoning, tool, pieces):
                        yield converted
                    continue
                if isinstance(event, Finished) and not flushed:
                    flushed = True
                    for converted in self._flush(reasoning, tool):
                        yield converted
                yield event
            if not flushed:
                for converted in self._flush(reasoning, tool):
                    yield converted
        except MalformedToolCall as exc:
            raise BadGatewayError(f"the model produced a malformed tool call: {exc}") from exc

    async def events(self) -> AsyncIterator[Event]:
        """Content block events, then ``message_delta`` and ``message_stop``.

        Raises:
            MissiveError: a driver failure after the stream started (the
                caller sends it as an SSE ``error`` event).
        """
        assert self._source is not None, "start() first"
        matcher = StopMatcher(self.request.stop_sequences)
        stop_reason: str = "end_turn"
        stop_sequence: str | None = None
        driver_output_tokens: int | None = None
        parallel = self.request.tool_choice.parallel
        try:
            async for event in self._parsed():
                if isinstance(event, TextDelta):
                    self._output_tokens += event.tokens
                    safe, matched = matcher.feed(event.text)
                    for out in self._text(safe):
                        yield out
                    if matched is not None:
                        stop_reason, stop_sequence = "stop_sequence", matched
                        break
                elif isinstance(event, ThinkingDelta):
                    self._output_tokens += event.tokens
                    if self.request.thinking.requested:
                        for out in self._thinking(event.thinking):
                            yield out
                elif isinstance(event, ToolCallStart):
                    self._output_tokens += event.tokens
                    for out in self._text(matcher.flush()):
                        yield out
                    self._held_space = ""
                    block = {"type": "tool_use", "id": event.id or tool_use_id(), "name": event.name, "input": {}}
                    for out in self._open_block("tool_use", block):
                        yield out
                elif isinstance(event, ToolCallDelta):
                    self._output_tokens += event.tokens
                    if self._open != "tool_use":
                        raise ApiError(f"driver '{self.driver.name}' sent tool arguments outside a tool call")
                    yield {
                        "type": "content_block_delta",
                        "index": self._index,
                        "delta": {"type": "input_json_delta", "partial_json": event.partial_json},
                    }
                elif isinstance(event, ToolCallEnd):
                    self._output_tokens += event.tokens
                    if self._open == "tool_use":
                        self._tool_calls += 1
                    for out in self._close_block():
                        yield out
                    if not parallel and self._tool_calls >= 1:
                        stop_reason = "tool_use"  # disable_parallel_tool_use: at most one call
                        break
                elif isinstance(event, Finished):
                    stop_reason = event.stop_reason
                    driver_output_tokens = event.output_tokens
                    self._correct_input_usage(event)
                elif isinstance(event, Started):
                    raise ApiError(f"driver '{self.driver.name}' started the message twice")
        except MissiveError:
            raise
        except Exception as exc:
            log.exception("driver %s failed mid-generation", self.driver.name)
            raise ApiError(f"internal error in driver '{self.driver.name}': {type(exc).__name__}") from exc
        finally:
            await self.aclose()
        if stop_sequence is None:
            for out in self._text(matcher.flush()):
                yield out
        for out in self._close_block():
            yield out
        if self._tool_calls and stop_reason in ("end_turn", "stop_sequence"):
            stop_reason, stop_sequence = "tool_use", None
        output_tokens = driver_output_tokens if driver_output_tokens is not None else self._output_tokens
        yield {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {**self._input_usage(), "output_tokens": output_tokens},
        }
        yield {"type": "message_stop"}


    def _from_parse(self, parsed: object) -> GenerationEvent:
        """A parser event as a generation event (tokens were counted already)."""
        if isinstance(parsed, Reasoning):
            return ThinkingDelta(parsed.text, tokens=0)
        return _from_parse(parsed)


def _from_parse(parsed: object) -> GenerationEvent:
    """A parser event as a generation event (tokens were counted already)."""
    if isinstance(parsed, Text):
        return TextDelta(parsed.text, tokens=0)
    if isinstance(parsed, CallStart):
        return ToolCallStart(parsed.name)
    if isinstance(parsed, CallArgs):
        return ToolCallDelta(parsed.partial_json, tokens=0)
    assert isinstance(parsed, CallEnd)
    return ToolCallEnd()


def _first(value: int | None, default: int) -> int:
    return default if value is None else value


def accumulate(events: list[Event]) -> dict[str, Any]:
    """Fold stream events into the non-streaming ``Message`` body (contract section 3)."""
    message: dict[str, Any] = {}
    partial_json: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block = message["content"][event["index"]]
            delta = event["delta"]
            dtype = delta["type"]
            if dtype == "text_delta":
                block["text"] += delta["text"]
            elif dtype == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif dtype == "signature_delta":
                block["signature"] = delta["signature"]
            elif dtype == "input_json_delta":
                partial_json[event["index"]] = partial_json.get(event["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            index = event["index"]
            if index in partial_json:
                raw = partial_json.pop(index)
                message["content"][index]["input"] = json.loads(raw) if raw.strip() else {}
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"]["stop_reason"]
            message["stop_sequence"] = event["delta"]["stop_sequence"]
            message["usage"] = dict(event["usage"])
    return message
