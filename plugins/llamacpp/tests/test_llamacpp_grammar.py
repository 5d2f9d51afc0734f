"""Schemas a llama.cpp grammar cannot fully enforce (issue 15 item 4): relaxed
for non-strict tools and structured output, refused for strict tools; and the
full-schema check that follows generation (missive.tools.validate)."""

from __future__ import annotations

import pytest

from missive.tools.definitions import ToolChoice, ToolDefinition
from missive.tools.parsers.hermes import HermesParser
from missive.tools.validate import schema_violation
from missive_llamacpp.grammar import json_schema_grammar, relax, tool_call_grammar

UNANCHORED = {"type": "object", "properties": {"n": {"type": "string", "pattern": "\\d+"}}, "required": ["n"]}
NOT = {"type": "object", "properties": {"x": {"not": {"type": "string"}}, "y": False, "z": True}}
REMOTE = {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}
CONDITIONAL = {"type": "object", "properties": {"x": {"if": {"type": "string"}, "then": {"minLength": 2}}}}
NESTED_REF = {
    "$ref": "#/$defs/Args",
    "$defs": {
        "Args": {"type": "object", "properties": {"x": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]}}},
        "B": {"type": "string"},
    },
}
ANY_CHOICE = ToolChoice(mode="any", parallel=False)


def test_relax_names_what_it_leaves_out() -> None:
    notes: list[str] = []
    loose = relax(NOT, notes)
    assert loose == {"type": "object", "properties": {"x": {}, "z": {}}}
    assert notes == ["#/properties/x/not"]
    notes = []
    assert relax(UNANCHORED, notes)["properties"]["n"] == {"type": "string"}
    assert notes == ["#/properties/n/pattern"]
    anchored = {"type": "string", "pattern": "^[a-z]+$"}
    assert relax(anchored, notes := []) == anchored and notes == []


@pytest.mark.parametrize("schema", [UNANCHORED, NOT, REMOTE, CONDITIONAL, NESTED_REF])
def test_non_strict_tool_schemas_always_give_a_grammar(schema: dict) -> None:
    relaxed: list[str] = []
    tools = (ToolDefinition("f", "", schema), ToolDefinition("g", "", {"type": "object"}))
    grammar = tool_call_grammar(HermesParser, tools, ANY_CHOICE, relaxed)
    assert "root ::=" in grammar
    assert relaxed and all(note.startswith("tool 'f' ") for note in relaxed)


def test_strict_tool_schema_is_not_relaxed() -> None:
    with pytest.raises(Exception, match="Pattern must start with"):
        tool_call_grammar(HermesParser, (ToolDefinition("f", "", UNANCHORED, strict=True),), ANY_CHOICE)


def test_enforceable_schemas_are_not_relaxed() -> None:
    relaxed: list[str] = []
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}}
    tool_call_grammar(HermesParser, (ToolDefinition("f", "", schema, strict=True),), ANY_CHOICE, relaxed)
    json_schema_grammar(schema, relaxed)
    assert relaxed == []


def test_structured_output_is_relaxed_too() -> None:
    relaxed: list[str] = []
    assert "root ::=" in json_schema_grammar(UNANCHORED, relaxed)
    assert relaxed == ["output_config.format #/properties/n/pattern"]
    relaxed = []
    json_schema_grammar(NESTED_REF, relaxed)
    assert relaxed == ["output_config.format (whole schema: any JSON object)"]


def test_full_schema_check_after_generation() -> None:
    assert schema_violation(UNANCHORED, {"n": "12"}) is None
    assert schema_violation(UNANCHORED, {"n": "ab"}) == "n: 'ab' does not match '\\\\d+'"
    assert schema_violation(NOT, {"x": "s"}).startswith("x: ")
    assert "False schema does not allow 1" in schema_violation(NOT, {"y": 1})
    assert schema_violation(None, {"anything": 1}) is None
    assert schema_violation({"type": 12}, {}) is None  # not a schema: nothing to check against
