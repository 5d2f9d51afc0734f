"""``POST /v1/chat/completions`` on the embedded default model (SmolLM2-135M
on llama.cpp, ``missive serve`` with no config) through the official
``openai`` SDK: the same answers, grammar-forced tool calls and JSON, exact
usage and the prompt cache shared with ``/v1/messages``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from missive.testing import live_server

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "List three colours of the rainbow."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(None) as served:
        yield served


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)


def test_stream_matches_non_stream(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL, messages=QUESTION, max_tokens=30, temperature=0.0)
    plain = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    chunks = list(
        client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert plain.choices[0].message.content and streamed == plain.choices[0].message.content
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert plain.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_call_is_schema_valid(client: openai.OpenAI, choice: object) -> None:
    done = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice=choice,  # type: ignore[arg-type]
        max_tokens=60,
        temperature=0.0,
    )
    assert done.choices[0].finish_reason == "tool_calls"
    calls = done.choices[0].message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather"
    arguments = json.loads(calls[0].function.arguments)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str)


def test_tool_loop(client: openai.OpenAI) -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=60,
        temperature=0.0,  # type: ignore[arg-type,list-item]
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 degrees."},
    ]
    answer = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=40,
        temperature=0.0,  # type: ignore[arg-type,list-item]
    )
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert (answer.choices[0].message.content or "").strip() and not answer.choices[0].message.tool_calls


def test_response_format_json_schema(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    done = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Invent a person: give a name and an age."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=60,
        temperature=0.0,
    )
    value = json.loads(done.choices[0].message.content or "")
    assert set(value) == {"name", "age"} and isinstance(value["name"], str) and isinstance(value["age"], int)


def test_usage_is_exact_and_the_prompt_cache_is_shared(client: openai.OpenAI, url: str) -> None:
    system = "You are a terse assistant. Answer in one short sentence."
    user = {"role": "user", "content": "What is the capital of Italy?"}
    tool = {
        "name": "get_weather",
        "description": WEATHER["function"]["description"],  # type: ignore[index]
        "input_schema": WEATHER["function"]["parameters"],
    }  # type: ignore[index]
    messages_body = {"model": MODEL, "system": system, "tools": [tool], "messages": [user]}
    with httpx.Client(base_url=url, timeout=600) as raw:
        counted = raw.post("/v1/messages/count_tokens", json=messages_body).json()["input_tokens"]
        # A Messages request first: its prompt fills the cache.
        first = raw.post("/v1/messages", json={**messages_body, "max_tokens": 5, "temperature": 0.0})
        assert first.status_code == 200, first.text
    done = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": system}, user],  # type: ignore[list-item]
        tools=[WEATHER],  # type: ignore[list-item]
        max_tokens=5,
        temperature=0.0,
    )
    assert done.usage is not None and done.usage.prompt_tokens_details is not None
    assert done.usage.prompt_tokens == counted
    assert done.usage.prompt_tokens_details.cached_tokens > 0
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
