"""gpt-oss's harmony ``analysis`` channel as reasoning, when no tools are offered.

With tools offered, the harmony tool parser
(:class:`missive.tools.parsers.harmony.HarmonyParser`) already separates the
channels and no reasoning parser runs. Without tools this adapter runs the
same parser with no callable tool: ``analysis`` messages are reasoning,
``final`` and ``commentary`` ones are answer text, and a call to anything is
given back as text. gpt-oss's reasoning depth is set by ``reasoning_effort``
(its template's switch), not by a budget: :meth:`close_text` is "".
"""

from __future__ import annotations

from ..tools.parsers.base import Reasoning, Text
from ..tools.parsers.harmony import HarmonyParser
from .base import ReasoningEvent, ReasoningParser

__all__ = ["HarmonyReasoningParser"]


class HarmonyReasoningParser(ReasoningParser):
    def __init__(self) -> None:
        self._parser = HarmonyParser(frozenset(), stream_arguments=False, strict=False)
        self._reasoning = False

    @property
    def in_reasoning(self) -> bool:
        return self._reasoning

    def _convert(self, events: list[object]) -> list[ReasoningEvent]:
        out: list[ReasoningEvent] = []
        for event in events:
            if isinstance(event, (Text, Reasoning)):
                self._reasoning = isinstance(event, Reasoning)
                out.append(event)
        return out

    def feed(self, text: str) -> list[ReasoningEvent]:
        return self._convert(self._parser.feed(text))

    def finish(self) -> list[ReasoningEvent]:
        return self._convert(self._parser.finish())
