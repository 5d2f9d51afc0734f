"""Kimi-K3's channels as reasoning and answer.

Facts (Kimi-K3's chat template, llama.cpp ``models/templates/Kimi-K3.jinja``,
and the canitoolcall corpus's K3 recordings): an assistant message is XTML
elements written with control tokens, ``<|open|>TAG ATTRS<|sep|>`` ...
``<|close|>TAG<|sep|>``::

    <|open|>message role="assistant"<|sep|>
    <|open|>think<|sep|>REASONING<|close|>think<|sep|>
    <|open|>response<|sep|>ANSWER<|close|>response<|sep|>
    <|open|>tools<|sep|>CALLS<|close|>tools<|sep|>
    <|close|>message<|sep|>

The generation prompt opens the ``think`` element when ``thinking`` is on,
the ``response`` element when it is off, so the output starts inside one of
them (:meth:`KimiK3ThinkParser.prompt_prefix`). The ``tools`` element goes
through as answer text for the tool parser
(:class:`missive.tools.parsers.xtml.KimiK3Parser`); the elements' own
markers are not text.

Rules: a ``response`` opened where the reasoning should be (the model
skipped it) ends the reasoning; reasoning cut by the end of the generation
stays reasoning; the text is kept exactly (whitespace included), as the
element's content.
"""

from __future__ import annotations

from ..driver.parsing import Reasoning, ReasoningEvent, ReasoningParser, Text
from ..tools.parsers._common import find_marker

__all__ = ["KimiK3ThinkParser", "OPEN_THINK", "CLOSE_THINK", "OPEN_RESPONSE", "CLOSE_RESPONSE"]

OPEN_THINK = "<|open|>think<|sep|>"
CLOSE_THINK = "<|close|>think<|sep|>"
OPEN_RESPONSE = "<|open|>response<|sep|>"
CLOSE_RESPONSE = "<|close|>response<|sep|>"
#: Markers that end the message: not text.
_ENDS = ("<|close|>message<|sep|>", "<|end_of_msg|>")


class KimiK3ThinkParser(ReasoningParser):
    """Splits Kimi-K3's ``think`` and ``response`` elements (module doc)."""

    def __init__(self) -> None:
        self._state = "outside"  # outside -> think -> outside -> response -> outside
        self._buffer = ""

    @property
    def in_reasoning(self) -> bool:
        return self._state == "think"

    @classmethod
    def prompt_prefix(cls, prompt: str) -> str:
        end = prompt.rstrip()
        for opening in (OPEN_THINK, OPEN_RESPONSE):
            if end.endswith(opening):
                return opening
        return ""

    @classmethod
    def close_text(cls) -> str:
        return CLOSE_THINK + OPEN_RESPONSE

    def _markers(self) -> tuple[str, ...]:
        if self._state == "think":
            return (CLOSE_THINK, OPEN_RESPONSE)
        if self._state == "response":
            return (CLOSE_RESPONSE,)
        return (OPEN_THINK, OPEN_RESPONSE, *_ENDS)

    def feed(self, text: str) -> list[ReasoningEvent]:
        self._buffer += text
        out: list[ReasoningEvent] = []
        while self._buffer:
            i, marker = find_marker(self._buffer, self._markers())
            if i:
                body = self._buffer[:i]
                out.append(Reasoning(body) if self._state == "think" else Text(body))
            self._buffer = self._buffer[i:]
            if marker is None:
                break
            self._buffer = self._buffer[len(marker) :]
            if marker == OPEN_THINK:
                self._state = "think"
            elif marker == OPEN_RESPONSE:
                self._state = "response"
            elif marker in (CLOSE_THINK, CLOSE_RESPONSE):
                self._state = "outside"
        return out

    def finish(self) -> list[ReasoningEvent]:
        rest, self._buffer = self._buffer, ""
        if not rest:
            return []
        return [Reasoning(rest) if self._state == "think" else Text(rest)]
