"""OpenAI's value rules on both APIs, through the official ``openai`` SDK on
the ``echo`` driver (:mod:`missive_openai_api.limits`): ``metadata``,
``stream_options`` without ``stream``, Chat's ``stop`` count, Responses'
``truncation`` and ``max_output_tokens`` minimum; an unknown output format
type named where it was sent; a missing ``function`` object; a conversation
of system messages only; pydantic's wordings never reach the client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

Refuse = Callable[..., openai.BadRequestError]
USER = {"role": "user", "content": "hi"}


@pytest.fixture
def chat(client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]) -> Refuse:
    return lambda **kwargs: refused(
        client.chat.completions.create, **{"model": "echo-tools", "messages": [USER], **kwargs}
    )


@pytest.fixture
def responses(client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]) -> Refuse:
    return lambda **kwargs: refused(
        client.responses.create, **{"model": "echo-tools", "input": "hi", **kwargs}
    )


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_metadata(request: pytest.FixtureRequest, api: str) -> None:
    refuse: Refuse = request.getfixturevalue(api)
    error = refuse(metadata={"a": 1})
    assert error.param == "metadata.a" and error.code == "invalid_type"
    assert "expected a string, but got an integer" in error.message
    error = refuse(metadata={str(i): "x" for i in range(17)})
    assert error.param == "metadata" and "at most 16 properties" in error.message
    error = refuse(metadata={"k" * 65: "x"})
    assert error.param == "metadata" and "at most 64 characters" in error.message
    error = refuse(metadata={"a": "x" * 513})
    assert error.param == "metadata.a" and "maximum length 512" in error.message


def test_metadata_within_limits(client: openai.OpenAI) -> None:
    metadata = {str(i): "x" * 512 for i in range(16)}
    done = client.chat.completions.create(model="echo", messages=[USER], metadata=metadata)  # type: ignore[list-item]
    assert done.choices[0].message.content == "hi"
    assert client.responses.create(model="echo", input="hi", metadata=metadata).output_text == "hi"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_stream_options_without_stream(request: pytest.FixtureRequest, api: str) -> None:
    refuse: Refuse = request.getfixturevalue(api)
    error = refuse(stream_options={"include_usage": True})
    assert error.param == "stream_options"
    assert error.body["message"] == "The 'stream_options' parameter is only allowed when 'stream' is enabled."


def test_stop_count(chat: Refuse, client: openai.OpenAI) -> None:
    error = chat(stop=["a", "b", "c", "d", "e"])
    assert error.param == "stop" and error.code == "array_above_max_length"
    assert "maximum length 4, but got an array with length 5" in error.message
    done = client.chat.completions.create(model="echo", messages=[USER], stop=["a", "b", "c", "d"])  # type: ignore[list-item]
    assert done.choices[0].message.content == "hi"


def test_truncation_and_min_output_tokens(responses: Refuse, client: openai.OpenAI) -> None:
    error = responses(truncation="banana")
    assert error.param == "truncation" and "Supported values are: 'auto' and 'disabled'" in error.message
    error = responses(max_output_tokens=15)
    assert error.param == "max_output_tokens" and error.code == "integer_below_min_value"
    assert "Expected a value >= 16, but got 15 instead" in error.message
    done = client.responses.create(model="echo", input="hi", truncation="auto", max_output_tokens=16)
    assert done.output_text == "hi" and done.truncation == "auto"


def test_unknown_format_type(chat: Refuse, responses: Refuse) -> None:
    error = chat(response_format={"type": "banana"})
    assert error.param == "response_format.type" and "'banana'" in error.message
    error = responses(text={"format": {"type": "banana"}})
    assert error.param == "text.format.type" and "'banana'" in error.message


def test_function_tool_without_function(chat: Refuse) -> None:
    error = chat(tools=[{"type": "function"}])
    assert error.param == "tools[0].function" and error.code == "missing_required_parameter"
    assert error.body["message"] == "Missing required parameter: 'tools[0].function'."
    error = chat(tools=[{"type": "custom", "custom": {"name": "x"}}])
    assert error.param == "tools[0].type" and "only function tools" in error.message


def test_system_messages_only(chat: Refuse, responses: Refuse) -> None:
    error = chat(messages=[{"role": "system", "content": "Be brief."}])
    assert error.param == "messages" and "at least one user, assistant or tool message" in error.message
    error = responses(input=[{"role": "developer", "content": "Be brief."}])
    assert error.param == "input" and "at least one message or item" in error.message


PYDANTIC = ("should", "Input should", "after validation", "Field required")


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
        {"tools": [{"type": "function", "function": {"name": ""}}]},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]},
    ],
)
def test_no_pydantic_words(chat: Refuse, extra: dict[str, Any]) -> None:
    error = chat(**extra)
    assert not any(word in error.message for word in PYDANTIC), error.message


def deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_schema_too_deep(chat: Refuse, responses: Refuse) -> None:
    """A 250-level schema: the core's depth limit, named where the request put the schema."""
    tool = {"type": "function", "function": {"name": "f", "parameters": deep(250)}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": deep(250)}}
    for error, param in (
        (chat(response_format=fmt), "response_format.json_schema.schema"),
        (chat(tools=[tool]), "tools[0].function.parameters"),
        (
            responses(text={"format": {"type": "json_schema", "name": "x", "schema": deep(250)}}),
            "text.format.schema",
        ),
        (
            responses(tools=[{"type": "function", "name": "f", "parameters": deep(250)}]),
            "tools[0].parameters",
        ),
    ):
        assert error.param == param
        assert error.message.endswith(
            f"{param}: the JSON schema is nested more than 64 levels deep"
            " (objects and arrays inside one another), beyond this server's limit;"
            " flatten it, or share parts with $defs and $ref"
        )


SCHEMA = {"type": "object", "properties": {}}


def test_format_name(chat: Refuse, responses: Refuse, client: openai.OpenAI) -> None:
    """A JSON schema format needs a ``name`` of OpenAI's pattern (:mod:`missive_openai_api.value_rules`)."""
    error = responses(text={"format": {"type": "json_schema", "schema": SCHEMA}})
    assert error.param == "text.format.name" and error.code == "missing_required_parameter"
    assert error.body["message"] == "Missing required parameter: 'text.format.name'."  # type: ignore[index]
    error = responses(text={"format": {"type": "json_schema", "name": "a b", "schema": SCHEMA}})
    assert error.param == "text.format.name" and error.code == "invalid_value"
    error = chat(response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}})
    assert error.param == "response_format.json_schema.name" and error.code == "missing_required_parameter"
    error = chat(response_format={"type": "json_schema", "json_schema": {"name": "x" * 65, "schema": SCHEMA}})
    assert error.param == "response_format.json_schema.name"
    named = {"type": "json_schema", "name": "out_1", "schema": SCHEMA}
    error = responses(model="echo", text={"format": named})  # past the name: echo has no structured output
    assert error.param == "text.format" and "not supported by model" in error.message


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_enumerated_and_ranged_values(request: pytest.FixtureRequest, api: str) -> None:
    refuse: Refuse = request.getfixturevalue(api)
    error = refuse(service_tier="turbo")
    assert error.param == "service_tier" and error.code == "invalid_value" and "'turbo'" in error.message
    error = refuse(top_logprobs=21)
    assert error.param == "top_logprobs" and error.code == "integer_above_max_value"
    error = refuse(tool_choice="sometimes")
    assert error.param == "tool_choice" and "Invalid value: 'sometimes'" in error.message


