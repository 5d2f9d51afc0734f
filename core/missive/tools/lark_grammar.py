"""Lark grammars (llguidance's dialect) that make a reply one forced tool call or one JSON value.

The grammar-library counterpart of the llama.cpp driver's GBNF
(:mod:`missive_llamacpp.grammar`), for drivers that constrain decoding with
llguidance (the MLX driver; vLLM and SGLang take the same grammar text as a
``guidance`` structured-output backend). Only text is built here: nothing
imports llguidance, which the driver using it depends on.

Rules, from llguidance's grammar syntax (``docs/syntax.md`` of
guidance-ai/llguidance, version 1.9):

* a call is the tool parser's literal call syntax
  (:meth:`~missive.driver.parsing.ToolParser.call_syntax`) around its
  arguments: in a ``"json"`` format one ``%json { schema }`` subgrammar (the
  tool's ``input_schema``, objects always), in a ``"parameters"`` format each
  property written as the format writes it (required ones in schema order,
  then each optional one or not), JSON values as ``%json``, raw string values
  as a *lazy* terminal ending at the value's closing text (``lazy``: the
  shortest match, so a value cannot swallow its own closing tag) and holding
  none of the sequences the parser would read as an early end
  (:meth:`~missive.driver.parsing.ToolParser.value_forbids`), written with
  llguidance's ``&`` and ``~`` terminal operators;
* several calls (``choice.parallel``) are joined by the parser's
  ``call_separator``, at most :data:`MAX_PARALLEL_CALLS`;
* text that is a special token of the model's tokenizer (Gemma 4's
  ``<|tool_call>``, gpt-oss's ``<|call|>``) is written as the token
  (``<[id]>``): llguidance never matches a special token's text as bytes;
* an object schema that lists ``properties`` and says nothing of
  ``additionalProperties`` gets ``additionalProperties: false`` (llama.cpp's
  JSON-Schema converter does the same, ``grammars/README.md``: a model
  should not invent arguments a tool does not declare);
* a JSON subgrammar is compact with one space after ``:`` and ``,`` (what
  ``json.dumps`` writes, and what chat templates render past calls with), no
  other whitespace (``whitespace_flexible: false``); a non-strict schema is
  compiled ``lenient`` (keywords llguidance does not implement are not
  enforced, as the API accepts any JSON Schema for a non-strict tool), a
  ``strict: true`` one is not (an unsupported keyword is then an error the
  driver answers with a 400).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from ..driver.parsing import ToolParser
from ..driver.tools import ToolChoice, ToolDefinition
from .parsers.values import allows_string

__all__ = ["MAX_PARALLEL_CALLS", "object_schema", "tool_call_lark", "json_schema_lark"]

#: Most calls a grammar lets a reply hold: a small model must not loop on
#: calls until ``max_tokens``.
MAX_PARALLEL_CALLS = 8


def object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a tool's ``input_schema`` as an object schema (the API's
    ``input`` is always an object), ``$schema`` left out."""
    out = copy.deepcopy(dict(schema))
    out.pop("$schema", None)
    if "type" not in out and not any(k in out for k in ("oneOf", "anyOf", "allOf", "$ref")):
        out["type"] = "object"
    return out


_SUBSCHEMA = ("items", "additionalProperties", "contains", "additionalItems", "not", "if", "then", "else")
_SUBSCHEMAS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def closed(schema: Any) -> Any:
    """A copy of ``schema`` where an object schema listing ``properties``
    without ``additionalProperties`` gets ``additionalProperties: false``
    (module rules), at every depth."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            out[key] = closed(value)
        elif key in _SUBSCHEMAS and isinstance(value, list):
            out[key] = [closed(v) for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: closed(v) for name, v in value.items()}
        else:
            out[key] = value
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _json(schema: Mapping[str, Any], strict: bool) -> str:
    """``%json { ... }`` of ``schema`` with the compile options of the module rules."""
    schema = closed(schema)
    options = {
        "whitespace_flexible": False,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": not strict,
    }
    return "%json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


def _string(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _regex_literal(text: str) -> str:
    """``text`` as a regex matching itself (every other character escaped as ``\\x{..}``)."""
    return "".join(ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):X}}}" for ch in text)


class _Lark:
    """Rules being written, and the special tokens of the model's tokenizer."""

    def __init__(self, specials: Mapping[str, int]) -> None:
        self.rules: list[str] = []
        # Longest first: a special token's text may begin with another's.
        self.specials = sorted(((t, i) for t, i in specials.items() if t), key=lambda s: -len(s[0]))

    def add(self, name: str, body: str) -> str:
        self.rules.append(f"{name}: {body}")
        return name

    def segments(self, text: str) -> list[str | int]:
        """``text`` cut into plain text and special tokens (ids)."""
        out: list[str | int] = []
        plain, i = "", 0
        while i < len(text):
            hit = next(((t, tid) for t, tid in self.specials if text.startswith(t, i)), None)
            if hit is None:
                plain += text[i]
                i += 1
                continue
            if plain:
                out.append(plain)
                plain = ""
            out.append(hit[1])
            i += len(hit[0])
        if plain:
            out.append(plain)
        return out

    def literal(self, text: str) -> str:
        """Grammar items writing ``text`` ("" for none)."""
        return " ".join(_string(s) if isinstance(s, str) else f"<[{s}]>" for s in self.segments(text))


