"""``POST /v1/responses`` through the official ``openai`` SDK against the app
in process, on the scripted ``echo`` driver: what the translation hands the
core (the echo model's ``report`` setting shows the conversation), the
response object and its stream, ``previous_response_id`` kept per key, and
the error envelope."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from missive.testing import InProcessApp, in_process_app

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)
TOOLS = {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True, "structured_output": True}
CONFIG: dict[str, Any] = {
    "server": {"ping_interval": 0.3, "api_keys": ["sk-alice-0123456789", "sk-bob-0123456789ab"]},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000, "aliases": ["gpt-local"]},
        "echo-report": {
            "driver": "echo",
            "context_window": 2000,
            "settings": {"report": True, "capabilities": {**TOOLS, "input_media": ["image/png"]}},
        },
        "echo-tools": {"driver": "echo", "context_window": 1000, "settings": {"capabilities": TOOLS}},
        "echo-auto": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": ["auto"]}},
        },
    },
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def script(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": list(steps), **extra})


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as made:
        yield made


def _client(app: InProcessApp, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=app.url + "/v1", api_key=key, max_retries=0, http_client=app.http_client())


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> openai.OpenAI:
    return _client(app, "sk-alice-0123456789")


@pytest.fixture(scope="module")
def raw(app: InProcessApp) -> httpx.Client:
    return app.http_client(headers={"authorization": "Bearer sk-alice-0123456789"})  # type: ignore[no-any-return]


def report(response: Any) -> dict[str, Any]:
    return json.loads(response.output_text)


def test_plain_answer_and_usage(client: openai.OpenAI) -> None:
    done = client.responses.create(model="echo", input="hello there world")
    assert done.object == "response" and done.id.startswith("resp_") and done.status == "completed"
    assert done.model == "echo" and done.output_text == "hello there world"
    (item,) = done.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text" and item.content[0].annotations == []
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == (3, 3, 6)
    assert done.usage.input_tokens_details.cached_tokens == 0
    assert done.usage.output_tokens_details.reasoning_tokens == 0
    assert done.store is True and done.parallel_tool_calls is True and done.tools == []


def test_stream_matches_non_stream(client: openai.OpenAI) -> None:
    content = script({"text": "Hel"}, {"text": "lo, "}, {"text": "you"})
    plain = client.responses.create(model="echo", input=content)
    events = list(client.responses.create(model="echo", input=content, stream=True))
    kinds = [e.type for e in events]
    # deltas ready together may be sent as one: count kinds, not deltas
    kinds = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == plain.output_text == "Hello, you"
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.output_text == "Hello, you" and completed.usage == plain.usage
    assert [i.model_dump() for i in completed.output] == [
        i.model_dump() | {"id": i.id.replace(plain.id[5:], completed.id[5:])} for i in plain.output
    ]


def test_stream_helper_and_raw_sse(client: openai.OpenAI, raw: httpx.Client) -> None:
    with client.responses.stream(model="echo", input="a b c") as stream:
        final = stream.get_final_response()
    assert final.output_text == "a b c"
    text = raw.post("/v1/responses", json={"model": "echo", "input": "x", "stream": True}).text
    frames = [f for f in text.split("\n\n") if f]
    assert frames[0].startswith("event: response.created\ndata: {")
    assert frames[-1].startswith("event: response.completed\n") and "[DONE]" not in text


def test_translation_reaches_the_core(client: openai.OpenAI) -> None:
    """Instructions, developer and user items, an image, a call and its output."""
    done = client.responses.create(
        model="echo-report",
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Use tools."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look:"},
                    {"type": "input_image", "image_url": PNG, "detail": "auto"},
                ],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"role": "user", "content": "thanks"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    found = report(done)
    text = json.dumps(found)
    assert "Be brief." in text and "Use tools." in text
    assert "image/png" in text and "call_1" in text and "sunny" in text and "Oslo" in text
    assert len(found["turns"]) == 3, found  # user, assistant (the call), user (result + thanks)


def test_function_call_non_stream_and_stream(client: openai.OpenAI) -> None:
    call = {"tool_call": {"name": "get_weather", "arguments": ['{"city"', ': "Paris"}']}}
    content = script({"text": "Let me look."}, call, stop_reason="tool_use")
    done = client.responses.create(model="echo-tools", input=content, tools=[WEATHER])  # type: ignore[list-item]
    message, function_call = done.output
    assert message.type == "message" and done.output_text == "Let me look."
    assert function_call.type == "function_call" and function_call.name == "get_weather"
    assert function_call.id and function_call.id.startswith("fc_") and function_call.call_id
    assert json.loads(function_call.arguments) == {"city": "Paris"} and done.status == "completed"
    events = list(
        client.responses.create(model="echo-tools", input=content, tools=[WEATHER], stream=True)  # type: ignore[list-item]
    )
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == '{"city": "Paris"}'
    (args_done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args_done.arguments == '{"city": "Paris"}' and args_done.output_index == 1
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["message", "function_call"]


def test_tool_choice_mapping(client: openai.OpenAI) -> None:
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        with pytest.raises(openai.BadRequestError):
            client.responses.create(
                model="echo-auto",
                input="x",
                tools=[WEATHER],  # type: ignore[list-item]
                tool_choice=choice,  # type: ignore[arg-type]
            )
    done = client.responses.create(model="echo-tools", input="x", tools=[WEATHER], tool_choice="none")  # type: ignore[list-item]
    assert done.output_text == "x" and done.tool_choice == "none"
    done = client.responses.create(
        model="echo-tools",
        input="x",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,  # type: ignore[list-item]
    )
    assert done.parallel_tool_calls is False and done.tools[0].name == "get_weather"  # type: ignore[union-attr]


def test_reasoning_items_round_trip(client: openai.OpenAI) -> None:
    """Reasoning comes out as a reasoning item (raw reasoning_text); with
    include=reasoning.encrypted_content it carries the signature, and sent
    back as input the core sees the thinking again."""
    content = script({"thinking": "hmm, "}, {"thinking": "ok"}, {"text": "Yes."})
    done = client.responses.create(
        model="echo-tools",
        input=content,
        reasoning={"effort": "low"},
        include=["reasoning.encrypted_content"],
    )
    reasoning, message = done.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "hmm, ok" and reasoning.summary == []
    assert reasoning.encrypted_content and done.output_text == "Yes."
    events = list(
        client.responses.create(model="echo-tools", input=content, reasoning={"effort": "high"}, stream=True)
    )
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "hmm, ok"
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output[0].encrypted_content is None  # not asked for
    # Stateless replay: the reasoning item with its signature reaches the core (echo_thinking replays it).
    again = client.responses.create(
        model="echo-tools",
        input=[
            {"role": "user", "content": content},
            reasoning.model_dump(exclude_none=True),
            message.model_dump(exclude_none=True),
            {"role": "user", "content": script({"echo_thinking": True})},
        ],
        store=False,
    )
    assert "hmm, ok" in again.output_text


def test_previous_response_id_and_store(app: InProcessApp, client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="echo-report",
        instructions="First instructions.",
        input=[{"role": "developer", "content": "Dev."}, {"role": "user", "content": "one"}],
    )
    second = client.responses.create(model="echo-report", previous_response_id=first.id, input="two")
    found = report(second)
    assert found["system"] == "Dev."  # instructions are not carried over, input items are
    assert "one" in json.dumps(found["turns"]) and "two" in json.dumps(found["turns"])
    assert [t["role"] for t in found["turns"]] == ["user", "assistant", "user"]
    assert second.previous_response_id == first.id
    # GET returns the kept response; DELETE drops it (its continuation then fails).
    assert client.responses.retrieve(second.id).output_text == second.output_text
    # Another key sees none of it.
    bob = _client(app, "sk-bob-0123456789ab")
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        bob.responses.create(model="echo", previous_response_id=first.id, input="steal")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"  # type: ignore[attr-defined]
    # store: false keeps nothing.
    unstored = client.responses.create(model="echo", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="echo", previous_response_id=unstored.id, input="y")
    deleted = client.responses.delete(first.id)
    assert deleted is None
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="echo", previous_response_id=second.id, input="three")


def test_previous_response_tool_loop_streamed(client: openai.OpenAI) -> None:
    call = {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Rome"}']}}
    then = [{"script": [{"text": "It is sunny."}]}]
    events = list(
        client.responses.create(
            model="echo-tools",
            input=script(call, stop_reason="tool_use", then=then),
            tools=[WEATHER],  # type: ignore[list-item]
            stream=True,
        )
    )
    first = events[-1].response  # type: ignore[union-attr]
    (fc,) = first.output
    assert fc.type == "function_call"
    answer = client.responses.create(
        model="echo-tools",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert answer.output_text == "It is sunny."


def test_incomplete_and_structured(client: openai.OpenAI) -> None:
    words = " ".join(f"w{i}" for i in range(40))  # more than OpenAI's least max_output_tokens, 16
    done = client.responses.create(model="echo", input=words, max_output_tokens=16)
    assert done.status == "incomplete" and done.incomplete_details is not None
    assert done.incomplete_details.reason == "max_output_tokens" and done.max_output_tokens == 16
    assert [item.status for item in done.output] == ["incomplete"]  # the cut message too
    events = list(client.responses.create(model="echo", input=words, max_output_tokens=16, stream=True))
    assert events[-1].type == "response.incomplete"
    assert [item.status for item in events[-1].response.output] == ["incomplete"]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}}
    done = client.responses.create(model="echo-tools", input=script({"text": '{"a": 1}'}), text=fmt)  # type: ignore[arg-type]
    assert json.loads(done.output_text) == {"a": 1} and done.text is not None
    assert done.text.format.type == "json_schema"


def test_cached_tokens(client: openai.OpenAI) -> None:
    done = client.responses.create(model="echo", input=script({"text": "ok"}, cache_read_input_tokens=2))
    assert done.usage is not None and done.usage.input_tokens_details.cached_tokens == 2
    assert done.usage.input_tokens >= 2


def test_ignored_and_dropped_tools(raw: httpx.Client) -> None:
    body = {
        "model": "echo",
        "input": "x",
        "tools": [{"type": "web_search"}],
        "text": {"verbosity": "low"},
        "include": ["message.output_text.logprobs"],
        "max_tool_calls": 3,
    }
    response = raw.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    ignored = response.headers["missive-ignored"]
    assert "web_search" in ignored and "text.verbosity" in ignored and "max_tool_calls" in ignored


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "x"}, 400, "model"),
        ({"model": "nope", "input": "x"}, 404, "model"),
        ({"model": "echo"}, 400, "input"),
        ({"model": "echo", "input": []}, 400, "input"),
        ({"model": "echo", "input": [{"type": "computer_call_output"}]}, 400, "input[0].type"),
        ({"model": "echo", "input": [{"role": "wizard", "content": "x"}]}, 400, "input[0].role"),
        (
            {
                "model": "echo",
                "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
            },
            400,
            "input[0].content[0].type",
        ),
        (
            {
                "model": "echo",
                "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}],
            },
            400,
            "input[0].arguments",
        ),
        ({"model": "echo", "input": "x", "tools": [{"type": "file_search"}]}, 400, "tools[0].type"),
        ({"model": "echo", "input": "x", "tool_choice": "required"}, 400, "tool_choice"),
        ({"model": "echo", "input": "x", "temperature": 3}, 400, "temperature"),
        ({"model": "echo", "input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"model": "echo", "input": "x", "text": {"format": {"type": "yaml"}}}, 400, "text.format.type"),
        ({"model": "echo", "input": "x", "reasoning": {"effort": "huge"}}, 400, "reasoning.effort"),
        ({"model": "echo", "input": "x", "previous_response_id": "resp_nope"}, 400, "previous_response_id"),
        ({"model": "echo", "input": "x", "background": True, "store": False}, 400, "store"),
        ({"model": "echo", "input": "x", "conversation": "conv_1"}, 400, "conversation"),
        ({"model": "echo", "input": "x", "stream": "yes"}, 400, "stream"),
    ],
)
def test_errors_are_openai_envelopes(
    raw: httpx.Client, body: dict[str, Any], status: int, param: str
) -> None:
    response = raw.post("/v1/responses", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_bad_json_key_and_unknown_id(app: InProcessApp, raw: httpx.Client) -> None:
    response = raw.post("/v1/responses", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        _client(app, "wrong").responses.create(model="echo", input="x")
    response = raw.get("/v1/responses/resp_missing")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert raw.delete("/v1/responses/resp_missing").status_code == 404


def test_error_mid_stream(client: openai.OpenAI) -> None:
    content = script({"text": "a"}, {"error": {"type": "overloaded_error", "message": "gone"}})
    events = list(client.responses.create(model="echo", input=content, stream=True))
    last = events[-1]
    assert last.type == "response.failed" and last.response.status == "failed"
    assert last.response.error is not None and last.response.error.message == "gone"
    assert last.response.error.code == "server_error"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(last.response.id)  # a failed response is not kept
