"""Pure pieces of the llamaserver driver: the forced-call schema and its
reader, /props parsing, the error classification."""

from __future__ import annotations

import pytest

from missive.driver.events import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from missive.protocol.errors import BadGatewayError, InvalidRequestError, OverloadedError, PromptTooLongError
from missive.tools.definitions import ToolChoice, ToolDefinition
from missive_llamaserver.errors import is_replica_failure, stream_error, translate_error
from missive_llamaserver.forced import ForcedCall, forced_call_schema
from missive_llamaserver.props import context_from_models, parse_props
from missive_openai.upstream_errors import parse_error_body

NODE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "required": ["root"],
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        }
    },
}
TOOLS = (ToolDefinition("tree", "", NODE), ToolDefinition("ping", "", {"type": "object", "properties": {}}))


def test_named_choice_schema_rebases_refs_and_drops_schema_uri() -> None:
    schema = forced_call_schema(TOOLS, ToolChoice("tool", "tree"))
    assert schema["properties"]["name"] == {"const": "tree"} and schema["required"] == ["name", "arguments"]
    arguments = schema["properties"]["arguments"]
    assert "$schema" not in arguments
    assert arguments["properties"]["root"] == {"$ref": "#/properties/arguments/$defs/node"}
    assert arguments["$defs"]["node"]["properties"]["kids"]["items"] == {
        "$ref": "#/properties/arguments/$defs/node"
    }
    assert TOOLS[0].input_schema["properties"]["root"] == {"$ref": "#/$defs/node"}  # the request is untouched


def test_any_choice_schema_is_one_object_per_tool() -> None:
    schema = forced_call_schema(TOOLS, ToolChoice("any"))
    names = [s["properties"]["name"]["const"] for s in schema["anyOf"]]
    assert names == ["tree", "ping"]
    assert schema["anyOf"][0]["properties"]["arguments"]["properties"]["root"]["$ref"] == (
        "#/anyOf/0/properties/arguments/$defs/node"
    )
    with pytest.raises(ValueError):
        forced_call_schema(TOOLS, ToolChoice("auto"))


def test_forced_call_reader() -> None:
    reader = ForcedCall({"ping", "tree"})
    assert (
        reader.feed(
            [TextDelta("```json\n{\"name\": \"ping\", "), TextDelta('"arguments": {"b": 1, "a": 2}}\n```')]
        )
        == []
    )
    start, delta, end = reader.finish(truncated=False)
    assert isinstance(start, ToolCallStart) and start.name == "ping"
    assert isinstance(delta, ToolCallDelta) and delta.partial_json == '{"b": 1, "a": 2}' and delta.tokens == 2
    assert isinstance(end, ToolCallEnd)
    cut = ForcedCall({"ping"})
    cut.feed([TextDelta('{"name": "ping", "argu')])
    assert cut.finish(truncated=True) == []
    for text in ('{"name": "pong", "arguments": {}}', '{"name": "ping", "arguments": []}', "hello"):
        wrong = ForcedCall({"ping"})
        wrong.feed([TextDelta(text)])
        with pytest.raises(BadGatewayError, match="ignored the forced tool call"):
            wrong.finish(truncated=False)


def test_props_of_both_forks() -> None:
    mainline = parse_props(
        {
            "default_generation_settings": {"n_ctx": 4096},
            "total_slots": 2,
            "chat_template": "x",
            "chat_template_caps": {"supports_tools": False, "odd": "no"},
            "modalities": {"vision": True},
            "build_info": "b11434-abc",
        },
        "llama.cpp",
    )
    assert (mainline.n_ctx, mainline.total_slots, mainline.vision, mainline.build, mainline.fork) == (
        4096,
        2,
        True,
        "b11434-abc",
        "llama.cpp",
    )
    assert mainline.template_caps == {"supports_tools": False}
    ik = parse_props({"n_ctx": 8192, "default_generation_settings": {}, "chat_template": "y"}, "ik_llama.cpp")
    assert (ik.n_ctx, ik.template_caps, ik.fork) == (8192, {}, "ik_llama.cpp")
    assert parse_props([], None).n_ctx is None
    assert context_from_models({"data": [{"meta": {"n_ctx": 512}}]}) == 512
    assert context_from_models({"data": []}) is None


def test_error_classification() -> None:
    overflow = parse_error_body(
        400,
        b'{"error": {"code": 400, "message": "request (3000 tokens) exceeds the available '
        b'context size (2048 tokens), try increasing it", "type": "exceed_context_size_error",'
        b' "n_prompt_tokens": 3000, "n_ctx": 2048}}',
    )
    error = translate_error(overflow, model="m", endpoint="/v1/chat/completions")
    assert (
        isinstance(error, PromptTooLongError)
        and error.message == "prompt is too long: 3000 tokens > 2047 maximum"
    )
    template = parse_error_body(
        500, b'{"error": {"code": 500, "message": "Jinja Exception: roles", "type": "server_error"}}'
    )
    assert not is_replica_failure(template)
    assert isinstance(translate_error(template, model="m", endpoint="/apply-template"), InvalidRequestError)
    assert isinstance(translate_error(template, model="m", endpoint="/v1/chat/completions"), BadGatewayError)
    loading = parse_error_body(
        503, b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'
    )
    assert is_replica_failure(loading)
    assert is_replica_failure(parse_error_body(500, b"Internal Server Error"))
    assert isinstance(translate_error(loading, model="m", endpoint="/tokenize"), OverloadedError)
    assert stream_error({"choices": [], "usage": {}}) is None
    assert stream_error({"code": 500, "message": "boom", "type": "server_error"}).message == "boom"  # ik
    assert stream_error({"error": {"code": 500, "message": "boom", "type": "server_error"}}).status == 500
