"""Tool calls with JSON arguments between special tokens: Kimi-K2
(``kimi_k2``), DeepSeek-V3.1 (``deepseek_v31``) and NVIDIA Nemotron
(``nemotron``).

Read call by call with :mod:`missive.tools.parsers.blocks`; Kimi's and
DeepSeek's arguments object is kept byte for byte (key order, escapes), as
the Hermes parser keeps it; Nemotron's array is decoded and each call's
arguments written back as JSON (key order kept). Syntax, from each model's chat template and vLLM's parsers:

* **kimi_k2** (Kimi-K2 / K2-Thinking templates, llama.cpp
  ``models/templates/Kimi-K2-Thinking.jinja``; vLLM ``kimi_k2_tool_parser.py``)::

      <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

  The call id ``functions.NAME:INDEX`` names the tool (``NAME:INDEX`` and a
  bare ``NAME`` are read too). Missive gives the call its own ``toolu_`` id:
  the model's index counts calls over the whole conversation and a repeated
  one would make the client's next request invalid (``tool_use`` ids must be
  unique); Kimi's template then renders that id in the history.
* **deepseek_v31** (DeepSeek-V3.1 template, llama.cpp
  ``models/templates/deepseek-ai-DeepSeek-V3.1.jinja``; vLLM
  ``deepseekv31_tool_parser.py``)::

      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

  also the older DeepSeek-V3 / R1 form, ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME``
  then the arguments in a fenced ```` ```json ```` block (vLLM
  ``deepseekv3_tool_parser.py``).
* **nemotron** (Nemotron Nano v2 and Llama-3.3-Nemotron-Super templates,
  llama.cpp ``models/templates/NVIDIA-Nemotron-Nano-v2.jinja``; vLLM
  ``nemotron_json_tool_parser.py``): a JSON array of calls, all or nothing::

      <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>
"""  # noqa: E501 - the sample completions are one line each, as the models write them

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ._common import InvalidCall, InvalidCallHeader, decode_arguments
from .blocks import BlockParser, ParsedCall
from .jsonscan import JsonScanner, JsonSyntaxError, loads_strict

__all__ = ["KimiK2Parser", "DeepSeekV31Parser", "NemotronParser", "GraniteParser"]


def _offered(parser: BlockParser, name: str) -> None:
    """A call's name, read before its arguments: one not offered is
    given back at once, whatever follows."""
    if name not in parser.tool_names:
        raise InvalidCallHeader(f"tool {name!r} was not offered")


