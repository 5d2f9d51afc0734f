"""Responses through the official ``openai`` SDK, on the ``echo`` driver:
the core's 400s in the request's own terms (``input[i]``, ``tools[i]``,
``instructions``, ``text.format``, ``function_call`` items), call ids the
Messages API does not allow (within a request and across
``previous_response_id``), field types, unknown fields inside items."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

Refuse = Callable[..., openai.BadRequestError]

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
KIMI = "functions.get_weather:0"
SYSTEM = {"role": "developer", "content": "Be brief."}
USER = {"role": "user", "content": "weather?"}


def call(call_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }


def output(call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "sunny"}


@pytest.fixture
def refuse(client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]) -> Refuse:
    """A 400 of a request (on ``echo-tools`` unless it names a model), in OpenAI's terms."""
    return lambda **kwargs: refused(client.responses.create, **{"model": "echo-tools", **kwargs})


def test_history_errors(refuse: Refuse) -> None:
    """A call without its output, an output without its call: OpenAI's 400s, naming the item
    (the leading developer item joins the system prompt, the indices are the request's)."""
    error = refuse(input=[SYSTEM, USER, call(), {"role": "user", "content": "and?"}], tools=[WEATHER])
    assert error.param == "input[2].call_id"
    assert error.body["message"] == "No tool output found for function call call_1."  # type: ignore[index]
    error = refuse(input=[SYSTEM, USER, output("call_9")], tools=[WEATHER])
    assert error.param == "input[2].call_id"
    message = "No tool call found for function call output with call_id call_9."
    assert error.body["message"] == message  # type: ignore[index]
    # the last item a call: nothing answers it (the Messages API would read it as a prefill)
    error = refuse(input=[USER, call("call_2")], tools=[WEATHER])
    assert error.param == "input[1].call_id" and "call_2" in error.message


def test_tool_errors(refuse: Refuse) -> None:
    """A dropped web_search tool shifts the Messages tools: tools.0 is the request's tools[1]."""
    bad = {**WEATHER, "name": "f", "parameters": {"type": "string"}}
    error = refuse(input="x", tools=[{"type": "web_search"}, bad])
    assert error.param == "tools[1].parameters.type"
    error = refuse(model="echo-auto", input="x", tools=[WEATHER], tool_choice="required")
    assert error.param == "tool_choice" and 'tool_choice "required"' in error.message
    error = refuse(input="x", tools=[WEATHER], tool_choice={"type": "function", "name": "nope"})
    assert error.param == "tool_choice.name"


def test_content_and_format_errors(client: openai.OpenAI, refuse: Refuse) -> None:
    blank = {"role": "user", "content": [{"type": "input_text", "text": "  "}]}
    done = client.responses.create(model="echo", input=[SYSTEM, blank])  # type: ignore[list-item]
    assert done.output_text == "."  # accepted, as OpenAI does: an empty user turn is "."
    for text in ("", "   "):  # a plain-string input too (found by a newcomer: it was a 400)
        assert client.responses.create(model="echo", input=text).output_text == "."
    error = refuse(instructions="   ", input="x")
    assert error.param == "instructions"
    schema = {"type": "object", "properties": {"a": {"type": 3}}}
    error = refuse(input="x", text={"format": {"type": "json_schema", "name": "x", "schema": schema}})
    assert error.param == "text.format.schema" and "JSON schema is invalid" in error.message
    error = refuse(model="echo", input="word " * 1200)
    assert error.param == "input"
    assert error.code == "context_length_exceeded"


def test_call_ids_outside_the_pattern(client: openai.OpenAI, refuse: Refuse) -> None:
    done = client.responses.create(
        model="echo-report", input=[USER, call(KIMI), output(KIMI)], tools=[WEATHER]
    )
    turns = json.loads(done.output_text)["turns"]
    sent = {b.get("id") or b.get("tool_use_id") for t in turns for b in t["blocks"] if "tool" in b["type"]}
    (mapped,) = sent
    assert mapped != KIMI and mapped.replace("_", "").replace("-", "").isalnum()
    error = refuse(input=[USER, call(KIMI), USER], tools=[WEATHER])
    assert KIMI in error.message and mapped not in error.message
    # A call and its output kept with a response: the next request's conversation has them, matched.
    first = client.responses.create(
        model="echo-tools", input=[USER, call(KIMI), output(KIMI)], tools=[WEATHER]
    )
    then = client.responses.create(
        model="echo-report", previous_response_id=first.id, input="and?", tools=[WEATHER]
    )
    assert then.status == "completed" and then.output_text.count(mapped) == 2


def test_previous_response_errors_name_it(client: openai.OpenAI, refuse: Refuse) -> None:
    """A call the kept response made, not answered by the next request."""
    step = {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Oslo"}']}}
    script = json.dumps({"script": [step], "stop_reason": "tool_use"})
    first = client.responses.create(model="echo-tools", input=script, tools=[WEATHER])  # type: ignore[list-item]
    (made,) = first.output
    assert made.type == "function_call"
    error = refuse(previous_response_id=first.id, input="and?", tools=[WEATHER])
    assert error.param == "previous_response_id"
    assert error.body["message"] == f"No tool output found for function call {made.call_id}."  # type: ignore[index]
    then = client.responses.create(
        model="echo-tools", previous_response_id=first.id, input=[output(made.call_id)], tools=[WEATHER]
    )
    assert then.status == "completed"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"tools": [{**WEATHER, "strict": "yes"}]}, "tools[0].strict"),
        ({"tools": [{**WEATHER, "description": 3}]}, "tools[0].description"),
        ({"max_output_tokens": "10"}, "max_output_tokens"),
        ({"temperature": "1"}, "temperature"),
        ({"store": "no"}, "store"),
        ({"include": "x"}, "include"),
        ({"metadata": "x"}, "metadata"),
        ({"text": "x"}, "text"),
        ({"text": {"format": "json"}}, "text.format"),
        ({"reasoning": "x"}, "reasoning"),
        ({"previous_response_id": 5}, "previous_response_id"),
        ({"instructions": 5}, "instructions"),
        ({"input": [{"type": "function_call_output", "call_id": 5, "output": "x"}]}, "input[0].call_id"),
        ({"input": [{"type": "reasoning", "encrypted_content": 5}]}, "input[0].encrypted_content"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
            "input[0].content[0].text",
        ),
    ],
)
def test_field_types(raw: httpx.Client, extra: dict[str, Any], param: str) -> None:
    response = raw.post("/v1/responses", json={"model": "echo-tools", "input": "x", **extra})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_unknown_fields_inside_items(raw: httpx.Client) -> None:
    body = {
        "model": "echo-tools",
        "tools": [{**WEATHER, "cache": True}],
        "input": [
            {"type": "message", "role": "user", "content": "hi", "name": "alice", "id": "msg_1"},
            {**call("c1"), "status": "completed", "extra": 1},
            {**output("c1"), "ttl": 3},
            {"role": "user", "content": [{"type": "input_text", "text": "x", "lang": "en"}]},
        ],
    }
    response = raw.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    ignored = response.headers["missive-ignored"]
    reported = ("input[0].name", "input[1].extra", "input[2].ttl", "input[3].content[0].lang")
    assert [p for p in (*reported, "tools[0].cache") if p not in ignored] == []
    assert "input[0].id" not in ignored and "input[1].status" not in ignored
