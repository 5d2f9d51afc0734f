"""One Ollama model served by several replicas (``settings.base_urls``):
least outstanding requests, an unreachable replica skipped, a busy one
retried elsewhere before the first byte; through the official SDK against
two fake Ollama servers and a port nothing listens on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import closed_port, live_server
from missive_ollama.testing import FakeModel, FakeOllama

TAG = "qwen3:8b"


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def chats(fake: FakeOllama) -> int:
    return len(fake.chats)


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeOllama, FakeOllama]]:
    with (
        FakeOllama({TAG: FakeModel(capabilities=["completion"])}) as a,
        FakeOllama({TAG: FakeModel(capabilities=["completion"])}) as b,
    ):
        yield a, b


@pytest.fixture(scope="module")
def url(fakes: tuple[FakeOllama, FakeOllama]) -> Iterator[str]:
    a, b = fakes
    with closed_port() as down, closed_port() as other_down:
        dead = down.url

        def model(urls: list[str]) -> dict[str, Any]:
            return {
                "driver": "ollama",
                "context_window": 2048,
                "settings": {"model": TAG, "base_urls": urls, "connect_timeout": 1.0, "retry_after": 3},
            }

        config = {
            "models": {
                "pair": model([a.url, b.url]),
                "one-down": model([dead, a.url]),
                "all-down": model([dead, other_down.url]),
            }
        }
        with live_server(config) as base:
            yield base


@pytest.fixture
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, timeout=60)


def test_idle_replicas_share_the_requests(
    client: anthropic.Anthropic, fakes: tuple[FakeOllama, FakeOllama]
) -> None:
    a, b = fakes
    before = chats(a), chats(b)
    for i in range(6):
        message = client.messages.create(model="pair", max_tokens=20, messages=user(f"hello {i}"))
        assert message.content[0].text == f"hello {i}"
    assert chats(a) - before[0] == 3 and chats(b) - before[1] == 3  # ties broken round-robin


def test_a_busy_replica_gets_no_second_request(
    url: str, client: anthropic.Anthropic, fakes: tuple[FakeOllama, FakeOllama]
) -> None:
    """Least outstanding: while one replica streams a long answer, the next
    requests go to the other."""
    a, b = fakes
    for fake in fakes:
        fake.gate("hold").clear()
    body = {
        "model": "pair",
        "max_tokens": 20,
        "stream": True,
        "messages": user('FAKE:{"steps": [{"content": "slow"}, {"wait": "hold"}, {"content": " done"}]}'),
    }
    before = chats(a), chats(b)
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=30) as resp:
        lines = resp.iter_lines()
        next(line for line in lines if "text_delta" in line)
        busy = a if chats(a) > before[0] else b
        other = b if busy is a else a
        busy_count, other_count = chats(busy), chats(other)
        for i in range(3):
            assert client.messages.create(model="pair", max_tokens=20, messages=user(f"quick {i}")).content
        assert chats(busy) == busy_count and chats(other) == other_count + 3
        busy.gate("hold").set()
        rest = [line for line in lines if line.startswith("event: ")]
    assert rest[-1] == "event: message_stop"


def test_unreachable_replica_is_skipped(
    client: anthropic.Anthropic, fakes: tuple[FakeOllama, FakeOllama]
) -> None:
    a, _ = fakes
    before = chats(a)
    for i in range(4):
        assert (
            client.messages.create(model="one-down", max_tokens=20, messages=user(f"still {i}"))
            .content[0]
            .text
            == f"still {i}"
        )
        assert client.messages.count_tokens(model="one-down", messages=user("count me")).input_tokens > 0
    assert chats(a) == before + 4


def test_busy_replica_retried_on_the_other(
    client: anthropic.Anthropic, fakes: tuple[FakeOllama, FakeOllama]
) -> None:
    a, b = fakes
    a.busy = True
    try:
        before_b = chats(b)
        for i in range(3):  # whichever replica is chosen first, the answer comes from b
            assert (
                client.messages.create(model="pair", max_tokens=20, messages=user(f"retry {i}"))
                .content[0]
                .text
                == f"retry {i}"
            )
        assert chats(b) == before_b + 3
        b.busy = True
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(model="pair", max_tokens=20, messages=user("nobody"))
        assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "3"
        assert "is busy" in caught.value.body["error"]["message"]
    finally:
        a.busy = b.busy = False
    # busy is not down: both serve again at once
    assert (
        client.messages.create(model="pair", max_tokens=20, messages=user("back")).content[0].text == "back"
    )


def test_every_replica_down_is_529(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="all-down", max_tokens=20, messages=user("hi"))
    assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "3"
    message = caught.value.body["error"]["message"]
    assert "unavailable" in message and message.count("ConnectError") == 2


def test_settings_take_one_url_form() -> None:
    from missive.config import ConfigError
    from missive_ollama.settings import parse_settings

    with pytest.raises(ConfigError, match="not both"):
        parse_settings("m", {"model": TAG, "base_url": "http://a:1", "base_urls": ["http://b:1"]})
    with pytest.raises(ConfigError, match="must start with http"):
        parse_settings("m", {"model": TAG, "base_urls": ["gpu1:11434"]})
    assert parse_settings("m", {"model": TAG}).urls == ["http://127.0.0.1:11434"]
    assert parse_settings("m", {"model": TAG, "base_urls": ["http://a:1/", "http://b:1"]}).urls == [
        "http://a:1",
        "http://b:1",
    ]
