"""The request's conversation in a backend-neutral shape.

:func:`build_conversation` turns a validated request into a
:class:`Conversation`: one system prompt, then alternating turns of plain
parts, with a final assistant turn kept apart as the prefill. Rules (contract
section 2):

* Claude Code's ``x-anthropic-billing-header`` system block is dropped, as
  the real API does;
* ``system`` and every ``role: "system"`` message are folded, in order, into the
  one leading system prompt (most chat templates accept a single leading
  system message; rendering them mid-conversation hurt tool calling in vLLM).
* consecutive turns of the same role are merged, not rejected;
* a final ``assistant`` message is a prefill: the answer continues it;
* text blocks of one turn are joined with ``"\\n"``; ``search_result`` blocks
  render as text; thinking, redacted_thinking and server-tool blocks carry
  nothing a non-reasoning model can use and are left out;
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

from .schema.blocks import (
    DocumentBlock,
    ImageBlock,
    SearchResultBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .schema.request import CountTokensRequest

__all__ = ["Turn", "Conversation", "build_conversation"]


@dataclass
class Turn:
    """One turn: ``role`` and its content blocks: validated text, search
    result and tool blocks, and, once the media pipeline has run,
    :class:`~missive.media.types.ImageInput` for images (documents are text
    blocks by then)."""

    role: Literal["user", "assistant"]
    blocks: list[Any] = field(default_factory=list)

    def text(self) -> str:
        """The turn's text parts joined by newlines (search results as text)."""
        parts: list[str] = []
        for block in self.blocks:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, SearchResultBlock):
                body = "\n".join(t.text for t in block.content)
                parts.append(f"[{block.title}]({block.source})\n{body}")
        return "\n".join(parts)


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

    def chat_messages(self) -> list[dict[str, str]]:
        """OpenAI/HF-style ``[{"role", "content"}]`` with the system first.

        The prefill is not included; drivers render it (see
        :func:`missive.templating.render_prompt`).
        """
        messages: list[dict[str, str]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.extend({"role": t.role, "content": t.text()} for t in self.turns)
        return messages


_KEPT = (TextBlock, SearchResultBlock, ToolUseBlock, ToolResultBlock, ImageBlock, DocumentBlock)


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


def build_conversation(request: CountTokensRequest) -> Conversation:
    """Normalize ``request`` (see module doc). Never raises for valid requests."""
    system_parts: list[str] = []
    top = _system_text(request)
    if top:
        system_parts.append(top)
    turns: list[Turn] = []
    for message in request.messages:
        if message.role == "system":
            text = "\n".join(b.text for b in message.blocks() if isinstance(b, TextBlock))
            if text:
                system_parts.append(text)
            continue
        blocks = [b for b in message.blocks() if isinstance(b, _KEPT)]
        if turns and turns[-1].role == message.role:
            turns[-1].blocks.extend(blocks)
        else:
            turns.append(Turn(role=message.role, blocks=blocks))
    prefill = None
    if turns and turns[-1].role == "assistant":
        prefill = turns.pop().text()
    system = "\n\n".join(system_parts) if system_parts else None
    return Conversation(system=system, turns=turns, prefill=prefill)
