"""Reasoning and tool calls a model writes as text, turned into events.

A driver whose backend returns raw text leaves it to the core: its
reasoning parser (if it returns one) separates reasoning from the answer,
then its tool parser (if it returns one, for a request with tools and a
``tool_choice`` other than ``none``) finds the calls in the answer text
(:mod:`missive.reasoning`, :mod:`missive.tools.parsers`). A tool parser that
handles reasoning itself replaces the reasoning parser. Tokens are counted on
the driver's text deltas; the derived events carry 0.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from ...driver.events import (
    Finished,
    GenerationEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ...driver.interface import Driver, GenerationRequest
from ...driver.parsing import (
    CallArgs,
    CallEnd,
    CallStart,
    MalformedToolCall,
    ParseEvent,
    Reasoning,
    ReasoningParser,
    Text,
    ToolParser,
)
from ...protocol.errors import BadGatewayError
from ...tools.parsers.unparsed import UnparsedCallWatch

__all__ = ["parsed_events"]

log = logging.getLogger("missive.pipeline")


class _Parsers:
    """The parsers of one generation round, and the watch for calls written
    in another format than the tool parser's
    (:class:`~missive.tools.parsers.unparsed.UnparsedCallWatch`)."""

    def __init__(self, driver: Driver, request: GenerationRequest) -> None:
        self.tool: ToolParser | None = None
        self.watch: UnparsedCallWatch | None = None
        if request.tools and request.tool_choice.mode != "none":
            self.tool = driver.tool_parser(request)
            if self.tool is not None:
                self.watch = UnparsedCallWatch(driver.model_id, self.tool, driver.tool_parser_specs)
        self._space = ""  # whitespace held before a possible call (_from_tool)
        self.reasoning: ReasoningParser | None = None
        if self.tool is None or not self.tool.handles_reasoning:
            self.reasoning = driver.reasoning_parser(request)
            if self.tool is not None and self.reasoning is not None:
                self.reasoning.interrupts = self.tool.call_openers

    def feed(self, text: str) -> list[GenerationEvent]:
        pieces: list[object] = list(self.reasoning.feed(text)) if self.reasoning else [Text(text)]
        return self._split(pieces)

    def finish(self, cut: bool = False) -> list[GenerationEvent]:
        """Events for what the parsers hold at the end; ``cut``: the
        generation was cut by ``max_tokens`` (an unfinished call is dropped:
        :meth:`~missive.driver.parsing.ToolParser.finish_cut`)."""
        out = self._split(list(self.reasoning.finish())) if self.reasoning is not None else []
        if self.tool is not None:
            out += self._from_tool(self.tool.finish_cut() if cut else self.tool.finish())
            out += self._flush_space()
            if self.watch is not None:
                self.watch.finish()
        return out

    def _split(self, pieces: list[object]) -> list[GenerationEvent]:
        """Reasoning parser output through the tool parser."""
        out: list[GenerationEvent] = []
        for piece in pieces:
            if isinstance(piece, Text) and self.tool is not None:
                out += self._from_tool(self.tool.feed(piece.text))
            else:
                out += self._flush_space()
                out.append(_from_parse(piece))
        return out

    def _from_tool(self, parsed: list[ParseEvent]) -> list[GenerationEvent]:
        """Tool parser events as generation events. Where the format writes
        whitespace before a call as part of its markup
        (:attr:`~missive.driver.parsing.ToolParser.space_before_call`),
        trailing whitespace of the text is held until more text follows,
        and dropped when a call comes next."""
        out: list[GenerationEvent] = []
        trims = self.tool is not None and self.tool.space_before_call
        for event in parsed:
            if isinstance(event, Text):
                if self.watch is not None:
                    self.watch.feed(event.text)
                if trims:
                    text = self._space + event.text
                    body = text.rstrip()
                    self._space = text[len(body) :]
                    if body:
                        out.append(TextDelta(body, tokens=0))
                    continue
            elif isinstance(event, CallStart):
                self._space = ""
            else:
                out += self._flush_space()
            out.append(_from_parse(event))
        return out

    def _flush_space(self) -> list[GenerationEvent]:
        space, self._space = self._space, ""
        return [TextDelta(space, tokens=0)] if space else []


async def parsed_events(
    driver: Driver,
    request: GenerationRequest,
    source: AsyncIterator[GenerationEvent],
    count: Callable[[int], None],
) -> AsyncGenerator[GenerationEvent, None]:
    """``source`` with reasoning and tool calls written as text turned into
    thinking and call events; ``count`` receives the tokens of the text
    deltas it parses (the events it yields carry 0).

    Raises:
        BadGatewayError: a malformed tool call (one cut off by ``max_tokens``
            is kept as it came: the API answers 200 with the incomplete block).
    """
    parsers = _Parsers(driver, request)
    if parsers.reasoning is None and parsers.tool is None:
        async for event in source:
            yield event
        return
    flushed = False
    try:
        async for event in source:
            if isinstance(event, TextDelta):
                count(event.tokens)
                for converted in parsers.feed(event.text):
                    yield converted
                continue
            if isinstance(event, Finished) and not flushed:
                flushed = True
                for converted in _flush_at_end(parsers, event):
                    yield converted
            yield event
        if not flushed:
            for converted in parsers.finish():
                yield converted
    except MalformedToolCall as exc:
        raise BadGatewayError(f"the model produced a malformed tool call: {exc}") from exc


def _flush_at_end(parsers: _Parsers, finished: Finished) -> list[GenerationEvent]:
    """What the parsers still hold when the driver says it finished."""
    try:
        flushed = parsers.finish(cut=finished.stop_reason == "max_tokens")
    except MalformedToolCall as exc:
        if finished.stop_reason != "max_tokens":
            raise
        # A call cut off by max_tokens: the API answers 200 with
        # stop_reason max_tokens and the incomplete tool_use block.
        log.info("tool call cut off by max_tokens: %s", exc)
        flushed = []
    if finished.stop_reason == "max_tokens" and parsers.tool is not None and parsers.tool.strict:
        # A constrained reply holds only calls: what is left is the
        # start of a call's markup (``<tool_``), not answer text.
        flushed = [e for e in flushed if not isinstance(e, TextDelta)]
    return flushed


def _from_parse(parsed: object) -> GenerationEvent:
    """A parser event as a generation event (tokens were counted already)."""
    if isinstance(parsed, Reasoning):
        return ThinkingDelta(parsed.text, tokens=0)
    if isinstance(parsed, Text):
        return TextDelta(parsed.text, tokens=0)
    if isinstance(parsed, CallStart):
        return ToolCallStart(parsed.name)
    if isinstance(parsed, CallArgs):
        return ToolCallDelta(parsed.partial_json, tokens=0)
    assert isinstance(parsed, CallEnd)
    return ToolCallEnd()
