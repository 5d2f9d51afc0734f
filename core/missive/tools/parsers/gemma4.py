"""Gemma 4 tool calls (``gemma4``).

Syntax, from Gemma 4's chat template (llama.cpp ``models/templates/gemma4.jinja``,
its ``format_argument`` macro) and vLLM's ``gemma4_tool_parser.py``::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

* one call per ``<|tool_call>`` ... ``<tool_call|>`` block (several blocks in
  a row for parallel calls);
* the arguments are an object in Gemma's own notation: keys unquoted (and
  written as they are, spaces included),
  strings between ``<|"|>`` tokens (no escaping inside), numbers, ``true``,
  ``false`` and nested objects and arrays as in JSON; the template writes
  keys in sorted order;
* also read: JSON strings and quoted keys (what a grammar may write for
  nested values), ``null``/``None``.

Values are converted to JSON; calls are read with
:mod:`missive.tools.parsers.blocks`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._common import InvalidCall, InvalidCallHeader
from .blocks import BlockParser, ParsedCall
from .values import arguments_json

__all__ = ["Gemma4Parser", "parse_gemma_value"]

_QUOTE = '<|"|>'
_HEAD = re.compile(r"call:(?P<name>[A-Za-z0-9_\-.]{1,64})\s*\{")
#: An unquoted key runs to its colon and may hold spaces (the template
#: writes keys as they are: ``Basic LLM Chain:{...}``, ollama/ollama#18390).
_KEY = re.compile(r"\s*(?P<key>[^\s:{}\[\],\"<>][^:{}\[\],\"<>]*?)\s*:")
_SCALAR = re.compile(r"\s*(?P<tok>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|None|True|False)")
_WORDS: dict[str, Any] = {
    "true": True,
    "false": False,
    "True": True,
    "False": False,
    "null": None,
    "None": None,
}


class _Reader:
    """A recursive-descent reader of one Gemma value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def _peek(self, literal: str) -> bool:
        self._skip()
        return self.text.startswith(literal, self.pos)

    def _take(self, literal: str) -> None:
        if not self._peek(literal):
            raise InvalidCall(f"expected {literal!r} at {self.text[self.pos : self.pos + 30]!r}")
        self.pos += len(literal)

    def value(self) -> Any:
        self._skip()
        if self._peek(_QUOTE):
            self.pos += len(_QUOTE)
            end = self.text.find(_QUOTE, self.pos)
            if end < 0:
                raise InvalidCall("unterminated <|\"|> string")
            out = self.text[self.pos : end]
            self.pos = end + len(_QUOTE)
            return out
        if self._peek('"'):
            decoder = json.JSONDecoder()
            try:
                out, end = decoder.raw_decode(self.text, self.pos)
            except ValueError as exc:
                raise InvalidCall(f"bad string ({exc})") from None
            self.pos = end
            return out
        if self._peek("{"):
            return self.members()
        if self._peek("["):
            self.pos += 1
            items: list[Any] = []
            if self._peek("]"):
                self.pos += 1
                return items
            while True:
                items.append(self.value())
                if self._peek(","):
                    self.pos += 1
                    continue
                self._take("]")
                return items
        scalar = _SCALAR.match(self.text, self.pos)
        if scalar is None:
            raise InvalidCall(f"unexpected value at {self.text[self.pos : self.pos + 30]!r}")
        self.pos = scalar.end()
        tok = scalar.group("tok")
        return _WORDS[tok] if tok in _WORDS else json.loads(tok)

    def members(self) -> dict[str, Any]:
        """An object, from its ``{`` on."""
        self._take("{")
        pairs: list[tuple[str, Any]] = []
        if self._peek("}"):
            self.pos += 1
            return {}
        while True:
            self._skip()
            if self._peek(_QUOTE) or self._peek('"'):
                key = self.value()
                self._take(":")
            else:
                match = _KEY.match(self.text, self.pos)
                if match is None:
                    raise InvalidCall(f"expected a key at {self.text[self.pos : self.pos + 30]!r}")
                key = match.group("key")
                self.pos = match.end()
            pairs.append((str(key), self.value()))
            if self._peek(","):
                self.pos += 1
                continue
            self._take("}")
            return dict(pairs)


def parse_gemma_value(text: str) -> Any:
    """The value Gemma's notation ``text`` spells (one whole value).

    Raises:
        InvalidCall: not a value, or text after it.
    """
    reader = _Reader(text)
    out = reader.value()
    reader._skip()
    if reader.pos != len(text):
        raise InvalidCall("text after the value")
    return out


class Gemma4Parser(BlockParser):
    """``<|tool_call>call:NAME{key:value,...}<tool_call|>``."""

    name = "gemma4"
    space_before_call = False  # the template writes the call right after the content
    BLOCKS = {"<|tool_call>": "<tool_call|>"}
    CALL_END = None
    arguments_format = "parameters"
    parameter_separator = ","
    call_separator = ""
    FOLLOWERS = ("<|tool_call>",)
    output_markers = ("<|tool_call>",)

    @classmethod
    def value_forbids(cls) -> tuple[tuple[str, ...], ...]:
        """A string ends at the next ``<|"|>``: the template has no escaping."""
        return ((_QUOTE,),)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f"<|tool_call>call:{name}{{", "}<tool_call|>"

    @classmethod
    def parameter_syntax(cls, key: str, string: bool) -> tuple[str, str]:
        return (f"{key}:{_QUOTE}", _QUOTE) if string else (f"{key}:", "")

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        head = _HEAD.match(text)
        if head is None:
            raise InvalidCallHeader("expected call:NAME{")
        reader = _Reader(text)
        reader.pos = head.end() - 1
        args = reader.members()
        reader._skip()
        if reader.pos != len(text):
            raise InvalidCall("text after the arguments")
        return [(head.group("name"), arguments_json(args.items()))]
