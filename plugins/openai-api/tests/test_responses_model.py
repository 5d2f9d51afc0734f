"""``POST /v1/responses`` on the embedded default model (SmolLM2-135M on
llama.cpp, ``missive serve`` with no config) through the official ``openai``
SDK: the stream is the answer, grammar-forced function calls and JSON, a
tool loop continued by ``previous_response_id``, exact usage and the prompt
cache on the second turn."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from missive.testing import live_server

MODEL = "smollm2-135m"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(None) as served:
        yield served


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)


def test_stream_matches_non_stream(client: openai.OpenAI) -> None:
    kwargs = dict(
        model=MODEL, input="List three colours of the rainbow.", max_output_tokens=30, temperature=0.0
    )
    plain = client.responses.create(**kwargs)  # type: ignore[call-overload]
    events = list(client.responses.create(stream=True, **kwargs))  # type: ignore[call-overload]
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert plain.output_text and streamed == plain.output_text
    final = events[-1].response
    assert final.output_text == plain.output_text and final.status == plain.status
    assert final.usage is not None and plain.usage is not None
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens == plain.usage.input_tokens


def test_forced_call_is_schema_valid(client: openai.OpenAI) -> None:
    done = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=60,
        temperature=0.0,
    )
    calls = [item for item in done.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    arguments = json.loads(calls[0].arguments)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str)


def test_tool_loop_with_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        instructions="You are a weather assistant.",
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=60,
        temperature=0.0,
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    answer = client.responses.create(
        model=MODEL,
        instructions="You are a weather assistant.",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 degrees."}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        max_output_tokens=40,
        temperature=0.0,
    )
    assert answer.output_text.strip() and not [i for i in answer.output if i.type == "function_call"]
    assert answer.previous_response_id == first.id
    # The second turn's prompt starts as the first's did: the prompt cache kept that part.
    assert answer.usage is not None
    assert answer.usage.input_tokens_details.cached_tokens > 0


def test_text_format_json_schema(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    done = client.responses.create(
        model=MODEL,
        input="Invent a person: give a name and an age.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        max_output_tokens=60,
        temperature=0.0,
    )
    value = json.loads(done.output_text)
    assert set(value) == {"name", "age"} and isinstance(value["name"], str) and isinstance(value["age"], int)


def test_usage_is_exact(client: openai.OpenAI, url: str) -> None:
    system = "You are a terse assistant. Answer in one short sentence."
    question = "What is the capital of Italy?"
    tool = {
        "name": "get_weather",
        "description": WEATHER["description"],
        "input_schema": WEATHER["parameters"],
    }
    body = {
        "model": MODEL,
        "system": system,
        "tools": [tool],
        "messages": [{"role": "user", "content": question}],
    }
    with httpx.Client(base_url=url, timeout=600) as raw:
        counted = raw.post("/v1/messages/count_tokens", json=body).json()["input_tokens"]
    done = client.responses.create(
        model=MODEL,
        instructions=system,
        input=question,
        tools=[{**WEATHER, "strict": False}],  # type: ignore[list-item]
        max_output_tokens=16,  # OpenAI's least
        temperature=0.0,
    )
    assert done.usage is not None
    assert done.usage.input_tokens == counted
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert 0 < done.usage.output_tokens <= 16
