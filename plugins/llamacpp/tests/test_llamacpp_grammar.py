"""Schemas a llama.cpp grammar cannot fully enforce (issue 15 item 4): relaxed
for non-strict tools and structured output, refused for strict tools; and the
full-schema check that follows generation (missive.tools.validate)."""

from __future__ import annotations

import pytest

from missive.tools.definitions import ToolChoice, ToolDefinition
from missive.tools.parsers.hermes import HermesParser
from missive.tools.validate import schema_violation
from missive_llamacpp.grammar import UnenforcedSchema, json_schema_grammar, relax, tool_call_grammar

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
    with pytest.raises(UnenforcedSchema, match="not enforced: tool 'f' #/properties/n/pattern"):
        tool_call_grammar(HermesParser, (ToolDefinition("f", "", UNANCHORED, strict=True),), ANY_CHOICE)


#: Keywords the converter accepts without enforcing them (measured in
#: test_llamacpp_enforced.py), each as (property schema, the path named).
SILENTLY_IGNORED = [
    ({"type": "integer", "minimum": 0, "maximum": 10}, ["#/properties/x/minimum", "#/properties/x/maximum"]),
    ({"type": "integer", "multipleOf": 2}, ["#/properties/x/multipleOf"]),
    ({"type": "number", "exclusiveMinimum": 0}, ["#/properties/x/exclusiveMinimum"]),
    ({"type": "integer", "not": {"const": 3}}, ["#/properties/x/not"]),
    ({"type": "string", "if": {"const": "a"}, "then": {"minLength": 2}}, 
     ["#/properties/x/if", "#/properties/x/then"]),
    ({"type": "string", "format": "email"}, ["#/properties/x/format"]),
    ({"type": "array", "minItems": 1}, ["#/properties/x/minItems"]),
    ({"type": ["integer", "null"], "maximum": 1}, ["#/properties/x/maximum"]),
]  # fmt: skip


def _with(prop: dict) -> dict:
    return {"type": "object", "properties": {"x": prop}, "required": ["x"]}


@pytest.mark.parametrize(("prop", "paths"), SILENTLY_IGNORED)
def test_strict_tool_with_an_unenforced_keyword_is_refused(prop: dict, paths: list[str]) -> None:
    """The converter would take these schemas and ignore the keyword
    (SmolLM2 answered {"x": 500} to maximum 10): strict refuses them, naming it."""
    tool = ToolDefinition("f", "", _with(prop), strict=True)
    with pytest.raises(UnenforcedSchema) as caught:
        tool_call_grammar(HermesParser, (tool,), ANY_CHOICE)
    assert str(caught.value) == "not enforced: " + ", ".join(f"tool 'f' {p}" for p in paths)


@pytest.mark.parametrize(("prop", "paths"), SILENTLY_IGNORED)
def test_non_strict_tool_and_output_name_each_unenforced_keyword(prop: dict, paths: list[str]) -> None:
    relaxed: list[str] = []
    grammar = tool_call_grammar(HermesParser, (ToolDefinition("f", "", _with(prop)),), ANY_CHOICE, relaxed)
    assert "root ::=" in grammar and relaxed == [f"tool 'f' {p}" for p in paths]
    relaxed = []
    json_schema_grammar(_with(prop), relaxed)
    assert relaxed == [f"output_config.format {p}" for p in paths]


def test_output_with_bounds_and_a_lookaround_pattern_is_relaxed_and_named() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
            "s": {"type": "string", "pattern": "^(?!x)[a-z]+$"},
        },
        "required": ["n", "s"],
        "additionalProperties": False,
    }
    relaxed: list[str] = []
    json_schema_grammar(schema, relaxed)
    assert relaxed == [
        "output_config.format #/properties/n/minimum",
        "output_config.format #/properties/n/maximum",
        "output_config.format #/properties/s/pattern",
    ]


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "string", "maxLength": 5, "minLength": 1},
        {"type": "string", "enum": ["a", "b"], "description": "one of two"},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        {"type": "string", "pattern": "^[0-9]+$"},
        {"const": 4, "maximum": 10},
        True,
    ],
)
def test_strict_tool_with_enforced_keywords_only_still_passes(prop: object) -> None:
    relaxed: list[str] = []
    tool = ToolDefinition("f", "", {"type": "object", "properties": {"x": prop}})
    strict = ToolDefinition("f", "", {"type": "object", "properties": {"x": prop}}, strict=True)
    assert "root ::=" in tool_call_grammar(HermesParser, (strict,), ANY_CHOICE, relaxed)
    tool_call_grammar(HermesParser, (tool,), ANY_CHOICE, relaxed)
    assert relaxed == []


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
