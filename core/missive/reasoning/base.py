"""The reasoning parser interface and the tag-delimited implementation.

A parser is fed the model's text in arbitrary pieces (a tag may be split
across tokens) and returns :class:`~missive.driver.parsing.Reasoning` and
:class:`~missive.driver.parsing.Text` events. Rules:

* reasoning comes first: the opening tag is recognised only before any answer
  text (DeepSeek-R1, Qwen3, GLM, Magistral write it first), so an answer that
  mentions ``<think>`` stays text;
* text that may still be part of a tag is held back, never shown then
  retracted; whitespace right after the opening and the closing tag, and at
  the end of the reasoning, is not content and is dropped;
* unterminated reasoning (the answer was cut by ``max_tokens``) stays
  reasoning: it is never given back as answer text.

Templates that open the tag in the prompt (DeepSeek-R1, Qwen3-Thinking-2507,
GLM-4.5 with thinking on) leave the model's output starting inside the
reasoning: the driver feeds :meth:`ReasoningParser.prompt_prefix` of its
rendered prompt first, so the parser sees the tag the prompt opened.
"""

from __future__ import annotations

from typing import ClassVar

from ..driver.parsing import Reasoning, ReasoningEvent, ReasoningParser, Text

__all__ = [
    "ReasoningParser",
    "TagReasoningParser",
    "ReasoningEvent",
    "ThinkParser",
    "MistralThinkParser",
    "SeedThinkParser",
    "Gemma4ThinkParser",
]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class TagReasoningParser(ReasoningParser):
    """Reasoning between :attr:`OPEN` and :attr:`CLOSE` tags at the start of the answer."""

    OPEN: ClassVar[str] = "<think>"
    CLOSE: ClassVar[str] = "</think>"
    #: Texts after :attr:`OPEN` a template may write at the end of the prompt,
    #: still inside the reasoning (Seed-OSS's zero budget opens a reflection).
    OPEN_CONTINUATIONS: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self._state = "start"  # start -> reasoning -> answer
        self._buffer = ""  # held back: possible tag start, or trailing whitespace
        self._fresh = False  # strip whitespace at the start of the current section

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    @classmethod
    def prompt_prefix(cls, prompt: str) -> str:
        end = prompt.rstrip()
        for opening in (*(cls.OPEN + c for c in cls.OPEN_CONTINUATIONS), cls.OPEN):
            if end.endswith(opening):
                return opening
        return ""

    @classmethod
    def close_text(cls) -> str:
        return f"\n{cls.CLOSE}\n\n"

    def feed(self, text: str) -> list[ReasoningEvent]:
        self._buffer += text
        out: list[ReasoningEvent] = []
        while True:
            if self._state == "start":
                stripped = self._buffer.lstrip()
                if not stripped:
                    return out
                if stripped.startswith(self.OPEN):
                    self._buffer = stripped[len(self.OPEN) :]
                    self._state, self._fresh = "reasoning", True
                    continue
                if self.OPEN.startswith(stripped):
                    return out  # maybe the tag, split across pieces
                self._state, self._fresh = "answer", False
                continue
            if self._state == "reasoning":
                if self._fresh:
                    self._buffer = self._buffer.lstrip()
                    if not self._buffer:
                        return out
                    self._fresh = False
                end = self._buffer.find(self.CLOSE)
                cut = min((i for m in self.interrupts if (i := self._buffer.find(m)) >= 0), default=-1)
                if cut >= 0 and (end < 0 or cut < end):
                    body = self._buffer[:cut].rstrip()
                    if body:
                        out.append(Reasoning(body))
                    self._buffer = self._buffer[cut:]
                    self._state, self._fresh = "answer", False
                    continue
                if end >= 0:
                    body = self._buffer[:end].rstrip()
                    if body:
                        out.append(Reasoning(body))
                    self._buffer = self._buffer[end + len(self.CLOSE) :]
                    self._state, self._fresh = "answer", True
                    continue
                keep = max(_partial_suffix(self._buffer, m) for m in (self.CLOSE, *self.interrupts))
                body = self._buffer[: len(self._buffer) - keep]
                trailing = len(body) - len(body.rstrip())  # whitespace waits for what follows
                emit = body[: len(body) - trailing]
                if emit:
                    out.append(Reasoning(emit))
                self._buffer = self._buffer[len(emit) :]
                return out
            # answer
            if self._fresh:
                self._buffer = self._buffer.lstrip()
                if not self._buffer:
                    return out
                self._fresh = False
            if self._buffer:
                out.append(Text(self._buffer))
            self._buffer = ""
            return out

    def finish(self) -> list[ReasoningEvent]:
        rest, self._buffer = self._buffer, ""
        if self._state == "reasoning":
            body = rest.strip() if self._fresh else rest.rstrip()
            return [Reasoning(body)] if body else []
        if self._state == "answer" and self._fresh:
            rest = rest.lstrip()
        return [Text(rest)] if rest else []


class ThinkParser(TagReasoningParser):
    """``<think>...</think>``: DeepSeek-R1, Qwen3, QwQ, GLM-4.5+, MiniMax-M2, SmolLM3."""


class MistralThinkParser(TagReasoningParser):
    """``[THINK]...[/THINK]``: Magistral (Mistral's reasoning models)."""

    OPEN = "[THINK]"
    CLOSE = "[/THINK]"


class SeedThinkParser(TagReasoningParser):
    """``<seed:think>...</seed:think>``: ByteDance Seed-OSS.

    Facts (Seed-OSS's chat template, ByteDance-Seed/Seed-OSS-36B-Instruct):
    the template's ``thinking_budget`` (-1 unlimited, the default; 0 no
    reasoning; N tokens) is announced in a system turn, and the model reports
    its use inside the reasoning in ``<seed:cot_budget_reflect>`` tags (kept:
    they are part of the chain of thought the template replays). With a
    budget of 0 the generation prompt itself opens
    ``<seed:think><seed:cot_budget_reflect>``: the output starts inside it.
    """

    OPEN = "<seed:think>"
    CLOSE = "</seed:think>"
    OPEN_CONTINUATIONS = ("<seed:cot_budget_reflect>",)


class Gemma4ThinkParser(TagReasoningParser):
    """Gemma 4's thought channel: ``<|channel>thought\n...<channel|>`` before
    the answer.

    Facts (Gemma 4's chat template, google/gemma-4 and llama.cpp
    ``models/templates/gemma4.jinja``): ``enable_thinking`` puts ``<|think|>``
    at the top of the system turn, and the model then writes its reasoning
    in a ``thought`` channel; without it the generation prompt ends with an
    empty ``<|channel>thought\n<channel|>``, so the model answers directly.
    Past reasoning is stripped from model turns by the template
    (``strip_thinking``), so none is replayed.
    """

    OPEN = "<|channel>thought"
    CLOSE = "<channel|>"