def _raw_value(lark: _Lark, parser: type[ToolParser], suffix: str, name: str) -> str:
    """A raw string value and its closing ``suffix``: any text holding none of
    the parser's forbidden sequences, ended by the first ``suffix``."""
    gap = r"[ \t\r\n]*"  # any whitespace may stand between two parts (raw_values)
    forbidden = [gap.join(map(_regex_literal, parts)) for parts in parser.value_forbids() if parts]
    body = "/(?s:.*)/"
    if forbidden:
        body = f"({body} & ~/(?s:.*)({'|'.join(forbidden)})(?s:.*)/)"
    segments = lark.segments(suffix)
    terminal = name.upper().replace("-", "_")
    if segments and isinstance(segments[0], str):
        # The closing text is part of one lazy lexeme: it ends at its first occurrence.
        lark.rules.append(f"{terminal}: {body} {_regex_terminal(segments[0])}")
        head = f"{name}-text"
        lark.rules.append(f"{head}[lazy]: {terminal}")
        rest = " ".join(_string(s) if isinstance(s, str) else f"<[{s}]>" for s in segments[1:])
        return f"{head} {rest}".strip()
    # A special token (or nothing) closes it: it cannot occur in text anyway.
    lark.rules.append(f"{terminal}: {body}")
    return f"{terminal} {lark.literal(suffix)}".strip()


def _regex_terminal(text: str) -> str:
    return f"/{_regex_literal(text)}/"


def _parameters(
    lark: _Lark, parser: type[ToolParser], schema: Mapping[str, Any], name: str, strict: bool
) -> str:
    """The arguments of one call in a ``"parameters"`` format (module rules)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    assert isinstance(properties, dict)
    required = [k for k in schema.get("required", []) if k in properties]
    optional = [k for k in properties if k not in required]
    separator = lark.literal(parser.parameter_separator) if parser.parameter_separator else ""
    sep = f"{separator} " if separator else ""

    def item(index: int, key: str) -> str:
        prop = properties[key]
        string = parser.raw_string_values and allows_string(prop, schema)
        prefix, suffix = parser.parameter_syntax(key, string)
        rule = f"{name}-p{index}"
        enum = prop.get("enum") if isinstance(prop, dict) else None
        if string and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            value = "(" + " | ".join(lark.literal(v) or '""' for v in enum) + ")"
            body = f"{lark.literal(prefix)} {value} {lark.literal(suffix)}"
        elif string:
            body = f"{lark.literal(prefix)} {_raw_value(lark, parser, suffix, f'{rule}-raw')}"
        else:
            value = _json(prop if isinstance(prop, dict) else {}, strict)
            lark.add(f"{rule}-value", value)
            body = f"{lark.literal(prefix)} {rule}-value {lark.literal(suffix)}"
        return lark.add(rule, body.strip())

    items = [item(i, k) for i, k in enumerate([*required, *optional])]
    fixed, loose = items[: len(required)], items[len(required) :]
    if fixed:
        body = f" {sep}".join(fixed) + "".join(f" ({sep}{x})?" for x in loose)
    elif loose:
        body = "(" + loose[0] + "".join(f" ({sep}{x})?" for x in loose[1:]) + ")?"
    else:
        body = '""'
    return lark.add(f"{name}-args", body)


def tool_call_lark(
    parser: type[ToolParser],
    tools: tuple[ToolDefinition, ...],
    choice: ToolChoice,
    specials: Mapping[str, int],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A Lark grammar for a reply made only of calls (``choice.mode`` ``any``
    or ``tool``; with ``tool`` only ``choice.name``).

    Args:
        parser: the parser class of the model's call format.
        tools: the offered tools.
        choice: mode, name and whether several calls are allowed.
        specials: text -> id of the tokenizer's special tokens.
        schemas: a tool name -> the arguments schema to use instead of its
            ``input_schema`` (a driver's relaxed copy).
    """
    lark = _Lark(specials)
    allowed = [t for t in tools if choice.mode != "tool" or t.name == choice.name]
    calls = []
    for i, tool in enumerate(allowed):
        schema = object_schema((schemas or {}).get(tool.name, tool.input_schema))
        strict = bool(tool.strict)
        if parser.arguments_format == "parameters":
            args = _parameters(lark, parser, schema, f"tool{i}", strict)
        else:
            args = lark.add(f"tool{i}-args", _json(schema, strict))
        prefix, suffix = parser.call_syntax(tool.name)
        body = f"{lark.literal(prefix)} {args} {lark.literal(suffix)}"
        calls.append(lark.add(f"tool{i}-call", body.strip()))
    call = lark.add("call", " | ".join(calls))
    if choice.parallel:
        separator = lark.literal(parser.call_separator) or '""'
        root = f"{call} ({separator} {call}){{0,{MAX_PARALLEL_CALLS - 1}}}"
    else:
        root = call
    return "\n".join([f"start: {root}", *lark.rules]) + "\n"


def json_schema_lark(schema: Mapping[str, Any], strict: bool = False) -> str:
    """A Lark grammar for a reply that is one JSON value valid against
    ``schema`` (``output_config.format``)."""
    out = dict(schema)
    out.pop("$schema", None)
    return f"start: {_json(out, strict)}\n"
