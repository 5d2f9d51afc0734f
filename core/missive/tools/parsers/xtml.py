"""Kimi-K3 tool calls: XTML elements written with control tokens.

Facts (Kimi-K3's chat template, llama.cpp ``models/templates/Kimi-K3.jinja``,
which renders past calls exactly as the model writes new ones; the
canitoolcall corpus's K3 recordings)::

    <|open|>tools<|sep|>
    <|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>
    <|close|>call<|sep|>
    <|close|>tools<|sep|>

* attribute values escape ``&`` as ``&amp;`` and ``"`` as ``&quot;``;
* ``type`` is ``string`` (the value is the raw text), or ``number``,
  ``boolean``, ``null``, ``object``, ``array`` (the value is JSON);
* arguments given as one JSON text are written
  ``<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>``;
* ``index`` counts the message's calls from 1.

The element before it (``response``) and the reasoning are split by
:class:`missive.reasoning.xtml.KimiK3ThinkParser`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._common import InvalidCall, decode_arguments
from .blocks import ParsedCall
from .xml import _ParameterParser

__all__ = ["KimiK3Parser"]


class KimiK3Parser(_ParameterParser):
    """``<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|>``."""

    name = "kimi_k3"
    BLOCKS = {"<|open|>tools<|sep|>": "<|close|>tools<|sep|>"}
    CALL_END = "<|close|>call<|sep|>"
    FOLLOWERS = ("<|open|>call", "<|close|>tools<|sep|>")
    HEADER = re.compile(r'<\|open\|>call tool="(?P<name>[^"<>]{1,200})"(?: index="\d{1,6}")?<\|sep\|>')
    PARAM = re.compile(
        r'<\|open\|>argument key="(?P<key>[^"<>]{1,400})"(?: type="(?P<type>[a-z]{1,16})")?<\|sep\|>'
    )
    _JSON = re.compile(
        r'\s*<\|open\|>json(?: type="object")?<\|sep\|>(?P<body>.*)<\|close\|>json<\|sep\|>\s*$', re.DOTALL
    )
    VALUE_END = "<|close|>argument<|sep|>"
    CALL_PREFIX = '<|open|>tools<|sep|><|open|>call tool="{name}" index="1"<|sep|>'
    CALL_SUFFIX = "<|close|>call<|sep|><|close|>tools<|sep|>"
    PARAM_PREFIX = '<|open|>argument key="{key}" type="string"<|sep|>'
    PARAM_SUFFIX = "<|close|>argument<|sep|>"
    call_separator = ""
    output_markers = ("<|open|>call tool=",)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return cls.CALL_PREFIX.format(name=_escape(name)), cls.CALL_SUFFIX

    @classmethod
    def parameter_syntax(cls, key: str, string: bool) -> tuple[str, str]:
        # A value the grammar writes as JSON is labelled as such; "string"
        # values are raw text (the type attribute the template writes).
        kind = "string" if string else "object"
        return f'<|open|>argument key="{_escape(key)}" type="{kind}"<|sep|>', cls.PARAM_SUFFIX

    @staticmethod
    def _unescape(name: str) -> str:
        return name.replace("&quot;", '"').replace("&amp;", "&")

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        header = self.HEADER.match(text)
        if header is not None and (block := self._JSON.match(text, header.end())):
            return [(self._unescape(header.group("name")), decode_arguments(block.group("body")))]
        return super().parse_call(text, opener)

    def _value(self, raw: str, key: str, tag: re.Match[str], schema: Any) -> Any:
        kind = tag.group("type")
        if kind == "string":
            return raw
        if kind is not None:
            try:
                return json.loads(raw)
            except ValueError:
                if kind in ("number", "boolean", "null"):
                    raise InvalidCall(f"argument {key!r} is not a {kind}: {raw[:40]!r}") from None
        return super()._value(raw, key, tag, schema)


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")
