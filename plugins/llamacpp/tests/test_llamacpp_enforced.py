"""What llama-cpp-python's JSON-Schema converter enforces (missive_llamacpp.enforced).

Each case builds the converter's own grammar and matches a text against it
(a GBNF rule set inlined into a regular expression: the schemas here are not
recursive), so the list of unenforced keywords is measured, not assumed: if a
later llama-cpp-python enforces one, its case here fails.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from llama_cpp.llama_grammar import SchemaConverter

from missive_llamacpp.enforced import unenforced
from missive_llamacpp.grammar import json_schema_grammar

_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<rep>\{\d+(?:,\d*)?\})'
    r"|(?P<op>[()|?*+])|(?P<name>[a-zA-Z0-9-]+))"
)


def _literal(text: str) -> str:
    return re.escape(json.loads(text.replace("\\x", "\\u00")))


def _regex(rules: dict[str, str], name: str, depth: int = 0) -> str:
    if depth > 6:  # a recursive rule (any JSON value): deeper nesting is not needed here
        return "(?!)"
    out, body, pos = [], rules[name], 0
    while pos < len(body.rstrip()):
        match = _TOKEN.match(body, pos)
        assert match, body[pos:]
        pos = match.end()
        if match["lit"]:
            out.append(_literal(match["lit"]))
        elif match["cls"]:
            out.append(match["cls"])
        elif match["rep"]:
            out.append(match["rep"])
        elif match["op"]:
            out.append("(?:" if match["op"] == "(" else match["op"])
        else:
            out.append(f"(?:{_regex(rules, match['name'], depth + 1)})")
    return "".join(out)


def admits(schema: dict[str, Any], text: str) -> bool:
    """Whether the converter's grammar for ``schema`` admits ``text``."""
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "x"), "")
    rules = dict(line.split(" ::= ", 1) for line in converter.format_grammar().splitlines())
    return re.fullmatch(_regex(rules, "root"), text) is not None


def valid(schema: dict[str, Any], text: str) -> bool:
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(
        json.loads(text)
    )


INTS = {"type": "array", "items": {"type": "integer"}}


def obj(prop: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": prop}, "required": ["x"]}


#: (schema, keyword path named, a text the grammar admits that the schema refuses)
UNENFORCED = [
    (obj({"type": "integer", "minimum": 0, "maximum": 10}), ["minimum", "maximum"], '{"x": 500}'),
    (obj({"type": "number", "exclusiveMinimum": 0}), ["exclusiveMinimum"], '{"x": 0}'),
    (obj({"type": "integer", "exclusiveMaximum": 3}), ["exclusiveMaximum"], '{"x": 3}'),
    (obj({"type": "integer", "multipleOf": 5}), ["multipleOf"], '{"x": 7}'),
    (obj({"type": "integer", "not": {"const": 1}}), ["not"], '{"x": 1}'),
    (obj({"type": "string", "if": {"const": "a"}, "then": {"minLength": 2}}), ["if", "then"], '{"x": "a"}'),
    (obj({"type": "string", "format": "email"}), ["format"], '{"x": "nope"}'),
    (obj({"type": "string", "pattern": "^a+$", "maxLength": 2}), ["maxLength"], '{"x": "aaa"}'),
    (obj({"type": ["integer", "null"], "maximum": 1}), ["maximum"], '{"x": 2}'),
    (obj({"type": ["string", "null"], "enum": ["a", None]}), ["enum"], '{"x": "b"}'),
    (obj({"type": "array", "minItems": 2}), ["minItems"], '{"x": []}'),
    (obj({**INTS, "uniqueItems": True}), ["uniqueItems"], '{"x": [1,1]}'),
    (obj({**INTS, "contains": {"const": 3}}), ["contains"], '{"x": [1]}'),
    (obj({"type": "object", "required": ["a"]}), ["required"], '{"x": {}}'),
    (obj({"type": "object", "minProperties": 1}), ["minProperties"], '{"x": {}}'),
    (obj({"anyOf": [{"type": "integer"}, {"type": "string"}], "maximum": 1}), ["maximum"], '{"x": 5}'),
    (obj({"type": "string", "enum": ["a", 1]}), ["type"], '{"x": 1}'),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}, "propertyNames": {"maxLength": 1}},
        ["propertyNames"],
        '{"bb": 1}',
    ),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "named", "text"), UNENFORCED)
