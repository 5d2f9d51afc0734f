"""Fallbacks across a fleet (:mod:`missive.routing.fallbacks`): a model's
configured chain answers when it cannot take a request (its queue full: 529)
before the answer starts, counted in ``/metrics`` and named in the log line;
never once an answer has begun. Through the SDK against echo models, on
the app in process (no socket)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.config import ConfigError
from missive.protocol.schema.management import FallbackEntry
from missive.protocol.schema.request import MessagesRequest
from missive.routing.fallbacks import with_model_chain
from missive.routing.rules import RoutingConfig, RoutingRules
from missive.testing import HeldRequest, InProcessApp, in_process_app, until

ONE_SLOT = {"capabilities": {"max_concurrency": 1}}
CONFIG: dict[str, Any] = {
    "server": {"queue_depth": 0},
    "routing": {"default_fallbacks": True},
    "models": {
        "main": {"driver": "echo", "aliases": ["claude-*"], "settings": ONE_SLOT, "fallbacks": ["spare"]},
        "spare": {"driver": "echo"},
        "alone": {"driver": "echo", "settings": ONE_SLOT},
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture
def client(server: InProcessApp) -> Iterator[anthropic.Anthropic]:
    """An SDK client of the fallback app, closed after each test."""
    with server.sdk(api_key="test") as sdk:
        yield sdk


def script(*steps: dict[str, Any]) -> str:
    return json.dumps({"script": list(steps)})


def metric(server: InProcessApp, name: str, **labels: str) -> float:
    with server.http_client(httpx, timeout=30) as http:
        text = http.get("/metrics").text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # the exposition sorts them
    match = re.search(rf"^missive:{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def hold(server: InProcessApp, model: str) -> HeldRequest:
    """A streaming request holding ``model``'s one slot until closed (held
    open as a client's connection: ``InProcessApp.hold``)."""
    body = {
        "model": model,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": script({"text": "held"}, {"sleep": 60})}],
    }
    held = server.hold("/v1/messages", body)
    held.wait_for(b"held")
    return held


@pytest.mark.parametrize("stream", [False, True])
def test_a_full_queue_falls_back_to_the_next_model(
    server: InProcessApp, client: anthropic.Anthropic, stream: bool
) -> None:
    before = metric(
        server, "fallbacks_total", model_name="main", fallback="spare", error_type="overloaded_error"
    )
    spare_before = metric(
        server, "requests_total", model_name="spare", endpoint="/v1/messages", status="200", error_type=""
    )
    holder = hold(server, "main")
    try:
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "answered anyway"}],
        }
        if stream:
            with client.messages.stream(**body) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**body)
    finally:
        holder.close()
    assert message.content[0].type == "text" and message.content[0].text == "answered anyway"
    assert message.model == "spare"  # the API's signal of a fallback (usage.iterations too)
    # The request is counted as its record finishes, just after the answer's last byte.
    until(
        lambda: (
            metric(
                server, "fallbacks_total", model_name="main", fallback="spare", error_type="overloaded_error"
            )
            == before + 1
        ),
        "the fallback counted",
    )
    assert (
        metric(
            server, "requests_total", model_name="spare", endpoint="/v1/messages", status="200", error_type=""
        )
        == spare_before + 1
    )
    assert "fallback=main->spare" in server.log()


def test_a_model_without_a_chain_answers_529(server: InProcessApp, client: anthropic.Anthropic) -> None:
    holder = hold(server, "alone")
    try:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(model="alone", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    finally:
        holder.close()
    assert caught.value.status_code == 529


def test_no_fallback_once_the_answer_has_begun(server: InProcessApp, client: anthropic.Anthropic) -> None:
    """The model fails mid-stream with an overloaded error: the client keeps
    what it got and an ``error`` event; no other model is tried."""
    before = metric(
        server, "fallbacks_total", model_name="main", fallback="spare", error_type="overloaded_error"
    )
    events = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(
            model="main",
            max_tokens=50,
            messages=[
                {
                    "role": "user",
                    "content": script(
                        {"text": "partial"}, {"error": {"type": "overloaded_error", "message": "gone"}}
                    ),
                }
            ],
        ) as s:
            for event in s:
                events.append(event)
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert any(e.type == "content_block_delta" and e.delta.text == "partial" for e in events)  # type: ignore[union-attr]
    assert (
        metric(server, "fallbacks_total", model_name="main", fallback="spare", error_type="overloaded_error")
        == before
    )


def test_the_chain_is_checked_and_only_applied_when_asked() -> None:
    with pytest.raises(ConfigError, match="models.a.fallbacks names 'b', which is not a served model"):
        RoutingRules(RoutingConfig(), ["a"], {"a": ["b"]})
    plain = MessagesRequest.model_validate(
        {"model": "a", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    )
    assert with_model_chain(plain, ["b"], True).fallbacks == "default"
    assert with_model_chain(plain, ["b"], False) is plain
    assert with_model_chain(plain, [], True) is plain  # nothing to fall back to: the request stays as sent
    own = plain.model_copy(update={"fallbacks": [FallbackEntry(model="c")]})
    assert with_model_chain(own, ["b"], True) is own  # the request's own chain wins
