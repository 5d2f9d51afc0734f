"""Thinking blocks sent back by the client: which ones reach the prompt.

Interleaved thinking (reasoning kept across the tool calls of one turn)
needs the model to see its earlier reasoning; clients send it back as the
thinking blocks of past assistant messages. A block is kept only when its
signature is this server's for that text at that position
(:mod:`missive.thinking.signing`): reasoning the model did not write (edited,
moved, or from another server such as the real API) is accepted, as the API
accepts it from the same conversation, but left out of the prompt.
``redacted_thinking`` blocks carry nothing a local model can read and are
left out too. Every block left out is reported (the ``missive-dropped-thinking``
response header and the log) with its path and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.schema.blocks import RedactedThinkingBlock, ThinkingBlock
from .signing import Signer

__all__ = ["ReplayReport", "check_replayed_thinking", "answer_position"]


@dataclass(frozen=True)
class ReplayReport:
    """Attributes:
    kept: ``(message index, block index)`` of thinking blocks whose signature
        verified, mapped to the reasoning they stand for (the block's text, or
        the text a sealed signature carries when the block's is empty).
    dropped: ``"messages.3.content.0 (reason)"`` for every block left out.
    """

    kept: Mapping[tuple[int, int], str] = field(default_factory=dict)
    dropped: tuple[str, ...] = field(default=())


def check_replayed_thinking(messages: list[Any], signer: Signer) -> ReplayReport:
    """Verify the thinking blocks of the assistant messages in ``messages``
    (validated request messages). Positions are counted as in
    :mod:`missive.thinking.signing`: the assistant message's ordinal among
    assistant messages, the block's ordinal among that message's thinking blocks."""
    kept: dict[tuple[int, int], str] = {}
    dropped: list[str] = []
    turn = 0
    for m, message in enumerate(messages):
        if message.role != "assistant":
            for b, block in enumerate(message.blocks()):
                if isinstance(block, (ThinkingBlock, RedactedThinkingBlock)):
                    dropped.append(f"messages.{m}.content.{b} ({block.type} in a {message.role} message)")
            continue
        ordinal = 0
        for b, block in enumerate(message.blocks()):
            path = f"messages.{m}.content.{b}"
            if isinstance(block, ThinkingBlock):
                text = signer.open(block.signature, block.thinking, turn=turn, block=ordinal)
                if text is not None:
                    kept[(m, b)] = text
                elif not block.signature:
                    dropped.append(f"{path} (no signature)")
                else:
                    dropped.append(f"{path} (signature not from this server, or the block was changed)")
                ordinal += 1
            elif isinstance(block, RedactedThinkingBlock):
                dropped.append(f"{path} (redacted_thinking)")
        turn += 1
    return ReplayReport(kept=kept, dropped=tuple(dropped))


def answer_position(messages: list[Any]) -> tuple[int, int]:
    """``(turn, first block ordinal)`` for the thinking blocks of the answer.

    The answer is the next assistant message; after a final assistant message
    (a prefill) the answer continues that message, so its thinking blocks
    come after the prefill's.
    """
    assistants = [m for m in messages if m.role == "assistant"]
    if messages and messages[-1].role == "assistant":
        prior = sum(1 for b in messages[-1].blocks() if isinstance(b, ThinkingBlock))
        return len(assistants) - 1, prior
    return len(assistants), 0