def test_the_converter_ignores_what_unenforced_names(schema: dict, named: list[str], text: str) -> None:
    assert admits(schema, text) and not valid(schema, text)  # measured: the grammar lets it through
    node = schema["properties"]["x"] if "x" in schema.get("properties", {}) else schema
    assert unenforced(node) == named


#: (schema, a text the schema refuses, which the grammar refuses too)
ENFORCED = [
    (obj({"type": "integer"}), '{"x": 1.5}'),
    (obj({"type": "string", "maxLength": 2}), '{"x": "abc"}'),
    (obj({"type": "string", "minLength": 2}), '{"x": "a"}'),
    (obj({"type": "string", "pattern": "^[0-9]+$"}), '{"x": "a1"}'),
    (obj({"type": "string", "format": "date"}), '{"x": "2024-13-01"}'),
    (obj({"type": "string", "format": "uuid"}), '{"x": "nope"}'),
    (obj({"enum": ["a", "b"]}), '{"x": "c"}'),
    (obj({"type": "string", "enum": ["a", "b"]}), '{"x": "c"}'),
    (obj({"const": 3, "minimum": 1}), '{"x": 4}'),
    (obj({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}), '{"x": [1,2,3]}'),
    (obj({"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 1}), '{"x": ["a"]}'),
    (obj({"anyOf": [{"type": "integer"}, {"type": "null"}]}), '{"x": "a"}'),
    (obj({"type": ["integer", "null"]}), '{"x": "a"}'),
    (obj({"type": "integer", "minLength": 1}), '{"x": "a"}'),  # minLength cannot apply to an integer
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}, '{"b": 1}'),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, "{}"),
    (
        {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"], "minProperties": 2,
         "maxProperties": 2},
        '{"a": {}}',
    ),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}]}, "{}"),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "text"), ENFORCED)
def test_what_unenforced_does_not_name_is_enforced(schema: dict, text: str) -> None:
    assert not valid(schema, text) and not admits(schema, text)
    node = schema["properties"]["x"] if "x" in schema.get("properties", {}) else schema
    assert unenforced(node) == []


def test_annotations_and_unknown_keywords_assert_nothing() -> None:
    node = {"type": "integer", "description": "n", "title": "N", "default": 1, "x-unit": "m", "examples": [1]}
    assert unenforced(node) == []


def test_branch_order_decides_what_is_read() -> None:
    """The converter reads one branch per node: properties beside anyOf, or
    prefixItems beside an items schema, are not read."""
    assert unenforced({"type": "object", "properties": {}, "anyOf": [{"type": "object"}]}) == [
        "type",
        "properties",
    ]
    assert unenforced(
        {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}
    ) == ["prefixItems"]
    assert unenforced({"oneOf": [{"type": "integer"}], "anyOf": [{"type": "string"}]}) == ["anyOf"]


def test_optional_properties_then_additional_ones_are_valid_json() -> None:
    """The port's grammar after an optional property, when only additional
    properties may follow, had no comma and no way to stop there
    (missive_llamacpp.grammar._ADDITIONAL_REST restores llama.cpp's rule)."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "integer"},
    }
    rules = dict(line.split(" ::= ", 1) for line in json_schema_grammar(schema).splitlines())
    regex = _regex(rules, "root")
    for text in ('{"a": 1}', '{"a": 1, "k": 2}', '{"k": 2, "j": 3}', "{}"):
        assert re.fullmatch(regex, text), text
    assert not re.fullmatch(regex, '{"a": 1"k": 2}')
