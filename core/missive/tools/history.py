"""Checks of tool_use / tool_result pairing in the conversation, with the API's wording.

Rules and messages are the real API's (seen in its 400 responses):

* ``tool_use`` blocks are the assistant's and ``tool_result`` blocks the
  user's: ``messages.{i}: `tool_use` blocks can only be in `assistant`
  messages`` and ``messages.{i}: `tool_result` blocks can only be in `user`
  messages`` (the API's 400s as clients quote them, e.g.
  tghamm/Anthropic.SDK#128; checked before the pairing below);
* every ``tool_use`` id is unique:
  ``messages.{i}.content.{j}: `tool_use` ids must be unique``;
* every ``tool_use`` of an assistant message is answered by a ``tool_result``
  in the next message (unless that assistant message is the last one):
  ``messages.{i}: `tool_use` ids were found without `tool_result` blocks
  immediately after: {ids}. Each `tool_use` block must have a corresponding
  `tool_result` block in the next message.``;
* every ``tool_result`` answers a ``tool_use`` of the previous message:
  ``messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result`
  blocks: {id}. Each `tool_result` block must have a corresponding `tool_use`
  block in the previous message.``
* every server tool result (``web_search_tool_result``,
  ``web_fetch_tool_result``, ``tool_search_tool_result``) follows the
  ``server_tool_use`` of its ``tool_use_id`` in the same assistant message,
  and every ``mcp_tool_result`` its ``mcp_tool_use``: the API answers both in
  the message that calls (its ``pause_turn`` continues one message). The
  wording is Missive's, in the form of the ``tool_result`` one.

Indices are those of the request's ``messages`` array as sent. Nothing is
reordered: rendering keeps the client's order and bytes.
"""

from __future__ import annotations

from ..protocol.errors import InvalidRequestError
from ..protocol.schema.blocks import (
    McpToolResultBlock,
    McpToolUseBlock,
    ServerToolUseBlock,
    ToolResultBlock,
    ToolSearchToolResultBlock,
    ToolUseBlock,
    WebFetchToolResultBlock,
    WebSearchToolResultBlock,
)
from ..protocol.schema.request import CountTokensRequest

__all__ = ["check_tool_history"]


def check_tool_history(request: CountTokensRequest) -> None:
    """Raise :class:`InvalidRequestError` on the first pairing problem.

    ``role: "system"`` messages are skipped when looking for the previous or
    next message: clients insert them anywhere (Claude Code), and they are
    folded into the system prompt before rendering.
    """
    turns = [(i, m) for i, m in enumerate(request.messages) if m.role != "system"]
    for i, message in turns:
        _check_roles(i, message.role, message.blocks())
    seen_ids: set[str] = set()
    for k, (i, message) in enumerate(turns):
        blocks = message.blocks()
        _check_server_results(i, blocks)
        if message.role == "assistant":
            for j, block in enumerate(blocks):
                if isinstance(block, ToolUseBlock):
                    if block.id in seen_ids:
                        raise InvalidRequestError(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
                    seen_ids.add(block.id)
        previous_ids: set[str] = set()
        if k > 0 and turns[k - 1][1].role == "assistant":
            previous_ids = {b.id for b in turns[k - 1][1].blocks() if isinstance(b, ToolUseBlock)}
        for j, block in enumerate(blocks):
            if isinstance(block, ToolResultBlock) and block.tool_use_id not in previous_ids:
                raise InvalidRequestError(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` "
                    "block in the previous message."
                )
        if message.role == "assistant" and k + 1 < len(turns):
            used = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
            following = turns[k + 1][1].blocks()
            answered = {b.tool_use_id for b in following if isinstance(b, ToolResultBlock)}
            missing = [tool_id for tool_id in used if tool_id not in answered]
            if missing:
                raise InvalidRequestError(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )


def _check_roles(i: int, role: str, blocks: list[object]) -> None:
    """A call only in an assistant message, a result only in a user message (module doc)."""
    for block in blocks:
        if isinstance(block, ToolUseBlock) and role != "assistant":
            raise InvalidRequestError(f"messages.{i}: `tool_use` blocks can only be in `assistant` messages")
        if isinstance(block, ToolResultBlock) and role != "user":
            raise InvalidRequestError(f"messages.{i}: `tool_result` blocks can only be in `user` messages")


_SERVER_RESULTS = (WebSearchToolResultBlock, WebFetchToolResultBlock, ToolSearchToolResultBlock)


def _check_server_results(i: int, blocks: list[object]) -> None:
    """Each server tool result of message ``i`` after its call (module doc)."""
    called: set[str] = set()
    for j, block in enumerate(blocks):
        if isinstance(block, (ServerToolUseBlock, McpToolUseBlock)):
            called.add(block.id)
        elif isinstance(block, (*_SERVER_RESULTS, McpToolResultBlock)) and block.tool_use_id not in called:
            call = "mcp_tool_use" if isinstance(block, McpToolResultBlock) else "server_tool_use"
            raise InvalidRequestError(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `{block.type}` blocks: "
                f"{block.tool_use_id}. Each `{block.type}` block must follow the `{call}` block of its id "
                "in the same message."
            )
