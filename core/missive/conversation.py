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
  render as text; server-tool and redacted_thinking blocks are left out;
  thinking blocks are kept only where ``kept_thinking`` says so (their
  signature verified: :mod:`missive.thinking.replay`), for templates that
  render past reasoning (``reasoning_content``).

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
    ThinkingBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .schema.request import CountTokensRequest

__all__ = ["Turn", "Conversation", "build_conversation"]


@dataclass
class Turn:
    """One turn: ``role`` and its content blocks (text, tool and media blocks
    kept as validated models for drivers that handle them)."""

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

    def thinking(self) -> str:
        """The turn's kept (verified) thinking blocks' text, joined by newlines."""
        return "\n".join(b.thinking for b in self.blocks if isinstance(b, ThinkingBlock) and b.thinking)


@dataclass
class Conversation:
    system: str | None
    turns: list[Turn]
    prefill: str | None = None

    def has_tool_blocks(self) -> bool:
        """Whether any turn holds ``tool_use`` or ``tool_result`` blocks."""
        return any(isinstance(b, (ToolUseBlock, ToolResultBlock)) for t in self.turns for b in t.blocks)

    def chat_messages(self) -> list[dict[str, str]]:
        """OpenAI/HF-style ``[{"role", "content"}]`` with the system first.

        An assistant turn with kept thinking also carries it as
        ``reasoning_content`` (the key Qwen3, DeepSeek-R1, GLM and llama.cpp
        templates read) and ``thinking`` (gpt-oss); templates that do not
        render past reasoning ignore both.
        The prefill is not included; drivers render it (see
        :func:`missive.templating.render_prompt`).
        """
        messages: list[dict[str, str]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        for turn in self.turns:
            message = {"role": turn.role, "content": turn.text()}
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
    request: CountTokensRequest, kept_thinking: Mapping[tuple[int, int], str] | None = None
) -> Conversation:
    """Normalize ``request`` (see module doc). Never raises for valid requests.

    ``kept_thinking``: ``(message index, block index)`` of the thinking blocks
    to keep, mapped to their reasoning text
    (:attr:`missive.thinking.replay.ReplayReport.kept`); others are left out.
    """
    system_parts: list[str] = []
    top = _system_text(request)
    if top:
        system_parts.append(top)
    turns: list[Turn] = []
    for m, message in enumerate(request.messages):
        if message.role == "system":
            text = "\n".join(b.text for b in message.blocks() if isinstance(b, TextBlock))
            if text:
                system_parts.append(text)
            continue
        blocks: list[Any] = []
        for b, block in enumerate(message.blocks()):
            if isinstance(block, _KEPT):
                blocks.append(block)
            elif isinstance(block, ThinkingBlock) and kept_thinking and (m, b) in kept_thinking:
                blocks.append(block.model_copy(update={"thinking": kept_thinking[(m, b)]}))
        if turns and turns[-1].role == message.role:
            turns[-1].blocks.extend(blocks)
        else:
            turns.append(Turn(role=message.role, blocks=blocks))
    prefill = None
    if turns and turns[-1].role == "assistant":
        prefill = turns.pop().text()
    system = "\n\n".join(system_parts) if system_parts else None
    return Conversation(system=system, turns=turns, prefill=prefill)
