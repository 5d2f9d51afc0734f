"""The tool parser interface.

A parser turns the model's text, fed in arbitrary pieces (a tag may be split
across tokens, a name across deltas), into parse events:

* :class:`Text` - plain answer text, safe to show;
* :class:`CallStart` - a tool call begins; its name is known;
* :class:`CallArgs` - a fragment of the call's ``arguments`` JSON object;
  fragments of one call concatenate to exactly one valid JSON object;
* :class:`CallEnd` - the call is complete;
* :class:`Reasoning` - chain of thought that the format itself marks as such
  (harmony's ``analysis`` channel): not answer text, so a consumer shows it
  only as thinking, or drops it. Only formats with such a channel emit it.

Rules every parser follows (issue 3, contract section 4):

* text that might still turn out to be the start of a call (``<tool`` before
  ``_call>`` arrives) is held back, never shown then retracted;
* arguments are never fabricated: a call whose JSON is malformed is given back
  as :class:`Text` (the raw characters the model wrote), unless the parser was
  built with ``strict=True`` (generation was grammar-constrained, so malformed
  output means a bug), where it raises :class:`MalformedToolCall`;
* with ``stream_arguments=True`` argument fragments are emitted as they
  arrive once the name is known (safe only when the output is constrained to
  valid JSON); otherwise a call's arguments are emitted once the object is
  complete and validated. Once a call's :class:`CallStart` was emitted nothing
  can be retracted: if that call then turns out malformed the parser raises
  :class:`MalformedToolCall` whatever ``strict`` says.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Union

__all__ = [
    "Text",
    "CallStart",
    "CallArgs",
    "CallEnd",
    "Reasoning",
    "ParseEvent",
    "ToolParser",
    "MalformedToolCall",
]


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class CallStart:
    name: str


@dataclass(frozen=True, slots=True)
class CallArgs:
    partial_json: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    pass


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str


ParseEvent = Union[Text, CallStart, CallArgs, CallEnd, Reasoning]


class MalformedToolCall(Exception):
    """Constrained output that is not a valid call (a bug, not a model quirk)."""


class ToolParser(abc.ABC):
    """One parser instance per generation (it keeps state between pieces).

    Args:
        tool_names: names the request offered; a call to another name is
            given back as text (the model cannot call what it was not offered).
        stream_arguments: emit argument fragments as they arrive (see module doc).
        strict: raise on malformed calls instead of giving them back as text.
    """

    #: Registered name (``hermes``, ``llama3``...).
    name: str = ""

    #: Whether this format marks reasoning itself and the parser emits it as
    #: :class:`Reasoning` (harmony's ``analysis`` channel). When True the core
    #: runs no reasoning parser in front of this one: the model's raw text
    #: reaches it whole, headers included (a reasoning parser would strip the
    #: format's markup, or give calls back as text, before this parser saw
    #: them). When False (every format whose reasoning is tag-delimited text
    #: before the answer) the driver's reasoning parser runs first and this
    #: parser sees only the answer text.
    handles_reasoning: ClassVar[bool] = False

    def __init__(self, tool_names: frozenset[str], *, stream_arguments: bool = False, strict: bool = False) -> None:
        self.tool_names = tool_names
        self.stream_arguments = stream_arguments
        self.strict = strict

    @abc.abstractmethod
    def feed(self, text: str) -> list[ParseEvent]:
        """Consume the next piece of generated text; return the events it completes."""

    @abc.abstractmethod
    def finish(self) -> list[ParseEvent]:
        """End of generation: flush held text; an unfinished call becomes text
        (or raises :class:`MalformedToolCall` when ``strict``)."""

    #: Text between two consecutive calls when a grammar writes several.
    call_separator: str = "\n"

    @classmethod
    @abc.abstractmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        """The literal text this format writes before and after the arguments
        object of one call to ``name``.

        Used to build grammars for forced tool choice: a constrained call is
        ``prefix + <arguments JSON> + suffix``, e.g. for Hermes
        ``('<tool_call>\\n{"name": "get_weather", "arguments": ', '}\\n</tool_call>')``.
        The parser must parse what this produces.
        """
