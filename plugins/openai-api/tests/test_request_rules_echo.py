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
