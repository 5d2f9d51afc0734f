"""``max_tokens: 0`` (the API's cache warm-up) on the openai driver, against
the fake OpenAI-compatible server (its prefix cache in whole blocks, as vLLM's):
the prompt reaches the backend with ``max_tokens: 1``, the answer is the
API's empty message, and the next request with that prompt reads it from the
backend's cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import in_process_app
from missive_openai.testing import FakeChatServer


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(vllm=False, max_model_len=2048, prompt_tokens_details=True) as server:
        yield server


@pytest.fixture(scope="module")
def client(fake: FakeChatServer) -> Iterator[anthropic.Anthropic]:
    settings = {
        "base_url": fake.url,
        "model": "fake-model",
        "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]},
    }
    config: dict[str, Any] = {
        "models": {"gen": {"driver": "openai", "context_window": 2048, "settings": settings}}
    }
    with in_process_app(config) as app:
        yield app.sdk(api_key="test", timeout=60)


def test_warm_up_reaches_the_backend_and_answers_empty(
    client: anthropic.Anthropic, fake: FakeChatServer
) -> None:
    messages = [{"role": "user", "content": " ".join(f"warm{i}" for i in range(80))}]
    sent = len(fake.requests)
    warm = client.messages.create(model="gen", max_tokens=0, messages=messages)
    assert warm.content == [] and warm.stop_reason == "max_tokens" and warm.usage.output_tokens == 0
    assert len(fake.requests) == sent + 1 and fake.requests[-1]["max_tokens"] == 1
    prompt = warm.usage.input_tokens + warm.usage.cache_read_input_tokens
    answer = client.messages.create(model="gen", max_tokens=5, messages=messages)
    assert answer.usage.cache_read_input_tokens > 0  # the warm-up filled the backend's cache
    assert answer.usage.input_tokens + answer.usage.cache_read_input_tokens == prompt


def test_forced_tool_warm_up_is_sent_unforced(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    tool = {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    warm = client.messages.create(
        model="gen",
        max_tokens=0,
        tools=[tool],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather in Rome"}],
    )
    assert warm.content == [] and warm.stop_reason == "max_tokens"
    assert (
        fake.requests[-1]["tool_choice"] == "auto"
        and fake.requests[-1]["tools"][0]["function"]["name"] == "get_weather"
    )
