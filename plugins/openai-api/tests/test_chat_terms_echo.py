"""Chat Completions through the official ``openai`` SDK, on the ``echo``
driver: the core's 400s in the request's own terms (its ``param``, its
indices, its words), one test per family of the core's checks; a
whitespace-only ``stop``; tool-call ids the Messages API does not allow;
``GET /v1/models/{id}``; field types; unknown fields inside messages."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from missive.testing import in_process_app

Refuse = Callable[..., openai.BadRequestError]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
KIMI = "functions.get_weather:0"


def call(call_id: str = "call_1") -> dict[str, Any]:
    function = {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    return {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


SYSTEM = {"role": "system", "content": "Be brief."}
USER = {"role": "user", "content": "weather?"}


@pytest.fixture
def refuse(client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]) -> Refuse:
    """A 400 of a request (on ``echo-tools`` unless it names a model), in OpenAI's terms."""
    return lambda **kwargs: refused(client.chat.completions.create, **{"model": "echo-tools", **kwargs})


UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)


def test_history_errors(refuse: Refuse) -> None:
    """Calls without their tool messages, tool messages without their call: OpenAI's 400s,
    naming the request's own message (the system message does not shift the index)."""
    error = refuse(messages=[SYSTEM, USER, call(), {"role": "user", "content": "and?"}], tools=[WEATHER])
    assert error.param == "messages[2].role" and error.body["message"] == UNANSWERED + "call_1"  # type: ignore[index]
    # the last message: nothing answers its calls (the Messages API would read it as a prefill)
    error = refuse(messages=[USER, call("call_x")], tools=[WEATHER])
    assert error.param == "messages[1].role" and error.body["message"] == UNANSWERED + "call_x"  # type: ignore[index]
    two = call()
    two["tool_calls"] = [*two["tool_calls"], {**two["tool_calls"][0], "id": "call_2"}]
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    error = refuse(messages=[USER, two, answer], tools=[WEATHER])
    assert error.param == "messages[1].role" and error.message.endswith("messages: call_2")
    error = refuse(
        messages=[SYSTEM, USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}],
        tools=[WEATHER],
    )
    assert error.param == "messages[2].role" and "must be a response to a preceeding message" in error.message
    error = refuse(
        messages=[USER, call(), {"role": "tool", "tool_call_id": "call_9", "content": "x"}], tools=[WEATHER]
    )
    assert error.param == "messages[2].tool_call_id"
    assert "'tool_call_id' of 'call_9' not found in 'tool_calls' of previous message" in error.message
    doubled = call()
    doubled["tool_calls"] = doubled["tool_calls"] * 2
    result = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    error = refuse(messages=[SYSTEM, USER, doubled, result, result], tools=[WEATHER])
    assert error.param == "messages[2].tool_calls[1]" and "tool call ids must be unique" in error.message


def test_tool_definition_errors(refuse: Refuse) -> None:
    def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": parameters}}

    error = refuse(messages=[USER], tools=[WEATHER, tool("f", {"type": "string"})])
    assert error.param == "tools[1].function.parameters.type" and "'object'" in error.message
    error = refuse(messages=[USER], tools=[tool("f", {"type": "object", "properties": {"a": {"type": 3}}})])
    assert error.param == "tools[0].function.parameters" and "JSON schema is invalid" in error.message
    error = refuse(messages=[USER], tools=[tool("bad name", {"type": "object"})])
    assert error.param == "tools[0].function.name"
    error = refuse(messages=[USER], tools=[WEATHER, WEATHER])
    assert error.param == "tools" and "unique" in error.message


