"""Content blocks: index order, text, and thinking with its signature.

Rules (contract sections 3 and 4; the thinking rules are the API's extended
thinking documentation's):

* blocks are opened and closed in index order, never interleaved: opening
  one closes the one before;
* whitespace that would open a new text block is held until real text
  follows, and dropped if a tool call or the end comes first: the newlines
  models write between and around tool calls are not content (the API never
  sends whitespace-only text blocks between tool_use blocks);
* with ``display: "omitted"`` thinking blocks carry no text; every thinking
  block ends with exactly one ``signature_delta`` just before its
  ``content_block_stop`` (:mod:`missive.thinking.signing`): a signature of
  its text, or for omitted thinking a sealed copy of it (the client never
  sees the text: the signature carries it back).
"""

from __future__ import annotations

from typing import Any

from ...driver.thinking import ThinkingPlan
from ...thinking.signing import Signer

__all__ = ["Blocks", "Event"]

Event = dict[str, Any]


class Blocks:
    """The content blocks of one message.

    Args:
        thinking: the request's thinking plan (its ``display``).
        position: ``(assistant turn, first thinking block ordinal)`` of the
            answer, for signatures.
        signer: signs thinking blocks.

    Attributes:
        index: the index of the last block opened (-1: none yet).
        open: the kind of the open block (``text``, ``thinking``,
            ``tool_use``, ``server_tool_use``...), None when none is open.
        round_text: the answer text of the current round.
    """

    def __init__(self, thinking: ThinkingPlan, position: tuple[int, int], signer: Signer) -> None:
        self._plan = thinking
        self._position = position
        self._signer = signer
        self.index = -1
        self.open: str | None = None
        self.round_text = ""
        self._held_space = ""
        self._thinking_text = ""
        self._thinking_blocks = 0

    def delta(self, delta: dict[str, Any]) -> Event:
        """A ``content_block_delta`` of the open block."""
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def open_block(self, kind: str, block: dict[str, Any]) -> list[Event]:
        """Close the open block, then open ``block``."""
        events = self.close_block()
        self.index += 1
        self.open = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return events

    def close_block(self) -> list[Event]:
        """Close the open block (a thinking block gets its signature first)."""
        if self.open is None:
            return []
        events: list[Event] = []
        if self.open == "thinking":
            turn, first = self._position
            position = {"turn": turn, "block": first + self._thinking_blocks}
            if self._plan.display == "omitted":
                signature = self._signer.seal(self._thinking_text, **position)
            else:
                signature = self._signer.sign(self._thinking_text, **position)
            self._thinking_blocks += 1
            events.append(self.delta({"type": "signature_delta", "signature": signature}))
        self.open = None
        events.append({"type": "content_block_stop", "index": self.index})
        return events

    def thinking(self, text: str) -> list[Event]:
        """Events for reasoning text (the request wants thinking blocks)."""
        events: list[Event] = []
        if self.open != "thinking":
            events += self.open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self._thinking_text = ""
        self._thinking_text += text
        if self._plan.display == "omitted" or not text:
            return events  # the block, its signature, no text (API: display "omitted")
        events.append(self.delta({"type": "thinking_delta", "thinking": text}))
        return events

    def text(self, text: str) -> list[Event]:
        """Events for answer text (whitespace held: see the module doc)."""
        if not text:
            return []
        if self.open != "text":
            if not text.strip():
                self._held_space += text
                return []
            text, self._held_space = self._held_space + text, ""
        events = [] if self.open == "text" else self.open_block("text", {"type": "text", "text": ""})
        self.round_text += text
        events.append(self.delta({"type": "text_delta", "text": text}))
        return events

    def drop_held_space(self) -> None:
        """Whitespace held before a tool call is not content."""
        self._held_space = ""
