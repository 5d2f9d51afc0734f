"""The request's conversation in a backend-neutral shape.

:func:`build_conversation` turns a validated request into a
:class:`Conversation`: one system prompt, then alternating turns of plain
parts, with a final assistant turn kept apart as the prefill. Rules (contract
section 2):

* Claude Code's ``x-anthropic-billing-header`` system block is dropped, as
  the real API does;
* ``system`` and the ``role: "system"`` messages before the first user or
  assistant message are the leading system prompt; a later system message
  stays where it is, a :class:`~missive.chat_template.system_turns.SystemNote` of a
  user-side turn (rendered as a system turn where the chat template accepts
  one there, else as a marked note: :mod:`missive.chat_template.system_turns`), so a new
  one moves no earlier token; its ``tool_addition``/``tool_removal`` blocks
  are the text :mod:`missive.tools.changes` gives them, in their place;
* consecutive turns of the same role are merged, not rejected;
* a final ``assistant`` message is a prefill: the answer continues it;
* text blocks of one turn are joined with ``"\\n"``; ``search_result`` blocks
  render as text; redacted_thinking blocks are left out; thinking blocks are
  kept only where ``kept_thinking`` says so (their signature verified:
  :mod:`missive.thinking.replay`), for templates that render past reasoning
  (``reasoning_content``);
* ``web_search``/``web_fetch`` blocks of an assistant message become a
  ``tool_use`` call and a ``tool_result`` in a user turn right after
  (:func:`missive.tools.server.split_server_blocks`), so the model sees its
  call and the answer; other server-tool blocks are left out. A final
  assistant message ending with such a result is therefore no prefill: the
  answer goes on after the result (the API's ``pause_turn`` resumption).
* tool call ids that Missive wrapped to fit the API's pattern
  (:func:`missive.protocol.ids.client_tool_id`) are turned back into the backend's own;
* image and document blocks are kept by :func:`build_conversation`, then
  replaced by the media pipeline (:meth:`Conversation.replace_blocks`): an
  image by a :class:`~missive.driver.media.ImageInput` (or the text of a
  fallback), a document by a text block. Drivers never see the raw blocks.

Everything is deterministic so the rendered prompt is byte-stable across turns
(prefix caching depends on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..driver.conversation import Conversation, Turn, system_note
from ..protocol.ids import backend_tool_id
from ..protocol.schema.blocks import (
    DocumentBlock,
    ImageBlock,
    SearchResultBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ..protocol.schema.request import CountTokensRequest
from ..tools.server import is_server_block, split_server_blocks

__all__ = ["Turn", "Conversation", "build_conversation", "continue_after", "unrendered_media"]


_KEPT = (TextBlock, SearchResultBlock, ToolUseBlock, ToolResultBlock, ImageBlock, DocumentBlock)


def _append(turns: list[Turn], role: str, blocks: list[Any], *, server_tools: bool) -> None:
    """Add one message's blocks to ``turns`` (server-tool blocks rendered,
    consecutive same-role turns merged)."""
    for part_role, part in split_server_blocks(role, blocks, answered=server_tools):
        if turns and turns[-1].role == part_role:
            turns[-1].blocks.extend(part)
        else:
            turns.append(Turn(role=part_role, blocks=part))  # type: ignore[arg-type]


#: Claude Code's first system block; it changes on every request, and the real
#: API strips it (contract section 2). Kept, it would defeat prefix caching.
BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"


def _system_text(request: CountTokensRequest) -> str | None:
    if isinstance(request.system, list):
        kept = [b.text for b in request.system if not b.text.startswith(BILLING_HEADER_PREFIX)]
        return "\n".join(kept) if kept else None
    if request.system is not None and request.system.startswith(BILLING_HEADER_PREFIX):
        return None
    return request.system


def build_conversation(
    request: CountTokensRequest,
    kept_thinking: Mapping[tuple[int, int], str] | None = None,
    *,
    server_tools: bool = True,
    tool_changes: Mapping[tuple[int, int], str] | None = None,
) -> Conversation:
    """Normalize ``request`` (see module doc). Never raises for valid requests.

    ``kept_thinking``: ``(message index, block index)`` of the thinking blocks
    to keep, mapped to their reasoning text
    (:attr:`missive.thinking.replay.ReplayReport.kept`); others are left out.
    ``server_tools``: False for a model that cannot call tools; server-tool
    blocks are then left out of the prompt (the caller reports them).
    ``tool_changes``: the text of each ``tool_addition``/``tool_removal``
    block of a system message, by ``(message index, block index)``
    (:attr:`missive.tools.changes.ToolChanges.texts`), joined to the
    message's text in the block's place.
    """
    system_parts: list[str] = []
    top = _system_text(request)
    if top:
        system_parts.append(top)
    turns: list[Turn] = []
    for m, message in enumerate(request.messages):
        if message.role == "system":
            changes = tool_changes or {}
            text = "\n".join(
                block.text if isinstance(block, TextBlock) else changes[(m, b)]
                for b, block in enumerate(message.blocks())
                if isinstance(block, TextBlock) or (m, b) in changes
            )
            if not text:
                continue
            if turns:  # after the first turn: kept in its place (missive.chat_template.system_turns)
                _append(turns, "user", [system_note(text)], server_tools=server_tools)
            else:
                system_parts.append(text)
            continue
        blocks: list[Any] = []
        for b, block in enumerate(message.blocks()):
            if isinstance(block, _KEPT) or is_server_block(block):
                blocks.append(_backend_ids(block))
            elif isinstance(block, ThinkingBlock) and kept_thinking and (m, b) in kept_thinking:
                blocks.append(block.model_copy(update={"thinking": kept_thinking[(m, b)]}))
        _append(turns, message.role, blocks, server_tools=server_tools)
    prefill = None
    if turns and turns[-1].role == "assistant":
        prefill = turns.pop().text()
    system = "\n\n".join(system_parts) if system_parts else None
    return Conversation(system=system, turns=turns, prefill=prefill)


def _backend_ids(block: Any) -> Any:
    """``block`` with the backend's own tool call id where the client holds a
    wrapped one (:func:`missive.protocol.ids.client_tool_id`), so the backend and its
    chat template see the ids the model produced."""
    if isinstance(block, ToolUseBlock) and block.id != (original := backend_tool_id(block.id)):
        return block.model_copy(update={"id": original})
    if isinstance(block, ToolResultBlock) and block.tool_use_id != (
        original := backend_tool_id(block.tool_use_id)
    ):
        return block.model_copy(update={"tool_use_id": original})
    return block


def unrendered_media(request: CountTokensRequest) -> list[str]:
    """Paths of image and document blocks no prompt shows: those in
    ``role: "system"`` messages (only their text joins the system prompt)
    and in a final assistant message (the prefill is text the answer
    continues). Reported as ignored, never dropped silently."""
    paths: list[str] = []
    last = len(request.messages) - 1
    for m, message in enumerate(request.messages):
        if message.role == "system" or (m == last and message.role == "assistant"):
            where = "a system message" if message.role == "system" else "an assistant prefill"
            for b, block in enumerate(message.blocks()):
                if isinstance(block, (ImageBlock, DocumentBlock)):
                    paths.append(
                        f"messages.{m}.content.{b} ({block.type} in {where}: not shown to the model)"
                    )
    return paths


def continue_after(conversation: Conversation, blocks: list[Any]) -> Conversation:
    """``conversation`` followed by answer ``blocks`` that end with a server
    tool's result, for the generation that goes on after it.

    ``blocks`` are the answer so far (validated content blocks: text, then a
    ``server_tool_use`` and its result); the prefill, if any, is put before
    them (joined to a first text block, which continues it). They are
    rendered exactly as the same blocks sent back by a client in an
    assistant message (:func:`build_conversation`), so the
    continued prompt equals the one of a client's ``pause_turn`` resumption.
    """
    turns = [Turn(role=t.role, blocks=list(t.blocks)) for t in conversation.turns]
    if conversation.prefill:
        if blocks and isinstance(blocks[0], TextBlock):
            blocks = [TextBlock(type="text", text=conversation.prefill + blocks[0].text), *blocks[1:]]
        else:
            blocks = [TextBlock(type="text", text=conversation.prefill), *blocks]
    _append(turns, "assistant", blocks, server_tools=True)
    prefill = None
    if turns and turns[-1].role == "assistant":
        prefill = turns.pop().text()
    return Conversation(system=conversation.system, turns=turns, prefill=prefill)
