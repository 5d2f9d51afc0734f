"""gpt-oss's harmony ``analysis`` channel as reasoning, when no tools are offered.

With tools offered, the harmony tool parser
(:class:`missive.tools.parsers.harmony.HarmonyParser`) already separates the
channels and no reasoning parser runs. Without tools this adapter runs the
same parser with no callable tool: ``analysis`` messages are reasoning,
``final`` and ``commentary`` ones are answer text, and a call to anything is
given back as text. gpt-oss's reasoning depth is set by ``reasoning_effort``
(its template's switch), not by a budget: :meth:`close_text` is "".

A prompt that leaves an assistant message open (an assistant prefill such as
``<|channel|>analysis<|message|>The user wants``, or a template that opens a
channel) makes the model continue inside that message: :meth:`prompt_prefix`
returns its header, which the driver feeds first to whichever parser splits
the channels (this one, or the tool parser when tools are offered).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..driver.parsing import Reasoning, ReasoningEvent, ReasoningParser, Text
from ..tools.parsers.harmony import MESSAGE, START, TERMINATORS, HarmonyParser

__all__ = ["HarmonyReasoningParser"]


class HarmonyReasoningParser(ReasoningParser):
    def __init__(self) -> None:
        self._parser = HarmonyParser(frozenset(), stream_arguments=False, strict=False)
        self._reasoning = False

    @classmethod
    def prompt_prefix(cls, prompt: str) -> str:
        """The header of the assistant message ``prompt`` leaves open (without
        the ``assistant`` role and without any content the prompt already
        holds, which is the client's prefill, not output), or ""."""
        i = prompt.rfind(START)
        if i == -1:
            return ""
        tail = prompt[i + len(START) :]
        if not tail.startswith("assistant") or any(t in tail for t in TERMINATORS):
            return ""
        header = tail[len("assistant") :]
        j = header.find(MESSAGE)
        return header if j == -1 else header[: j + len(MESSAGE)]

    @property
    def in_reasoning(self) -> bool:
        return self._reasoning

    def _convert(self, events: Sequence[object]) -> list[ReasoningEvent]:
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