def test_tool_choice_errors(refuse: Refuse) -> None:
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}  # type: ignore[dict-item]
    error = refuse(model="echo-strict", messages=[USER], tools=[strict], tool_choice="auto")
    assert error.param == "tools"
    assert 'strict tools with tool_choice "auto"' in error.message
    assert '"required", a named function' in error.message
    error = refuse(model="echo-auto", messages=[USER], tools=[WEATHER], tool_choice="required")
    assert error.param == "tool_choice" and 'tool_choice "required"' in error.message
    named = {"type": "function", "function": {"name": "nope"}}
    error = refuse(messages=[USER], tools=[WEATHER], tool_choice=named)
    assert error.param == "tool_choice.function.name" and "'nope'" in error.message
    error = refuse(
        model="echo",
        messages=[SYSTEM, USER, call(), {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
    )
    assert error.param == "messages" and "tool calls and tool messages" in error.message


def test_content_errors(refuse: Refuse) -> None:
    error = refuse(messages=[USER, {"role": "assistant", "content": "Sure "}])
    assert error.param == "messages" and "trailing whitespace" in error.message
    error = refuse(model="echo", messages=[SYSTEM, {"role": "user", "content": "word " * 1200}])
    assert error.param == "messages" and error.code == "context_length_exceeded"


def test_media_errors(refuse: Refuse) -> None:
    broken = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    message = {"role": "user", "content": [{"type": "text", "text": "look"}, broken]}
    error = refuse(model="echo-report", messages=[SYSTEM, message])
    assert error.param == "messages[1].content[1].image_url.url"
    error = refuse(model="echo", messages=[message])
    assert error.param == "messages[0].content[1]" and "image/png" in error.message
    local = {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/x.png"}}
    error = refuse(model="echo-report", messages=[SYSTEM, USER, {"role": "user", "content": [local]}])
    assert error.param == "messages[2].content[0].image_url.url" and "refused to fetch" in error.message


def test_sampling_capability_errors(refuse: Refuse) -> None:
    error = refuse(model="echo-fixed", messages=[USER], temperature=0.5)
    assert error.param == "temperature"
    error = refuse(model="echo-fixed", messages=[USER], stop=["end"])
    assert error.param == "stop" and "stop is not supported" in error.message


def test_output_and_stop_errors(refuse: Refuse) -> None:
    schema = {"type": "object", "properties": {"a": {"type": 3}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    error = refuse(messages=[USER], response_format=fmt)
    assert error.param == "response_format.json_schema.schema" and "JSON schema is invalid" in error.message
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    error = refuse(messages=[USER], response_format=fmt)
    assert error.param == "response_format" and "response_format (structured output)" in error.message
    error = refuse(messages=[USER], stop=["end", ""])
    assert error.param == "stop[1]" and "non-empty" in error.message
    error = refuse(messages=[USER], stop="")
    assert error.param == "stop"


def test_whitespace_stop(client: openai.OpenAI, raw: httpx.Client) -> None:
    """OpenAI takes ``stop: "\\n"``; the Messages API refuses whitespace-only stop sequences."""
    content = json.dumps({"script": [{"text": "line one\nline two"}]})
    done = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": content}], stop="\n"
    )
    assert done.choices[0].message.content == "line one" and done.choices[0].finish_reason == "stop"
    chunks = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": content}], stop=["\n"], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "line one"
    # A request with fallbacks is checked again for each: still as this door's.
    done = client.chat.completions.create(
        model="echo-spare", messages=[{"role": "user", "content": content}], stop="\n"
    )
    assert done.choices[0].message.content == "line one"
    body = {"model": "echo", "max_tokens": 10, "stop_sequences": ["\n"], "messages": [USER]}
    response = raw.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 400 and "non-whitespace" in response.text


def test_tool_call_ids_outside_the_pattern(client: openai.OpenAI, refuse: Refuse) -> None:
    result = {"role": "tool", "tool_call_id": KIMI, "content": "sunny"}
    done = client.chat.completions.create(
        model="echo-report", messages=[SYSTEM, USER, call(KIMI), result], tools=[WEATHER]
    )
    turns = json.loads(done.choices[0].message.content or "")["turns"]
    sent = {b.get("id") or b.get("tool_use_id") for t in turns for b in t["blocks"] if "tool" in b["type"]}
    (mapped,) = sent  # the call and its result carry the same id, one the Messages API allows
    assert mapped != KIMI and mapped.replace("_", "").replace("-", "").isalnum()
    error = refuse(messages=[SYSTEM, USER, call(KIMI), USER], tools=[WEATHER])
    assert KIMI in error.message and mapped not in error.message


def test_model_by_id(client: openai.OpenAI, raw: httpx.Client) -> None:
    model = client.models.retrieve("echo")
    assert (model.id, model.object, model.owned_by) == ("echo", "model", "missive") and model.created > 0
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nope")
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    assert raw.get("/v1/v1/models/echo", headers={"authorization": "Bearer k"}).json()["object"] == "model"
    anthropic = raw.get("/v1/models/echo", headers={"anthropic-version": "2023-06-01"})
    assert anthropic.json()["type"] == "model"
    missing = raw.get("/v1/models/nope", headers={"anthropic-version": "2023-06-01"})
    assert missing.status_code == 404 and missing.json()["type"] == "error"


def function(**extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {**WEATHER["function"], **extra}}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"parallel_tool_calls": "no", "tools": [WEATHER]}, "parallel_tool_calls"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"stream": True, "stream_options": {"include_usage": "x"}}, "stream_options.include_usage"),
        ({"stream_options": "x"}, "stream_options"),
        ({"tools": [function(strict="yes")]}, "tools[0].function.strict"),
        ({"tools": [function(description=3)]}, "tools[0].function.description"),
        ({"tools": [function(parameters="x")]}, "tools[0].function.parameters"),
        ({"tools": "x"}, "tools"),
        ({"max_completion_tokens": "10"}, "max_completion_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"temperature": "1"}, "temperature"),
        ({"top_p": True}, "top_p"),
        ({"seed": "x"}, "seed"),
        ({"user": 5}, "user"),
        ({"store": "no"}, "store"),
        ({"metadata": "x"}, "metadata"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": "x"}}, "response_format.json_schema"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "messages[0].content[0].text",
        ),
        ({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "messages[0].tool_calls"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": 5, "function": {"name": "f"}}]}]},
            "messages[0].tool_calls[0].id",
        ),
    ],
)
def test_field_types(raw: httpx.Client, extra: dict[str, Any], param: str) -> None:
    body = {"model": "echo-tools", "messages": [USER], **extra}
    response = raw.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_unknown_fields_inside_messages(config: dict[str, Any], raw: httpx.Client) -> None:
    tool_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
        "extra": 1,
    }
    body = {
        "model": "echo-tools",
        "tools": [{**WEATHER, "cache": True}],
        "messages": [
            {"role": "user", "content": "hi", "name": "alice"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call], "refusal": "no"},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "x", "lang": "en"}]},
        ],
    }
    response = raw.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    ignored = response.headers["missive-ignored"]
    reported = ("messages[0].name", "messages[1].refusal", "messages[1].tool_calls[0].extra")
    assert [p for p in (*reported, "messages[2].content[0].lang", "tools[0].cache") if p not in ignored] == []
    plain = raw.post("/v1/chat/completions", json={"model": "echo", "messages": [USER]})
    assert "missive-ignored" not in plain.headers
    with in_process_app({**config, "server": {"strict": True}}) as strict:
        response = strict.http_client().post("/v1/chat/completions", json=body)
    assert response.status_code == 400 and "messages[0].name" in response.json()["error"]["message"]


