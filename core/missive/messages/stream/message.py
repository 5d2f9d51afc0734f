"""The loop from driver events to the API's stream events (:class:`MessageStream`).

The loop itself owns what is not a concern of its own module: the event
order (``message_start``, content block events, ``message_delta``,
``message_stop``), stop sequences (matched exactly on the answer text, with
hold-back: :class:`~missive.messages.stop_sequences.StopMatcher`; on a match
generation is stopped and ``stop_reason`` is ``stop_sequence``), thinking
the client did not ask for (dropped, though counted in ``output_tokens``),
and a driver's failures (a :class:`~missive.protocol.errors.MissiveError`
goes on as it is; anything else is a 500 ``api_error`` naming the driver).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio

from ...driver.events import (
    Finished,
    GenerationEvent,
    Started,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ...driver.interface import Driver, GenerationRequest
from ...protocol.errors import ApiError, MissiveError
from ...protocol.ids import client_tool_id
from ...thinking.between_tools import progress_as_thinking
from ...thinking.signing import Signer
from ...tools.server_runner import ServerToolRunner
from ..stop_sequences import StopMatcher
from .blocks import Blocks, Event
from .parsing import parsed_events
from .server_tools import ServerCalls
from .tool_use import check_call, check_structured_output, unrepeated
from .usage import Usage, final_stop_reason

__all__ = ["MessageStream"]

log = logging.getLogger("missive.pipeline")

#: The blocks of calls the server answers (server tools, MCP tools).
SERVER_CALLS = ("server_tool_use", "mcp_tool_use")


class MessageStream:
    """The API events of one answer.

    Usage::

        stream = MessageStream(driver, request, message_id=..., model=...)
        first = await stream.start()      # message_start; errors here are HTTP errors
        async for event in stream.events():
            ...                           # errors here happen mid-stream

    Attributes:
        request: the driver's request of the current round (server tools
            continue the message on a longer conversation).
        source: the driver's running generation (None before :meth:`start`
            and once closed).
        blocks, usage: the message's content blocks and token counts.
        tool_calls: client tool calls completed.
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
        self.request = request
        self.message_id = message_id
        self.model = model
        self.source: AsyncIterator[GenerationEvent] | None = None
        self.blocks = Blocks(
            request.thinking, request.thinking_position, signer or Signer(secrets.token_bytes(32))
        )
        self.usage = Usage(request.max_tokens)
        self.tool_calls = 0
        self._server = ServerCalls(server_tools)
        self._prelude: list[Event] = []
        self._checked_call: tuple[str, list[str]] | None = (
            None  # tool_use name and arguments, for the schema check
        )

    async def start(self) -> Event:
        """Run the driver up to its :class:`Started` event; return ``message_start``.

        Raises:
            MissiveError: from the driver (prompt too long, backend down...).
        """
        if self.request.server_call is not None:
            self._prelude = await self._server.first(self)
        self.source = self.driver.generate(self.request).__aiter__()
        try:
            first = await self.source.__anext__()
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
        self.usage.start(first)
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
                "usage": {**self.usage.input(), "output_tokens": 0},
            },
        }

    async def aclose(self) -> None:
        """Stop the driver's generation (idempotent)."""
        source, self.source = self.source, None
        if source is not None and hasattr(source, "aclose"):
            await source.aclose()

    def parsed(self) -> AsyncGenerator[GenerationEvent, None]:
        """The current round's driver events through its parsers (:mod:`.parsing`)."""
        assert self.source is not None
        return parsed_events(self.driver, self.request, self.source, self._count)

    def _count(self, tokens: int) -> None:
        self.usage.output_tokens += tokens

    def _stages(self) -> AsyncGenerator[GenerationEvent, None]:
        """The driver's events through the stages this request needs: rounds
        after server tools' results only with server tools, the
        repeated-call check only with tools, progress updates as thinking
        with ``between_tools``; each stage is one more generator every event
        passes through."""
        tools = self.request.tools
        source = self._server.rounds(self) if any(t.server for t in tools) else self.parsed()
        staged = unrepeated(source, self.request, self._count) if tools else source
        if self.request.thinking.between_tools:
            calls = bool(tools) and self.request.tool_choice.mode != "none"
            return progress_as_thinking(staged, calls_possible=calls)
        return staged

    def _call_start(self, event: ToolCallStart) -> list[Event]:
        """Open a ``tool_use`` block, or a ``server_tool_use`` block for a server tool."""
        server = self._server.tool_of(self.request, event.name)
        if server is not None:
            return self._server.open_call(self, server, event.name)
        self._checked_call = (event.name, [])
        block = {"type": "tool_use", "id": client_tool_id(event.id), "name": event.name, "input": {}}
        return self.blocks.open_block("tool_use", block)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Content block events, then ``message_delta`` and ``message_stop``.

        Raises:
            MissiveError: a driver failure after the stream started (the
                caller sends it as an SSE ``error`` event).
        """
        assert self.source is not None, "start() first"
        for out in self._prelude:
            yield out
        blocks, usage = self.blocks, self.usage
        matcher = StopMatcher(self.request.stop_sequences)
        stop_reason: str = "end_turn"
        stop_sequence: str | None = None
        driver_output_tokens: int | None = None
        parallel = self.request.tool_choice.parallel
        try:
            async with aclosing(self._stages()) as source:
                async for event in source:
                    if isinstance(event, TextDelta):
                        usage.output_tokens += event.tokens
                        safe, matched = matcher.feed(event.text)
                        for out in blocks.text(safe):
                            yield out
                        if matched is not None:
                            stop_reason, stop_sequence = "stop_sequence", matched
                            break
                    elif isinstance(event, ThinkingDelta):
                        usage.output_tokens += event.tokens
                        usage.thinking_tokens += event.tokens
                        if self.request.thinking.shows_blocks:
                            for out in blocks.thinking(event.thinking):
                                yield out
                    elif isinstance(event, ToolCallStart):
                        usage.output_tokens += event.tokens
                        for out in blocks.text(matcher.flush()):
                            yield out
                        blocks.drop_held_space()
                        for out in self._call_start(event):
                            yield out
                    elif isinstance(event, ToolCallDelta):
                        usage.output_tokens += event.tokens
                        yield self._arguments(event)
                    elif isinstance(event, ToolCallEnd):
                        usage.output_tokens += event.tokens
                        if blocks.open in SERVER_CALLS:
                            for out in await self._server.end_call(self):
                                yield out
                            if self._server.round_stop is not None:
                                break  # no continuation: pause_turn or max_tokens
                            continue
                        if blocks.open == "tool_use":
                            self.tool_calls += 1
                            if self._checked_call is not None:
                                (name, fragments), self._checked_call = self._checked_call, None
                                check_call(self.request, name, fragments)
                        for out in blocks.close_block():
                            yield out
                        if not parallel and self.tool_calls >= 1:
                            stop_reason = "tool_use"  # disable_parallel_tool_use: at most one call
                            break
                    elif isinstance(event, Finished):
                        stop_reason = event.stop_reason
                        driver_output_tokens = event.output_tokens
                        usage.correct(event)
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
            for out in blocks.text(matcher.flush()):
                yield out
        for out in blocks.close_block():
            yield out
        yield self._message_delta(stop_reason, stop_sequence, driver_output_tokens)
        yield {"type": "message_stop"}

    def _arguments(self, event: ToolCallDelta) -> Event:
        """The ``input_json_delta`` of a call's argument fragment."""
        if self.blocks.open not in ("tool_use", *SERVER_CALLS):
            raise ApiError(f"driver '{self.driver.name}' sent tool arguments outside a tool call")
        if self.blocks.open in SERVER_CALLS:
            self._server.args += event.partial_json
        elif self._checked_call is not None:
            self._checked_call[1].append(event.partial_json)
        return self.blocks.delta({"type": "input_json_delta", "partial_json": event.partial_json})

    def _message_delta(
        self, stop_reason: str, stop_sequence: str | None, driver_output_tokens: int | None
    ) -> Event:
        """The ``message_delta`` ending the message (:mod:`.usage`)."""
        if self._server.round_stop is not None:
            stop_reason = self._server.round_stop
        stop_reason, stop_sequence = final_stop_reason(stop_reason, stop_sequence, tool_calls=self.tool_calls)
        if stop_reason == "end_turn" and not self.tool_calls:
            check_structured_output(self.request, self.blocks.round_text)
        usage: dict[str, Any] = self.usage.final(driver_output_tokens)
        server_tool_use = self._server.usage()
        if server_tool_use is not None:
            usage["server_tool_use"] = server_tool_use
        return {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        }
