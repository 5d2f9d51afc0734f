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
* a call of a server tool (``web_search``, ``web_fetch``) is a
  ``server_tool_use`` block, answered at once by its result block: the
  tool's results when the server runs it
  (:class:`~missive.tools.server_runner.ServerToolRunner`), else the
  ``unavailable`` error; then the model goes on after the result, as with
  the API's server-side loop: generation is restarted on the conversation
  plus the answer so far (:func:`~missive.conversation.continue_after`), in
  the same message (:mod:`missive.tools.server`); a call the server makes
  itself (``GenerationRequest.server_call``) comes first, before the model
  answers;
* ``message_delta`` carries cumulative usage, input and cache fields repeated
  (corrected by :class:`~missive.events.Finished` when the driver learned the
  exact prompt split only at the end).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import anyio

from .conversation import continue_after
from .driver import Driver, GenerationRequest
from .errors import ApiError, BadGatewayError, MissiveError, PromptTooLongError
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
from .ids import client_tool_id
from .tools.validate import parsed, schema_violation
from .reasoning.base import ReasoningParser
from .stop_sequences import StopMatcher
from .thinking.between_tools import progress_as_thinking
from .thinking.signing import Signer
from .tools.definitions import choice_after_server_call
from .tools.server_runner import ServerToolRunner
from .tools.parsers.base import CallArgs, CallEnd, CallStart, MalformedToolCall, Reasoning, Text, ToolParser
from .tools.parsers.unparsed import UnparsedCallWatch
from .tools.server import (
    MAX_SERVER_CALLS,
    UNAVAILABLE,
    ServerTool,
    answer_blocks,
    error_result,
    max_uses_of,
    server_tool_use_block,
)

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
        server_tools: ServerToolRunner | None = None,
    ) -> None:
        """``signer``: the server's thinking-block signer (a throwaway key when
        None, for drivers exercised outside a server). ``server_tools``: runs
        ``web_fetch``/``web_search`` calls (None: every call is answered
        ``unavailable``)."""
        self.driver = driver
        self._runner = server_tools
        self._results: list[dict[str, Any]] = []  # server tool results of this message
        self._runs = {"web_search": 0, "web_fetch": 0}
        self._prelude: list[Event] = []
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
        # Server tools: the open call, calls answered, and what the
        # continuation after a result needs (this round's text, usage and
        # tokens of the rounds before, the output budget).
        self._checked_call: tuple[str, list[str]] | None = None  # tool_use name and arguments, for the schema check
        self._server_call: tuple[ServerTool, dict[str, Any]] | None = None
        self._server_args = ""
        self._server_blocks = 0
        self._server_answers = 0
        self._server_uses: dict[str, int] = {}
        self._resume: GenerationRequest | None = None
        self._round_stop: str | None = None
        self._round_text = ""
        self._watch: UnparsedCallWatch | None = None
        self._usage_before = dict.fromkeys(
            ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"), 0
        )
        self._settled_tokens = 0
        self._round_start_tokens = 0
        self._budget = request.max_tokens

    async def start(self) -> Event:
        """Run the driver up to its :class:`Started` event; return ``message_start``.

        Raises:
            MissiveError: from the driver (prompt too long, backend down...).
        """
        if self.request.server_call is not None:
            await self._server_first()
        self._source = self.driver.generate(self.request).__aiter__()
        try:
            first = await self._source.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise ApiError(f"driver '{self.driver.name}' ended without starting a message") from None
        except BaseException:
            # Shielded: cancelled by a cancel scope (the end of a shutdown's
            # grace), every await here would be cancelled again.
            with anyio.CancelScope(shield=True):
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
        usage = {
            "input_tokens": started.input_tokens,
            "cache_creation_input_tokens": started.cache_creation_input_tokens,
            "cache_read_input_tokens": started.cache_read_input_tokens,
        }
        # Plus the rounds before a server tool's result: usage is cumulative.
        return {key: value + self._usage_before[key] for key, value in usage.items()}

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
        self._round_text += text
        events.append(
            {"type": "content_block_delta", "index": self._index, "delta": {"type": "text_delta", "text": text}}
        )
        return events

    def _parsers(self) -> tuple[ReasoningParser | None, ToolParser | None]:
        request = self.request
        tool: ToolParser | None = None
        if request.tools and request.tool_choice.mode != "none":
            tool = self.driver.tool_parser(request)
            if tool is not None:
                self._watch = UnparsedCallWatch(self.driver.model_id, tool, self.driver.tool_parser_specs)
        reasoning = None
        if tool is None or not tool.handles_reasoning:
            reasoning = self.driver.reasoning_parser(request)
        return reasoning, tool

    def _split(
        self, reasoning: ReasoningParser | None, tool: ToolParser | None, pieces: list[object]
    ) -> list[GenerationEvent]:
        """Reasoning parser output through the tool parser, as generation events."""
        out: list[GenerationEvent] = []
        for piece in pieces:
            if isinstance(piece, Text) and tool is not None:
                out += [self._from_tool(parsed) for parsed in tool.feed(piece.text)]
            else:
                out.append(self._from_parse(piece))
        return out

    def _flush(self, reasoning: ReasoningParser | None, tool: ToolParser | None) -> list[GenerationEvent]:
        out = self._split(reasoning, tool, list(reasoning.finish())) if reasoning is not None else []
        if tool is not None:
            out += [self._from_tool(parsed) for parsed in tool.finish()]
            if self._watch is not None:
                self._watch.finish()
        return out

    def _from_tool(self, parsed: object) -> GenerationEvent:
        """A tool parser's event; its answer text is watched for calls in
        another format (:class:`~missive.tools.parsers.unparsed.UnparsedCallWatch`)."""
        if isinstance(parsed, Text) and self._watch is not None:
            self._watch.feed(parsed.text)
        return self._from_parse(parsed)

    async def _parsed(self) -> AsyncGenerator[GenerationEvent, None]:
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
                    try:
                        flushed_events = self._flush(reasoning, tool)
                    except MalformedToolCall as exc:
                        if event.stop_reason != "max_tokens":
                            raise
                        # A call cut off by max_tokens: the API answers 200 with
                        # stop_reason max_tokens and the incomplete tool_use block.
                        log.info("tool call cut off by max_tokens: %s", exc)
                        flushed_events = []
                    if event.stop_reason == "max_tokens" and tool is not None and tool.strict:
                        # A constrained reply holds only calls: what is left is the
                        # start of a call's markup (``<tool_``), not answer text.
                        flushed_events = [e for e in flushed_events if not isinstance(e, TextDelta)]
                    for converted in flushed_events:
                        yield converted
                yield event
            if not flushed:
                for converted in self._flush(reasoning, tool):
                    yield converted
        except MalformedToolCall as exc:
            raise BadGatewayError(f"the model produced a malformed tool call: {exc}") from exc

    async def events(self) -> AsyncGenerator[Event, None]:
        """Content block events, then ``message_delta`` and ``message_stop``.

        Raises:
            MissiveError: a driver failure after the stream started (the
                caller sends it as an SSE ``error`` event).
        """
        assert self._source is not None, "start() first"
        for out in self._prelude:
            yield out
        matcher = StopMatcher(self.request.stop_sequences)
        stop_reason: str = "end_turn"
        stop_sequence: str | None = None
        driver_output_tokens: int | None = None
        parallel = self.request.tool_choice.parallel
        try:
            async with aclosing(self._stages()) as source:
                async for event in source:
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
                        if self.request.thinking.shows_blocks:
                            for out in self._thinking(event.thinking):
                                yield out
                    elif isinstance(event, ToolCallStart):
                        self._output_tokens += event.tokens
                        for out in self._text(matcher.flush()):
                            yield out
                        self._held_space = ""
                        for out in self._call_start(event):
                            yield out
                    elif isinstance(event, ToolCallDelta):
                        self._output_tokens += event.tokens
                        if self._open not in ("tool_use", "server_tool_use"):
                            raise ApiError(f"driver '{self.driver.name}' sent tool arguments outside a tool call")
                        if self._open == "server_tool_use":
                            self._server_args += event.partial_json
                        elif self._checked_call is not None:
                            self._checked_call[1].append(event.partial_json)
                        yield {
                            "type": "content_block_delta",
                            "index": self._index,
                            "delta": {"type": "input_json_delta", "partial_json": event.partial_json},
                        }
                    elif isinstance(event, ToolCallEnd):
                        self._output_tokens += event.tokens
                        if self._open == "server_tool_use":
                            for out in await self._end_server_call():
                                yield out
                            if self._round_stop is not None:
                                break  # no continuation: pause_turn or max_tokens
                            continue
                        if self._open == "tool_use":
                            self._tool_calls += 1
                            self._check_call()
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
        if self._round_stop is not None:
            stop_reason = self._round_stop
        if self._tool_calls and stop_reason in ("end_turn", "stop_sequence"):
            stop_reason, stop_sequence = "tool_use", None
        if stop_reason == "end_turn" and not self._tool_calls:
            self._check_structured_output()
        round_tokens = self._output_tokens - self._round_start_tokens
        if driver_output_tokens is not None:
            round_tokens = driver_output_tokens
        output_tokens = self._settled_tokens + round_tokens
        usage: dict[str, Any] = {**self._input_usage(), "output_tokens": output_tokens}
        if self._server_blocks:
            # Searches and fetches that ran (calls answered with an error did not).
            usage["server_tool_use"] = {
                "web_search_requests": self._runs["web_search"], "web_fetch_requests": self._runs["web_fetch"]
            }
        yield {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        }
        yield {"type": "message_stop"}

    # -- schema checks -----------------------------------------------------

    def _check_call(self) -> None:
        """Log a complete tool_use input that breaks its tool's input_schema
        (:mod:`missive.tools.validate`); the call is returned as generated."""
        if self._checked_call is None:
            return
        name, fragments = self._checked_call
        self._checked_call = None
        tool = next((t for t in self.request.tools if t.name == name), None)
        if tool is None:
            return
        problem = schema_violation(tool.input_schema, _input_object("".join(fragments)))
        if problem is not None:
            log.warning("%s: tool_use '%s' input does not match its input_schema: %s",
                        self.request.request_id, name, problem)

    def _check_structured_output(self) -> None:
        """Log a structured-output answer (``output_config.format``) that is
        not JSON valid against its schema."""
        schema = self.request.request.output_format_schema()
        if schema is None:
            return
        problem = schema_violation(schema, parsed(self._round_text))
        if problem is not None:
            log.warning("%s: the answer does not match output_config.format: %s", self.request.request_id, problem)

    # -- server tools ------------------------------------------------------

    def _call_start(self, event: ToolCallStart) -> list[Event]:
        """Open a ``tool_use`` block, or a ``server_tool_use`` block (id
        ``srvtoolu_...``, whatever id the driver gave) for a server tool."""
        server = next((t.server for t in self.request.tools if t.name == event.name and t.server), None)
        if server is None:
            self._checked_call = (event.name, [])
            block = {"type": "tool_use", "id": client_tool_id(event.id), "name": event.name, "input": {}}
            return self._open_block("tool_use", block)
        block = server_tool_use_block(event.name)
        self._server_call, self._server_args = (server, block), ""
        self._server_blocks += 1
        return self._open_block("server_tool_use", block)

    async def _answer(self, tool: ServerTool, call_id: str, call_input: dict[str, Any]) -> dict[str, Any]:
        """The result block of one call: ``max_uses_exceeded`` beyond the
        tool's ``max_uses``, the tool's results when the server runs it
        (``_runs`` counts it), else ``unavailable``."""
        self._server_answers += 1
        self._server_uses[tool.name] = uses = self._server_uses.get(tool.name, 0) + 1
        limit = max_uses_of(self.request.request, tool.name)
        if limit is not None and uses > limit:
            result = error_result(tool, call_id, "max_uses_exceeded")
        elif self._runner is not None and self._runner.runs(tool.name):
            result = await self._runner.run(tool, call_id, call_input, self.request.request, self._results)
            content = result.get("content")
            if not (isinstance(content, dict) and str(content.get("type", "")).endswith("_error")):
                self._runs[tool.name] = self._runs.get(tool.name, 0) + 1
        else:
            result = error_result(tool, call_id, UNAVAILABLE)
        self._results.append(result)
        return result

    async def _server_first(self) -> None:
        """Run the request's ``server_call`` before the model answers: its
        ``server_tool_use`` block and result become the first events
        (``_prelude``), and the model is asked to go on after the result."""
        request = self.request
        assert request.server_call is not None
        name, call_input = request.server_call
        tool = next(t.server for t in request.tools if t.name == name and t.server is not None)
        block = server_tool_use_block(name)
        self._server_blocks += 1
        events = self._open_block("server_tool_use", block)
        events.append({"type": "content_block_delta", "index": self._index,
                       "delta": {"type": "input_json_delta", "partial_json": json.dumps(call_input)}})
        events += self._close_block()
        result = await self._answer(tool, block["id"], call_input)
        events += self._open_block(tool.result_type, result)
        events += self._close_block()
        self._prelude = events
        call = {**block, "input": call_input}
        conversation = continue_after(request.conversation, answer_blocks("", call, result))
        self.request = replace(request, conversation=conversation, server_call=None)

    async def _end_server_call(self) -> list[Event]:
        """Close a ``server_tool_use`` block and answer it.

        Its result block (whole, in ``content_block_start`` + ``_stop``)
        carries the tool's results or an error (:meth:`_answer`); then either ``_resume`` holds the
        request that goes on after it, or ``_round_stop`` says why the turn
        ends here: ``pause_turn`` (:data:`MAX_SERVER_CALLS` answered, or the
        driver cannot go on without forcing a tool) or ``max_tokens`` (no
        output budget left). A call made after a client tool call is left
        unanswered and generation goes on: the API answers it only once the
        client's results come back, and the turn ends with ``tool_use``
        (Anthropic docs, "Server tools").
        """
        assert self._server_call is not None
        (tool, block), self._server_call = self._server_call, None
        events = self._close_block()
        if self._tool_calls:
            return events
        call = {**block, "input": _input_object(self._server_args)}
        result = await self._answer(tool, block["id"], call["input"])
        events += self._open_block(tool.result_type, result)
        events += self._close_block()
        self._resume, self._round_stop = self._continuation(call, result)
        return events

    def _continuation(
        self, call: dict[str, Any], result: dict[str, Any]
    ) -> tuple[GenerationRequest | None, str | None]:
        """The request that goes on after ``result``, or why there is none."""
        request = self.request
        if self._server_answers >= MAX_SERVER_CALLS:
            return None, "pause_turn"
        used = self._settled_tokens + self._output_tokens - self._round_start_tokens
        if used >= self._budget:
            return None, "max_tokens"
        choice = choice_after_server_call(request.tool_choice, self.driver.capabilities, request.tools)
        if choice is None:
            return None, "pause_turn"
        conversation = continue_after(request.conversation, answer_blocks(self._round_text, call, result))
        remaining = self._budget - used
        return replace(request, conversation=conversation, max_tokens=remaining, tool_choice=choice), None

    def _stages(self) -> AsyncGenerator[GenerationEvent, None]:
        """The driver's events through the stages this request needs: rounds
        after server tools' results (:meth:`_rounds`) only with server tools,
        the repeated-call check (:meth:`_unrepeated`) only with tools; each
        stage is one more generator every event passes through."""
        tools = self.request.tools
        source = self._rounds() if any(t.server for t in tools) else self._parsed()
        staged = self._unrepeated(source) if tools else source
        if self.request.thinking.between_tools:
            calls = bool(tools) and self.request.tool_choice.mode != "none"
            return progress_as_thinking(staged, calls_possible=calls)
        return staged

    async def _unrepeated(self, source: AsyncIterator[GenerationEvent]) -> AsyncGenerator[GenerationEvent, None]:
        """``source`` until the model repeats a tool call it already made.

        A small model forced to call a tool (``tool_choice`` ``any``/``tool``
        with parallel calls allowed) may write the same call again and again
        until ``max_tokens``: the answer would then end with ``max_tokens``
        and a client that runs tools on ``stop_reason: "tool_use"`` would run
        none. Every call after the first is therefore held until it is
        complete; one with the same name and the same input as an earlier
        call of this message ends the answer there (``tool_use``), dropped
        (its tokens still count as output). A held call cut off by the end of
        the stream is passed on as it came. Server tool calls pass through.
        """
        seen: set[tuple[str, str]] = set()
        current: tuple[str, list[str]] | None = None  # a call passing through: name, arguments
        held: list[GenerationEvent] | None = None
        server = {t.name for t in self.request.tools if t.server}
        try:
            async for event in source:
                if held is not None:
                    held.append(event)
                    if not isinstance(event, ToolCallEnd):
                        continue
                    start = held[0]
                    assert isinstance(start, ToolCallStart)
                    args = "".join(e.partial_json for e in held if isinstance(e, ToolCallDelta))
                    key = (start.name, _canonical(args))
                    if key in seen:
                        self._output_tokens += sum(e.tokens for e in held if isinstance(e, (ToolCallStart, ToolCallDelta, ToolCallEnd)))
                        log.info("%s: the model repeated its call of '%s'; the answer ends before it",
                                 self.request.request_id, start.name)
                        return
                    seen.add(key)
                    events, held = held, None
                    for out in events:
                        yield out
                    continue
                if isinstance(event, ToolCallStart) and event.name not in server:
                    if seen:
                        held = [event]
                        continue
                    current = (event.name, [])
                elif isinstance(event, ToolCallDelta) and current is not None:
                    current[1].append(event.partial_json)
                elif isinstance(event, ToolCallEnd) and current is not None:
                    seen.add((current[0], _canonical("".join(current[1]))))
                    current = None
                yield event
            for out in held or ():
                yield out
        finally:
            await source.aclose()  # type: ignore[attr-defined]

    async def _rounds(self) -> AsyncGenerator[GenerationEvent, None]:
        """:meth:`_parsed` events, round after round: when a server tool's
        result was sent (``_resume`` set), the running generation is stopped
        and the driver starts again on the continued request. A continued
        prompt that no longer fits the context ends the message with
        ``model_context_window_exceeded``."""
        while True:
            parsed = self._parsed()
            try:
                async for event in parsed:
                    yield event
                    if self._resume is not None:
                        break
            finally:
                await parsed.aclose()
            request, self._resume = self._resume, None
            if request is None:
                return
            await self.aclose()
            self._settled_tokens += self._output_tokens - self._round_start_tokens
            self._round_start_tokens = self._output_tokens
            self._round_text = ""
            self.request = request
            self._source = self.driver.generate(request).__aiter__()
            try:
                first = await self._source.__anext__()
            except PromptTooLongError:
                self._round_stop = "model_context_window_exceeded"
                return
            except StopAsyncIteration:
                raise ApiError(f"driver '{self.driver.name}' ended without starting a message") from None
            if not isinstance(first, Started):
                raise ApiError(f"driver '{self.driver.name}' sent {type(first).__name__} before Started")
            self._usage_before = self._input_usage()
            self._started = first


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


def _canonical(raw: str) -> str:
    """A call's arguments in one spelling (keys sorted, no spaces), so the
    same input written twice compares equal; the text itself if not JSON."""
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return raw


def _input_object(raw: str) -> Any:
    """A tool_use block's ``input`` from its concatenated ``partial_json``.

    Always one JSON object for a complete call; a call cut off by
    ``max_tokens`` (its fragments end mid-object) gets ``{}``, as the
    arguments are not usable (the API documents retrying with a larger
    ``max_tokens`` in that case).
    """
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {}


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
            elif dtype == "compaction_delta":  # whole, as the SDK's accumulator takes it
                block["content"] = delta["content"]
                block["encrypted_content"] = delta.get("encrypted_content")
        elif kind == "content_block_stop":
            index = event["index"]
            if index in partial_json:
                raw = partial_json.pop(index)
                message["content"][index]["input"] = _input_object(raw)
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"]["stop_reason"]
            message["stop_sequence"] = event["delta"]["stop_sequence"]
            message["usage"] = dict(event["usage"])
            if "context_management" in event:
                message["context_management"] = event["context_management"]
    return message