@pytest.mark.parametrize("name", ["frequency_penalty", "presence_penalty"])
def test_penalties(chat: Refuse, name: str) -> None:
    error = chat(**{name: 2.5})
    assert error.param == name and error.code == "decimal_above_max_value"
    error = chat(**{name: -3})
    assert error.param == name and error.code == "decimal_below_min_value"


def test_include_values(responses: Refuse, client: openai.OpenAI) -> None:
    error = responses(include=["reasoning.everything"])
    assert error.param == "include[0]" and error.code == "invalid_value"
    done = client.responses.create(model="echo", input="hi", include=["message.output_text.logprobs"])
    assert done.output_text == "hi"  # known, not acted on


def test_duplicate_items_and_answers(responses: Refuse, chat: Refuse) -> None:
    message = {
        "type": "message",
        "role": "user",
        "id": "msg_1",
        "content": [{"type": "input_text", "text": "a"}],
    }
    error = responses(input=[message, message])
    assert error.param == "input"
    assert error.body["message"] == (  # type: ignore[index]
        "Duplicate item found with id msg_1. Remove duplicate items from your input and try again."
    )
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    error = responses(input=[call, output, output])
    assert error.param == "input[2].call_id" and "Duplicate function call output" in error.message
    tool_call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    answer = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    error = chat(messages=[USER, {"role": "assistant", "tool_calls": [tool_call]}, answer, answer])
    assert error.param == "messages[3].tool_call_id" and "more than one tool message" in error.message


def test_chat_text_part_in_responses(responses: Refuse) -> None:
    """A ``text`` part (Chat's) is refused in a Responses input, as OpenAI does."""
    error = responses(input=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert error.param == "input[0].content[0].type"