def test_empty_content_is_accepted(client: openai.OpenAI) -> None:
    """Empty and whitespace-only content, which OpenAI takes and the Messages
    API refuses: whitespace-only parts left out, a user turn left empty sent
    as ``"."`` (``missive_openai_api.turns.EMPTY_TURN``), an empty assistant
    message left out; other content as it was."""

    def turns(*messages: dict[str, Any]) -> list[Any]:
        done = client.chat.completions.create(model="echo-report", messages=list(messages))  # type: ignore[arg-type]
        return json.loads(done.choices[0].message.content or "")["turns"]  # type: ignore[no-any-return]

    for empty in ("", "   ", [{"type": "text", "text": " "}]):
        (only,) = turns(SYSTEM, {"role": "user", "content": empty})
        assert only["role"] == "user" and only["blocks"] == [{"type": "text", "text": "."}]
    blank = {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "   "}]}
    (only,) = turns(SYSTEM, blank)
    assert only["blocks"] == [{"type": "text", "text": "x"}]
    found = turns(USER, {"role": "assistant", "content": "yo"}, {"role": "user", "content": ""})
    assert [t["role"] for t in found] == ["user", "assistant", "user"]  # not a prefill
    found = turns(USER, {"role": "assistant", "content": ""}, {"role": "user", "content": "again"})
    assert [t["role"] for t in found] == ["user"]
