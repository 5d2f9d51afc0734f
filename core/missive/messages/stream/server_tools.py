"""Server tools inside one message (``web_search``, ``web_fetch``).

Rules (Anthropic docs, "Server tools"; :mod:`missive.tools.server`):

* a call of a server tool is a ``server_tool_use`` block (id
  ``srvtoolu_...``, whatever id the driver gave), answered at once by its
  result block: the tool's results when the server runs it
  (:class:`~missive.tools.server_runner.ServerToolRunner`), else the
  ``unavailable`` error, or ``max_uses_exceeded`` beyond the tool's
  ``max_uses``;
* then the model goes on after the result, as with the API's server-side
  loop: generation is restarted on the conversation plus the answer so far
  (:func:`~missive.messages.conversation.continue_after`), in the same
  message, under the same admission slot, with what is left of
  ``max_tokens``; the turn ends ``pause_turn`` after
  :data:`~missive.tools.server.MAX_SERVER_CALLS` answers or when the driver
  cannot go on without forcing a tool, ``max_tokens`` when no budget is left,
  ``model_context_window_exceeded`` when the continued prompt no longer fits;
* a tool search's result loads the tools it references: the generation
  that goes on is offered them, their definitions rendered where the
  references stand (:mod:`missive.tools.tool_search`,
  :mod:`missive.tools.deferred`), so the model can call them in the same
  message;
* a call made after a client tool call is left unanswered and generation
  goes on: the API answers it only once the client's results come back;
* a call the server makes itself (``GenerationRequest.server_call``) comes
  first, before the model answers;
* ``usage.server_tool_use`` counts the searches and fetches that ran (calls
  answered with an error did not).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace
from typing import Any, Protocol

from ...driver.events import GenerationEvent, Started
from ...driver.interface import Driver, GenerationRequest
from ...driver.tools import ServerTool, ToolDefinition
from ...protocol.errors import ApiError, PromptTooLongError
from ...tools.deferred import expand_references
from ...tools.definitions import choice_after_server_call, offered_tools
from ...tools.mcp import mcp_tool_use_block
from ...tools.server import (
    MAX_SERVER_CALLS,
    UNAVAILABLE,
    answer_blocks,
    error_result,
    max_uses_of,
    server_tool_use_block,
)
from ...tools.server_runner import ServerToolRunner
from ..conversation import continue_after
from .blocks import Blocks, Event
from .tool_use import input_object
from .usage import Usage


class MessageStream(Protocol):
    """What the server calls need of their message
    (:class:`~missive.messages.stream.message.MessageStream`, which holds them)."""

    driver: Driver
    request: GenerationRequest
    source: AsyncIterator[GenerationEvent] | None
    usage: Usage
    tool_calls: int
    blocks: Blocks

    async def aclose(self) -> None: ...

    def parsed(self) -> AsyncGenerator[GenerationEvent, None]: ...


__all__ = ["ServerCalls"]


def _with_loaded(request: GenerationRequest, result: dict[str, Any]) -> tuple[ToolDefinition, ...]:
    """The request's tools and those a tool search's ``result`` loads (its
    ``tool_reference`` blocks), which are offered from then on."""
    content = result.get("content")
    if result.get("type") != "tool_search_tool_result" or not isinstance(content, dict):
        return request.tools
    names = {ref["tool_name"] for ref in content.get("tool_references", [])} - {t.name for t in request.tools}
    if not names:
        return request.tools
    offered, _ = offered_tools(request.request, also_loaded=frozenset(names))
    return request.tools + tuple(t for t in offered if t.name in names)


class ServerCalls:
    """The server tool calls of one message.

    Args:
        runner: runs ``web_fetch``/``web_search`` calls (None: every call
            is answered ``unavailable``).

    Attributes:
        blocks: ``server_tool_use`` blocks sent.
        args: the arguments of the open call so far.
        resume: the request that goes on after the last result, when the
            running generation is to be stopped for it.
        round_stop: why the turn ends after a result (``pause_turn``,
            ``max_tokens``, ``model_context_window_exceeded``), else None.
    """

    def __init__(self, runner: ServerToolRunner | None) -> None:
        self._runner = runner
        self._results: list[dict[str, Any]] = []  # results of this message, for the runner
        self._runs = {"web_search": 0, "web_fetch": 0}
        self._call: tuple[ServerTool, dict[str, Any]] | None = None
        self._answers = 0
        self._uses: dict[str, int] = {}
        self.blocks = 0
        self.args = ""
        self.resume: GenerationRequest | None = None
        self.round_stop: str | None = None

    @staticmethod
    def tool_of(request: GenerationRequest, name: str) -> ServerTool | None:
        """The server tool offered as ``name`` (None: a client tool)."""
        return next((t.server for t in request.tools if t.name == name and t.server), None)

    def open_call(self, stream: MessageStream, tool: ServerTool, name: str) -> list[Event]:
        """Open a ``server_tool_use`` block for a call of ``tool`` (an
        ``mcp_tool_use`` block for a tool of an MCP server)."""
        if tool.server_name is not None:
            block = mcp_tool_use_block(tool)
        else:
            block = server_tool_use_block(name)
            self.blocks += 1
        self._call, self.args = (tool, block), ""
        return stream.blocks.open_block(block["type"], block)

    def usage(self) -> dict[str, int] | None:
        """``usage.server_tool_use``, when the message holds a server tool call."""
        if not self.blocks:
            return None
        return {
            "web_search_requests": self._runs["web_search"],
            "web_fetch_requests": self._runs["web_fetch"],
        }

    async def _answer(
        self, request: GenerationRequest, tool: ServerTool, call_id: str, call_input: dict[str, Any]
    ) -> dict[str, Any]:
        """The result block of one call (see the module doc)."""
        self._answers += 1
        self._uses[tool.name] = uses = self._uses.get(tool.name, 0) + 1
        limit = max_uses_of(request.request, tool.name)
        if limit is not None and uses > limit:
            result = error_result(tool, call_id, "max_uses_exceeded")
        elif self._runner is not None and (tool.server_name is not None or self._runner.runs(tool.name)):
            result = await self._runner.run(tool, call_id, call_input, request.request, self._results)
            content = result.get("content")
            if not (isinstance(content, dict) and str(content.get("type", "")).endswith("_error")):
                self._runs[tool.name] = self._runs.get(tool.name, 0) + 1
        else:
            result = error_result(tool, call_id, UNAVAILABLE)
        self._results.append(result)
        return result

    async def first(self, stream: MessageStream) -> list[Event]:
        """Run the request's ``server_call`` before the model answers: its
        ``server_tool_use`` block and result, the first events of the
        message; the stream's request goes on after the result."""
        request = stream.request
        assert request.server_call is not None
        name, call_input = request.server_call
        tool = next(t.server for t in request.tools if t.name == name and t.server is not None)
        blocks = stream.blocks
        block = server_tool_use_block(name)
        self.blocks += 1
        events = blocks.open_block("server_tool_use", block)
        events.append(blocks.delta({"type": "input_json_delta", "partial_json": json.dumps(call_input)}))
        events += blocks.close_block()
        result = await self._answer(request, tool, block["id"], call_input)
        events += blocks.open_block(tool.result_type, result)
        events += blocks.close_block()
        call = {**block, "input": call_input}
        conversation = continue_after(request.conversation, answer_blocks("", call, result))
        stream.request = replace(request, conversation=conversation, server_call=None)
        return events

    async def end_call(self, stream: MessageStream) -> list[Event]:
        """Close the open ``server_tool_use`` block and answer it: its result
        block (whole, in ``content_block_start`` + ``_stop``); then either
        :attr:`resume` or :attr:`round_stop` is set (module doc)."""
        assert self._call is not None
        (tool, block), self._call = self._call, None
        events = stream.blocks.close_block()
        if stream.tool_calls:
            return events
        call = {**block, "input": input_object(self.args)}
        result = await self._answer(stream.request, tool, block["id"], call["input"])
        events += stream.blocks.open_block(tool.result_type, result)
        events += stream.blocks.close_block()
        self.resume, self.round_stop = self._continuation(stream, call, result)
        return events

    def _continuation(
        self, stream: MessageStream, call: dict[str, Any], result: dict[str, Any]
    ) -> tuple[GenerationRequest | None, str | None]:
        """The request that goes on after ``result``, or why there is none."""
        request = stream.request
        if self._answers >= MAX_SERVER_CALLS:
            return None, "pause_turn"
        used = stream.usage.used()
        if used >= stream.usage.budget:
            return None, "max_tokens"
        tools = _with_loaded(request, result)
        choice = choice_after_server_call(request.tool_choice, stream.driver.capabilities, tools)
        if choice is None:
            return None, "pause_turn"
        conversation = continue_after(
            request.conversation, answer_blocks(stream.blocks.round_text, call, result)
        )
        expand_references(conversation, tools)
        remaining = stream.usage.budget - used
        return (
            replace(
                request, conversation=conversation, max_tokens=remaining, tool_choice=choice, tools=tools
            ),
            None,
        )

    async def rounds(self, stream: MessageStream) -> AsyncGenerator[GenerationEvent, None]:
        """The stream's parsed events, round after round: when a result was
        sent (:attr:`resume` set), the running generation is stopped and
        the driver starts again on the continued request."""
        driver = stream.driver
        while True:
            parsed = stream.parsed()
            try:
                async for event in parsed:
                    yield event
                    if self.resume is not None:
                        break
            finally:
                await parsed.aclose()
            request, self.resume = self.resume, None
            if request is None:
                return
            await stream.aclose()
            stream.usage.settle_round()
            stream.blocks.round_text = ""
            stream.request = request
            stream.source = driver.generate(request).__aiter__()
            try:
                first = await stream.source.__anext__()
            except PromptTooLongError:
                self.round_stop = "model_context_window_exceeded"
                return
            except StopAsyncIteration:
                raise ApiError(f"driver '{driver.name}' ended without starting a message") from None
            if not isinstance(first, Started):
                raise ApiError(f"driver '{driver.name}' sent {type(first).__name__} before Started")
            stream.usage.next_round(first)
