"""The request's conversation in a backend-neutral shape.

:func:`build_conversation` turns a validated request into a
:class:`Conversation`: one system prompt, then alternating turns of plain
parts, with a final assistant turn kept apart as the prefill. Rules (contract
section 2):

* Claude Code's ``x-anthropic-billing-header`` system block is dropped, as
  the real API does;
* ``system`` and the ``role: "system"`` messages before the first user or
  assistant message are the leading system prompt; a later system message
  stays where it is, a :class:`~missive.messages.system_turns.SystemNote` of a
  user-side turn (rendered as a system turn where the chat template accepts
  one there, else as a marked note: :mod:`missive.messages.system_turns`), so a new
  one moves no earlier token;
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
  image by a :class:`~missive.media.types.ImageInput` (or the text of a
  fallback), a document by a text block. Drivers never see the raw blocks.

Everything is deterministic so the rendered prompt is byte-stable across turns
(prefix caching depends on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..media.types import ImageInput, ImageMarker
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
from .system_turns import SystemNote, segments, system_note

__all__ = ["Turn", "Conversation", "build_conversation", "continue_after", "unrendered_media"]


@dataclass
class Turn:
    """One turn: ``role`` and its content blocks: validated text, search
    result and tool blocks, and, once the media pipeline has run,
    :class:`~missive.media.types.ImageInput` for images (documents are text
    blocks by then)."""

    role: Literal["user", "assistant"]
    blocks: list[Any] = field(default_factory=list)

    def text(self, image_marker: ImageMarker | None = None) -> str:
        """The turn's text parts joined by newlines (search results as text).

        With ``image_marker``, each image (:class:`~missive.media.types.ImageInput`)
        is a part of its own, the text ``image_marker(image)`` returns, in its
        place among the text: drivers that put image embeddings into the prompt
        themselves (llama.cpp's ``mtmd``) split the rendered prompt at the
        markers. Without, images are left out (drivers that send them apart, as
        ``image_url`` parts...).
        """
        parts: list[str] = []
        for block in self.blocks:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif image_marker is not None and isinstance(block, ImageInput):
                parts.append(image_marker(block))
            elif isinstance(block, SearchResultBlock):
                body = "\n".join(t.text for t in block.content)
                parts.append(f"[{block.title}]({block.source})\n{body}")
        return "\n".join(parts)

    def has_system_notes(self) -> bool:
        """Whether the turn holds a mid-conversation system message
        (:class:`~missive.messages.system_turns.SystemNote`)."""
        return any(isinstance(b, SystemNote) for b in self.blocks)

    def thinking(self) -> str:
        """The turn's kept (verified) thinking blocks' text, joined by newlines."""
        return "\n".join(b.thinking for b in self.blocks if isinstance(b, ThinkingBlock) and b.thinking)


@dataclass
class Conversation:
    system: str | None
    turns: list[Turn]
    prefill: str | None = None

    def replace_blocks(self, replacements: Mapping[int, list[Any]]) -> None:
        """Replace blocks, found by identity (``id(block)`` of the request's
        block), by the given parts, in the turns and inside ``tool_result``
        contents (the result is copied, never changed in place)."""
        if not replacements:
            return

        def swap(blocks: list[Any]) -> list[Any]:
            out: list[Any] = []
            for block in blocks:
                if id(block) in replacements:
                    out.extend(replacements[id(block)])
                    continue
                if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                    if any(id(inner) in replacements for inner in block.content):
                        block = block.model_copy(update={"content": swap(block.content)})
                out.append(block)
            return out

        for turn in self.turns:
            turn.blocks = swap(turn.blocks)

    def has_tool_blocks(self) -> bool:
        """Whether any turn holds ``tool_use`` or ``tool_result`` blocks."""
        return any(isinstance(b, (ToolUseBlock, ToolResultBlock)) for t in self.turns for b in t.blocks)

    def chat_messages(
        self, image_marker: ImageMarker | None = None, *, system_turns: bool = False
    ) -> list[dict[str, str]]:
        """OpenAI/HF-style ``[{"role", "content"}]`` with the system first.

        An assistant turn with kept thinking also carries it as
        ``reasoning_content`` (the key Qwen3, DeepSeek-R1, GLM and llama.cpp
        templates read) and ``thinking`` (gpt-oss); templates that do not
        render past reasoning ignore both.
        The prefill is not included; drivers render it (see
        :func:`missive.messages.templating.render_prompt`). ``image_marker``: see
        :meth:`Turn.text`. ``system_turns``: mid-conversation system
        messages as ``role: "system"`` messages in their place (else as
        marked notes in the user turn: :mod:`missive.messages.system_turns`).
        """
        messages: list[dict[str, str]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        for turn in self.turns:
            if system_turns and turn.role == "user" and turn.has_system_notes():
                for role, blocks in segments(turn.blocks):
                    if role == "system":
                        messages.append({"role": "system", "content": blocks[0].system})
                    else:
                        messages.append({"role": "user", "content": Turn("user", blocks).text(image_marker)})
                continue
            message = {"role": turn.role, "content": turn.text(image_marker)}
            messages.append(with_reasoning(message, turn))
        return messages


_KEPT = (TextBlock, SearchResultBlock, ToolUseBlock, ToolResultBlock, ImageBlock, DocumentBlock)


def with_reasoning(message: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """``message`` with the turn's kept thinking as ``reasoning_content`` and
    ``thinking`` (see :meth:`Conversation.chat_messages`); unchanged without."""
    if turn.role == "assistant" and (thinking := turn.thinking()):
        message["reasoning_content"] = thinking
        message["thinking"] = thinking
    return message


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
) -> Conversation:
    """Normalize ``request`` (see module doc). Never raises for valid requests.

    ``kept_thinking``: ``(message index, block index)`` of the thinking blocks
    to keep, mapped to their reasoning text
    (:attr:`missive.thinking.replay.ReplayReport.kept`); others are left out.
    ``server_tools``: False for a model that cannot call tools; server-tool
    blocks are then left out of the prompt (the caller reports them).
    """
    system_parts: list[str] = []
    top = _system_text(request)
    if top:
        system_parts.append(top)
    turns: list[Turn] = []
    for m, message in enumerate(request.messages):
        if message.role == "system":
            text = "\n".join(b.text for b in message.blocks() if isinstance(b, TextBlock))
            if not text:
                continue
            if turns:  # after the first turn: kept in its place (missive.messages.system_turns)
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
