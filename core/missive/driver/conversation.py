"""The conversation a driver renders: system prompt, turns of parts, prefill.

Values only: :func:`missive.messages.conversation.build_conversation` makes
one from a validated request (its rules are listed there), and the media
pipeline replaces image and document blocks in it before a driver sees it
(:meth:`Conversation.replace_blocks`).

A mid-conversation ``role: "system"`` message is a :class:`SystemNote` block
of a user-side turn, kept where it occurs so no earlier token moves
(:mod:`missive.chat_template.system_turns` says how renderers show it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..protocol.schema.blocks import (
    SearchResultBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .media import ImageInput, ImageMarker

__all__ = [
    "Turn",
    "Conversation",
    "SystemNote",
    "system_note",
    "segments",
    "with_reasoning",
    "NOTE_OPEN",
    "NOTE_CLOSE",
]


#: What a system note's text starts and ends with on the user side.
NOTE_OPEN = "<system_message>\n"
NOTE_CLOSE = "\n</system_message>"


class SystemNote(TextBlock):
    """A mid-conversation system message in a user-side turn.

    A :class:`~missive.protocol.schema.blocks.TextBlock` whose ``text`` is the marked
    note (what renderers that know nothing of system turns show), with the
    message's own text in ``system`` (what a system turn shows).
    """

    system: str


def system_note(text: str) -> SystemNote:
    """The note of a system message whose text blocks joined are ``text``."""
    return SystemNote(type="text", text=f"{NOTE_OPEN}{text}{NOTE_CLOSE}", system=text)


def segments(blocks: list[Any]) -> list[tuple[str, list[Any]]]:
    """A user-side turn's blocks split at its system notes, in order:
    ``[("user", blocks), ("system", [note]), ("user", blocks)...]``; empty
    runs are left out."""
    out: list[tuple[str, list[Any]]] = []
    for block in blocks:
        role = "system" if isinstance(block, SystemNote) else "user"
        if out and out[-1][0] == role == "user":
            out[-1][1].append(block)
        else:
            out.append((role, [block]))
    return out


@dataclass
class Turn:
    """One turn: ``role`` and its content blocks: validated text, search
    result and tool blocks, and, once the media pipeline has run,
    :class:`~missive.driver.media.ImageInput` for images (documents are text
    blocks by then)."""

    role: Literal["user", "assistant"]
    blocks: list[Any] = field(default_factory=list)

    def text(self, image_marker: ImageMarker | None = None) -> str:
        """The turn's text parts joined by newlines (search results as text).

        With ``image_marker``, each image (:class:`~missive.driver.media.ImageInput`)
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
        (:class:`~missive.chat_template.system_turns.SystemNote`)."""
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
        :func:`missive.chat_template.rendering.render_prompt`). ``image_marker``: see
        :meth:`Turn.text`. ``system_turns``: mid-conversation system
        messages as ``role: "system"`` messages in their place (else as
        marked notes in the user turn: :mod:`missive.chat_template.system_turns`).
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


def with_reasoning(message: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """``message`` with the turn's kept thinking as ``reasoning_content`` and
    ``thinking`` (see :meth:`Conversation.chat_messages`); unchanged without."""
    if turn.role == "assistant" and (thinking := turn.thinking()):
        message["reasoning_content"] = thinking
        message["thinking"] = thinking
    return message
