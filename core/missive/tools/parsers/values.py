"""Argument values that a format writes as text, typed from the tool's schema.

XML-style formats (Qwen3-Coder's ``<parameter=K>``, GLM's ``<arg_value>``,
MiniMax-M2's ``<parameter name="K">``, Seed-OSS, DeepSeek-V3.2's DSML) write
every argument as raw text: a string as it is, other values as JSON (their
chat templates render ``value if value is string else value | tojson``). The
text alone cannot tell ``"3"`` from ``3``: the tool's ``input_schema`` does,
as vLLM's ``qwen3coder`` and ``glm4_moe`` parsers and llama.cpp's XML tool
call parser (``common/chat-parser-xml-toolcall.cpp``) also read it.

Rules:

* a property whose schema allows only strings (``type: "string"``, an enum of
  strings) is the raw text;
* a property that allows strings and other types (``["string", "null"]``,
  ``anyOf``) is the JSON value the text spells when that value is of one of
  its other types (``null``, ``3``), else the raw text;
* any other typed property is the JSON value of the text; text that is not
  JSON is tried as a Python literal (models trained on Python write ``True``,
  ``None``, ``{'a': 1}``), and if that fails too it stays a string, so the
  schema check after generation names the mismatch (never an invented value);
* a key the schema does not describe, or a property without a type, is the
  raw text (vLLM's rule for unknown parameters).

Values a format writes inline keep their text exactly, except one newline
right after the opening tag and one right before the closing tag, which
the templates of Qwen3-Coder (``<parameter=K>\\nVALUE\\n</parameter>``) put
around every value: :func:`strip_value_newlines`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "schema_types",
    "property_schema",
    "typed_value",
    "allows_string",
    "arguments_json",
    "strip_value_newlines",
]

_JSON_TYPES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
    dict: "object",
    list: "array",
}


def schema_types(schema: Any, defs: Mapping[str, Any] | None = None, depth: int = 0) -> set[str]:
    """The JSON types a (sub)schema allows: its ``type``, the types of its
    ``enum``/``const`` values, and those of its ``anyOf``/``oneOf``/``allOf``
    members (local ``$ref`` followed). Empty when it says nothing."""
    if not isinstance(schema, Mapping) or depth > 8:
        return set()
    found: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for value in schema.get("enum", ()) if isinstance(schema.get("enum"), list) else ():
        found.add(_json_type(value))
    if "const" in schema:
        found.add(_json_type(schema["const"]))
    for key in ("anyOf", "oneOf", "allOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                found |= schema_types(member, defs, depth + 1)
    ref = schema.get("$ref")
    if isinstance(ref, str) and defs is not None:
        target = _resolve(ref, defs)
        if target is not None:
            found |= schema_types(target, defs, depth + 1)
    if "integer" in found:
        found.add("number")
    return found


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "string")


def _resolve(ref: str, root: Mapping[str, Any]) -> Any:
    """A local ``#/...`` reference inside ``root``, or None."""
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def property_schema(schema: Mapping[str, Any] | None, key: str) -> Any:
    """The schema of argument ``key`` in a tool's ``input_schema`` (None when
    the schema does not describe it)."""
    if not schema:
        return None
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        return properties[key]
    return None


def allows_string(schema: Any, root: Mapping[str, Any] | None = None) -> bool:
    """Whether a property written as raw text is a string: its schema allows
    strings, or says nothing about types."""
    types = schema_types(schema, root)
    return not types or "string" in types


def typed_value(raw: str, schema: Any, root: Mapping[str, Any] | None = None) -> Any:
    """The value of an argument written as ``raw`` text (see the module rules).

    Args:
        raw: the text between the value's tags (newlines already stripped).
        schema: the property's schema (None: not described).
        root: the tool's whole ``input_schema``, for local ``$ref``\\ s.
    """
    types = schema_types(schema, root)
    if not types or types == {"string"}:
        return raw
    value = _literal(raw.strip())
    if value is _NOT_A_VALUE:
        return raw
    kind = _json_type(value)
    if kind == "integer" and "integer" not in types and "number" in types:
        kind = "number"
    if "string" in types:
        return value if kind != "string" and kind in types else raw
    return value


_NOT_A_VALUE = object()


def _literal(text: str) -> Any:
    """The JSON value ``text`` spells, else the Python literal, else a marker."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_A_VALUE
    try:
        json.dumps(value)  # only values JSON can carry (no tuples of sets, bytes...)
    except (TypeError, ValueError):
        return _NOT_A_VALUE
    return value if not isinstance(value, tuple) else list(value)


def arguments_json(pairs: Iterable[tuple[str, Any]]) -> str:
    """The arguments object of a call from ``(key, value)`` pairs, in the
    order the model wrote them (a repeated key: the last value, in its first
    place, as ``json.loads`` reads an object)."""
    return json.dumps(dict(pairs), ensure_ascii=False)


def strip_value_newlines(text: str) -> str:
    """``text`` without one leading and one trailing newline (see module doc)."""
    if text.startswith("\n"):
        text = text[1:]
    if text.endswith("\n"):
        text = text[:-1]
    return text
