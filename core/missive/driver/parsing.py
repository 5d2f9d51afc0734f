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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

__all__ = [
    "Text",
    "CallStart",
    "CallArgs",
    "CallEnd",
    "Reasoning",
    "ParseEvent",
    "ToolParser",
    "MalformedToolCall",
    "ReasoningEvent",
    "ReasoningParser",
    "ToolParserSpec",
    "ReasoningParserSpec",
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


ParseEvent = Text | CallStart | CallArgs | CallEnd | Reasoning


class MalformedToolCall(Exception):
    """Constrained output that is not a valid call (a bug, not a model quirk)."""


class ToolParser(abc.ABC):
    """One parser instance per generation (it keeps state between pieces).

    Args:
        tool_names: names the request offered; a call to another name is
            given back as text (the model cannot call what it was not offered).
        stream_arguments: emit argument fragments as they arrive (see module doc).
        strict: raise on malformed calls instead of giving them back as text.
        schemas: each offered tool's ``input_schema`` by name, for formats
            that write argument values as text (XML parameters): a value is
            typed from its property's schema (``"3"`` is the integer 3 for an
            ``integer`` property, a string for a ``string`` one).
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

    #: How a call's arguments are written: ``"json"`` (one JSON object
    #: between :meth:`call_syntax`'s prefix and suffix) or ``"parameters"``
    #: (one tagged value per argument, :meth:`parameter_syntax`, joined by
    #: :attr:`parameter_separator`: Qwen3-Coder's ``<parameter=K>``,
    #: GLM's ``<arg_key>``...). Grammars that force a call follow it.
    arguments_format: ClassVar[Literal["json", "parameters"]] = "json"

    #: Text between two parameters of one call (``"parameters"`` formats).
    parameter_separator: ClassVar[str] = ""

    #: Whether a ``"parameters"`` format writes string values as raw text
    #: (XML tags); False: every value is a literal (Llama 4's pythonic calls).
    raw_string_values: ClassVar[bool] = True

    #: Markers that can only start a call of this format (``<tool_call>``):
    #: one of them inside reasoning the model never closed ends the
    #: reasoning there (see :class:`~missive.reasoning.base.TagReasoningParser`).
    #: Empty: the format's calls are not looked for inside reasoning.
    call_openers: tuple[str, ...] = ()

    #: Whether whitespace the model writes right before a call belongs to the
    #: format's markup rather than the answer (Qwen's templates render
    #: ``content + '\n<tool_call>'``, DeepSeek-V3.2's ``'\n\n<｜DSML｜...'``):
    #: the core then drops the text's trailing whitespace before a call.
    #: False where the template writes the call right after the content
    #: (Kimi-K2's ``<|tool_calls_section_begin|>``), so a space there is text.
    space_before_call: ClassVar[bool] = True

    #: Literal strings that, found in answer text this parser gave back, show
    #: the model wrote a call in this format (the core warns when a model's
    #: text holds another format's markers: its ``tool_parser`` is wrong).
    output_markers: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        tool_names: frozenset[str],
        *,
        stream_arguments: bool = False,
        strict: bool = False,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.tool_names = tool_names
        self.stream_arguments = stream_arguments
        self.strict = strict
        self.schemas: Mapping[str, Mapping[str, Any]] = schemas or {}

    @abc.abstractmethod
    def feed(self, text: str) -> list[ParseEvent]:
        """Consume the next piece of generated text; return the events it completes."""

    @abc.abstractmethod
    def finish(self) -> list[ParseEvent]:
        """End of generation: flush held text; an unfinished call becomes text
        (or raises :class:`MalformedToolCall` when ``strict``); when
        :attr:`_cut` is set (:meth:`finish_cut`) it is dropped instead."""

    #: True while :meth:`finish_cut` runs :meth:`finish`.
    _cut: bool = False

    def finish_cut(self) -> list[ParseEvent]:
        """End of a generation cut by ``max_tokens``: as :meth:`finish`, but
        a call the model had begun and not finished is dropped, never given
        back as text (its markup is not answer text) nor completed (the
        model never made it). Calls finished before stay. Parsers honour
        :attr:`_cut` in :meth:`finish`. A constrained parser (``strict``)
        finishes as :meth:`finish` does: its calls' structure is the
        grammar's, a call whose closing markers alone were cut is complete,
        and one whose start was streamed cannot be taken back (the API's
        answer keeps the incomplete ``tool_use`` block)."""
        self._cut = True
        try:
            return self.finish()
        finally:
            self._cut = False

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
        The parser must parse what this produces. For a ``"parameters"``
        format the prefix and suffix surround the parameters instead.
        """

    @classmethod
    def value_forbids(cls) -> tuple[tuple[str, ...], ...]:
        """What a string argument written as raw text (``raw_string_values``
        in a ``"parameters"`` format) must not hold for this parser to read
        it back whole: each a tuple of literal parts with any whitespace
        allowed between them (:mod:`missive.tools.parsers.raw_values`).
        Grammars that force a call let a value hold anything else: code
        with ``<`` and the format's own closing tags. Empty: no limit."""
        return ()

    @classmethod
    def tool_instructions(cls, functions: Sequence[Mapping[str, Any]]) -> str | None:
        """System-prompt text declaring ``functions`` (OpenAI
        ``{"name", "description", "parameters"}`` objects) and this format's
        call syntax, for a chat template that renders past calls in this
        format but takes no ``tools`` list itself (DeepSeek-V3/V3.1: the
        model card gives the system prompt); None: the format has none, and
        such a template gets the Hermes convention
        (:func:`missive.tools.render.template_messages`)."""
        return None

    @classmethod
    def parameter_syntax(cls, key: str, string: bool) -> tuple[str, str]:
        """The literal text a ``"parameters"`` format writes before and after
        the value of argument ``key``: the value is raw text when ``string``
        (an argument whose schema allows strings), else JSON.

        Raises:
            NotImplementedError: a ``"json"`` format.
        """
        raise NotImplementedError(f"tool format {cls.name!r} writes arguments as one JSON object")


ReasoningEvent = Text | Reasoning


class ReasoningParser(abc.ABC):
    """Splits generated text into reasoning and answer (see module doc)."""

    #: Markers that end the reasoning as its closing tag does, kept as
    #: answer text: the opening markers of the model's tool calls (the core
    #: sets them from the tool parser's ``call_openers``,
    #: :mod:`missive.messages.stream.parsing`). Qwen3.5 may write a call
    #: inside a ``<think>`` it never closes; llama.cpp's Qwen3.5 parser reads
    #: the call there too. Parsers whose reasoning has no such case ignore it.
    interrupts: tuple[str, ...] = ()

    @abc.abstractmethod
    def feed(self, text: str) -> list[ReasoningEvent]:
        """Events for the next piece of generated text."""

    @abc.abstractmethod
    def finish(self) -> list[ReasoningEvent]:
        """Events for anything held back, at the end of generation."""

    @property
    @abc.abstractmethod
    def in_reasoning(self) -> bool:
        """Whether the text fed so far leaves the model inside its reasoning."""

    @classmethod
    def prompt_prefix(cls, prompt: str) -> str:
        """Text the rendered ``prompt`` already opened (to feed first), or ""."""
        return ""

    @classmethod
    def close_text(cls) -> str:
        """Text that ends the reasoning, for drivers that enforce a thinking
        budget by writing it into the model's context; "" if unsupported."""
        return ""


@dataclass(frozen=True)
class ToolParserSpec:
    """A streaming parser of tool calls in model text (Hermes, Llama 3, Mistral...).

    ``factory`` builds a parser object; its interface is defined with the tool
    parsing feature (issue 3) and documented in docs/hooks.md.
    """

    name: str
    factory: str
    description: str = ""
    template_markers: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class ReasoningParserSpec:
    """A streaming parser separating reasoning from the answer in model text
    (``<think>...</think>``, harmony's analysis channel...).

    Attributes:
        name: what a driver's ``reasoning_parser`` setting refers to.
        factory: ``"module:attr"`` of a
            :class:`~missive.reasoning.base.ReasoningParser` subclass, built
            with no arguments, one per generation.
        description: one line for listings.
        template_markers: literal strings that only chat templates of this
            format contain; the first spec with one in a model's template is
            chosen for that model.
    """

    name: str
    factory: str
    description: str = ""
    template_markers: tuple[str, ...] = field(default=())
