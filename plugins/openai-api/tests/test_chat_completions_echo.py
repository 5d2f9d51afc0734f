"""``POST /v1/chat/completions`` through the official ``openai`` SDK against
the app in process, on the scripted ``echo`` driver: what the translation
hands the core (the echo model's ``report`` setting shows the conversation),
the answer's shapes, usage, tool calls and the error envelope."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from missive.testing import InProcessApp

CONFIG: dict[str, Any] = {
    "server": {"ping_interval": 0.3},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000, "aliases": ["gpt-local"]},
        "echo-report": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {
                "report": True,
                "capabilities": {"tool_choice": ["auto"], "input_media": ["image/png"]},
            },
        },
        "echo-tools": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
        },
        "echo-think": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"thinking": True}},
        },
    },
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def script(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": list(steps), **extra})


def test_plain_answer_and_usage(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hello there world"}]
    )
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-")
    assert done.model == "echo"
    choice = done.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "hello there world"
    assert choice.finish_reason == "stop"
    # echo counts one token per word: the prompt's three words, three out.
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (3, 3, 6)
    assert done.usage.prompt_tokens_details is not None
    assert done.usage.prompt_tokens_details.cached_tokens == 0


def test_alias_and_v1v1(app: InProcessApp) -> None:
    doubled = openai.OpenAI(
        base_url=app.url + "/v1/v1", api_key="k", max_retries=0, http_client=app.http_client()
    )
    done = doubled.chat.completions.create(model="gpt-local", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "hi" and done.model == "gpt-local"


def test_stream_matches_non_stream(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": script({"text": "Hel"}, {"text": "lo, "}, {"text": "you"})}]
    plain = client.chat.completions.create(model="echo", messages=messages)
    chunks = list(
        client.chat.completions.create(
            model="echo", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content == "Hello, you"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_ends_with_done(raw: httpx.Client) -> None:
    body = {"model": "echo", "stream": True, "messages": [{"role": "user", "content": "a b"}]}
    response = raw.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_translation_reaches_the_core(client: openai.OpenAI) -> None:
    """System, developer, user parts, an image as a data URL, a tool call and its result."""
    png = (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
        "AAAABJRU5ErkJggg=="
    )
    done = client.chat.completions.create(
        model="echo-report",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": png}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "thanks"},
        ],
        tools=[WEATHER],
    )
    report = json.loads(done.choices[0].message.content or "")
    text = json.dumps(report)
    assert "Be brief." in text and "Use tools." in text
    assert "image/png" in text and "call_1" in text and "sunny" in text and "Oslo" in text
    assert len(report["turns"]) == 3, report  # user, assistant (the call), user (result + thanks)


def test_tool_call_non_stream_and_stream(client: openai.OpenAI) -> None:
    call = {"tool_call": {"name": "get_weather", "arguments": ['{"city"', ': "Paris"}']}}
    messages = [{"role": "user", "content": script({"text": "Let me look."}, call)}]
    done = client.chat.completions.create(
        model="echo-tools", messages=messages, tools=[WEATHER], tool_choice="auto"
    )
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.type == "function" and tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}
    chunks = list(
        client.chat.completions.create(model="echo-tools", messages=messages, tools=[WEATHER], stream=True)
    )
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_weather" and deltas[0].index == 0
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_mapping(client: openai.OpenAI) -> None:
    """required/named/none reach the core as any/tool/none: a model that
    cannot force calls refuses them, one that can answers."""
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model="echo-think",  # tool_choice auto only
                messages=[{"role": "user", "content": "x"}],
                tools=[WEATHER],
                tool_choice=choice,  # type: ignore[arg-type]
            )
    done = client.chat.completions.create(
        model="echo-tools", messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice="none"
    )
    assert done.choices[0].message.content == "x"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo-tools",
            messages=[{"role": "user", "content": "x"}],
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert caught.value.status_code == 400


def test_reasoning_content(client: openai.OpenAI) -> None:
    messages = [
        {"role": "user", "content": script({"thinking": "hmm, "}, {"thinking": "ok"}, {"text": "Yes."})}
    ]
    done = client.chat.completions.create(model="echo-think", messages=messages, reasoning_effort="low")
    message = done.choices[0].message
    assert message.content == "Yes." and getattr(message, "reasoning_content", None) == "hmm, ok"
    chunks = list(
        client.chat.completions.create(
            model="echo-think", messages=messages, reasoning_effort="high", stream=True
        )
    )
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
    assert reasoning == "hmm, ok"


def test_finish_reasons(client: openai.OpenAI) -> None:
    long = [{"role": "user", "content": "one two three four five"}]
    done = client.chat.completions.create(model="echo", messages=long, max_completion_tokens=2)
    assert done.choices[0].finish_reason == "length" and done.usage is not None
    assert done.usage.completion_tokens == 2
    done = client.chat.completions.create(model="echo", messages=long, max_tokens=3)
    assert done.choices[0].finish_reason == "length"
    done = client.chat.completions.create(model="echo", messages=long, stop=["three"])
    assert done.choices[0].finish_reason == "stop" and done.choices[0].message.content == "one two "


def test_usage_equals_count_tokens(app: InProcessApp, client: openai.OpenAI, raw: httpx.Client) -> None:
    done = client.chat.completions.create(
        model="echo",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is up?"},
        ],
    )
    counted = raw.post(
        "/v1/messages/count_tokens",
        json={
            "model": "echo",
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "What is up?"}],
        },
    ).json()["input_tokens"]
    assert done.usage is not None and done.usage.prompt_tokens == counted == 6


def test_cached_tokens(client: openai.OpenAI) -> None:
    content = script({"text": "ok"}, cache_read_input_tokens=2)
    done = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": content}])
    assert done.usage is not None and done.usage.prompt_tokens_details is not None
    assert done.usage.prompt_tokens_details.cached_tokens == 2
    assert done.usage.prompt_tokens >= 2


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "echo", "n": 2, "messages": [{"role": "user", "content": "x"}]}, 400, "n"),
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ({"model": "echo", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
        ({"model": "echo", "messages": []}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        (
            {"model": "echo", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            400,
            "temperature",
        ),
        (
            {"model": "echo", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            400,
            "max_tokens",
        ),
        (
            {
                "model": "echo",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
                        ],
                    }
                ],
            },
            400,
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            {
                "model": "echo",
                "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            },
            400,
            "messages[0].content[0].type",
        ),
    ],
)
def test_errors_are_openai_envelopes(
    raw: httpx.Client, body: dict[str, Any], status: int, param: str
) -> None:
    response = raw.post("/v1/chat/completions", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_bad_json_and_method(raw: httpx.Client, client: openai.OpenAI) -> None:
    response = raw.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    response = raw.get("/v1/chat/completions")
    assert response.status_code == 405 and "error" in response.json() and "type" in response.json()["error"]
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="missing", messages=[{"role": "user", "content": "x"}])
    assert caught.value.code == "model_not_found"


def test_error_mid_stream(client: openai.OpenAI) -> None:
    content = script({"text": "a"}, {"error": {"type": "overloaded_error", "message": "gone"}})
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": content}], stream=True
    )
    with pytest.raises(openai.APIError, match="gone"):
        list(stream)


def test_models_in_openai_shape(client: openai.OpenAI, raw: httpx.Client) -> None:
    ids = [m.id for m in client.models.list()]
    assert "echo" in ids and "gpt-local" in ids
    listed = raw.get("/v1/models", headers={"authorization": "Bearer k"}).json()
    assert listed["object"] == "list" and listed["data"][0]["object"] == "model"
    # An Anthropic client still gets the Messages API's listing.
    anthropic_shape = raw.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert "has_more" in anthropic_shape and anthropic_shape["data"][0]["type"] == "model"