def _object(text: str) -> str:
    """The arguments object text (validated, kept byte for byte)."""
    text = text.strip()
    try:
        value = loads_strict(text)
    except ValueError as exc:
        raise InvalidCall(f"arguments are not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InvalidCall("arguments are not a JSON object")
    return text


class KimiK2Parser(BlockParser):
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>...``."""

    name = "kimi_k2"
    space_before_call = False  # the template writes the call right after the content
    BLOCKS = {"<|tool_calls_section_begin|>": "<|tool_calls_section_end|>"}
    CALL_END = "<|tool_call_end|>"
    FOLLOWERS = ("<|tool_call_begin|>", "<|tool_calls_section_end|>")
    _HEAD = re.compile(
        r"<\|tool_call_begin\|>\s*(?:functions\.)?(?P<name>[A-Za-z0-9_\-]{1,64})(?::\d+)?\s*<\|tool_call_argument_begin\|>"
    )
    call_separator = ""
    output_markers = ("<|tool_call_begin|>",)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return (
            f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>",
            "<|tool_call_end|><|tool_calls_section_end|>",
        )

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        # vLLM's kimi_k2 parser skips text between the section and call markers.
        head = self._HEAD.search(text)
        if head is None:
            raise InvalidCallHeader("no <|tool_call_begin|>NAME<|tool_call_argument_begin|>")
        _offered(self, head.group("name"))
        return [(head.group("name"), _object(text[head.end() :]))]


class DeepSeekV31Parser(BlockParser):
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``."""

    name = "deepseek_v31"
    BLOCKS = {"<｜tool▁calls▁begin｜>": "<｜tool▁calls▁end｜>"}
    CALL_END = "<｜tool▁call▁end｜>"
    FOLLOWERS = ("<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>")
    _HEAD = re.compile(r"<｜tool▁call▁begin｜>\s*(?P<name>[A-Za-z0-9_\-]{1,64})\s*<｜tool▁sep｜>")
    _V3 = re.compile(r"\s*(?P<name>[A-Za-z0-9_\-]{1,64})\s*```json\s*(?P<args>.*?)\s*```\s*$", re.DOTALL)
    call_separator = ""
    output_markers = ("<｜tool▁call▁begin｜>",)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return (
            f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>",
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        )

    @classmethod
    def tool_instructions(cls, functions: Sequence[Mapping[str, Any]]) -> str | None:
        """DeepSeek-V3.1's template renders past calls but no tool list: its
        model card declares tools in the system prompt (a ``## Tools``
        section, one ``### NAME`` with ``Description:`` and ``Parameters:``
        per tool, then the call syntax with its markers)."""
        parts = ["## Tools", "You have access to the following tools:", ""]
        for fn in functions:
            parts += [
                f"### {fn['name']}",
                f"Description: {fn.get('description') or ''}",
                "",
                f"Parameters: {json.dumps(fn.get('parameters') or {}, ensure_ascii=False)}",
                "",
            ]
        parts += [
            "IMPORTANT: to use a tool, write exactly:",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
            "<｜tool▁call▁end｜>{additional_tool_calls}<｜tool▁calls▁end｜>",
            "",
            "where `tool_call_name` is exactly one of the tools above, `tool_call_arguments` is a "
            "JSON object that follows the tool's Parameters schema, and further calls follow "
            "directly, with no separator.",
        ]
        return "\n".join(parts)

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        head = self._HEAD.match(text)
        if head is None:
            raise InvalidCallHeader("no <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>")
        rest = text[head.end() :]
        if head.group("name") == "function" and (v3 := self._V3.match(rest)):
            _offered(self, v3.group("name"))
            return [(v3.group("name"), _object(v3.group("args")))]
        _offered(self, head.group("name"))
        return [(head.group("name"), _object(rest))]


class NemotronParser(BlockParser):
    """``<TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>``."""

    name = "nemotron"
    BLOCKS = {"<TOOLCALL>": "</TOOLCALL>"}
    CALL_END = None
    call_separator = ""
    output_markers = ("<TOOLCALL>",)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f'<TOOLCALL>[{{"name": {json.dumps(name)}, "arguments": ', "}]</TOOLCALL>"

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        try:
            items = loads_strict(text.strip())
        except ValueError as exc:
            raise InvalidCall(f"not JSON ({exc})") from None
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list):
            raise InvalidCall("not a JSON array of calls")
        calls: list[ParsedCall] = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InvalidCall("a call without a name")
            args = item.get("arguments", {})
            raw = json.dumps(args, ensure_ascii=False) if not isinstance(args, str) else json.dumps(args)
            calls.append((item["name"], decode_arguments(raw)))
        return calls


class GraniteParser(NemotronParser):
    """IBM Granite 3.x: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``.

    Facts (the Granite 3.1-3.3 chat templates and model cards; vLLM's
    ``granite_tool_parser.py``): the special token ``<|tool_call|>`` is
    followed by a JSON array of calls and no closing marker, so the array's
    own closing bracket ends the calls; text may come before it. Granite 4.0
    writes Hermes' ``<tool_call>`` instead (``hermes``).
    """

    name = "granite"
    BLOCKS = {"<|tool_call|>": ""}
    output_markers = ("<|tool_call|>",)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f'<|tool_call|>[{{"name": {json.dumps(name)}, "arguments": ', "}]"

    def _find_call(self, buf: str, opener: str) -> tuple[int, list[ParsedCall] | None, str] | None:
        """The array's closing bracket ends the calls (no closing marker)."""
        scanner = JsonScanner("[{", track_levels=0)
        try:
            n = scanner.feed(buf)
        except JsonSyntaxError as exc:
            return exc.pos, None, f"not a JSON array of calls ({exc})"
        if not scanner.done:
            return None
        try:
            return n, self._checked(buf[:n], opener), ""
        except InvalidCall as exc:
            return n, None, str(exc)
