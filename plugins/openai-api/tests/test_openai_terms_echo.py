"""What an OpenAI client is told in OpenAI's terms, on a server with keys
(the scripted ``echo`` driver): a 401 speaks of the ``Authorization``
header and quotes a wrong key masked (``code: "invalid_api_key"``), two
headers naming different keys are refused, every answer of the door has
``x-request-id``, and a method the models paths do not take is OpenAI's 405."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from missive.testing import InProcessApp, in_process_app

ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789ab"
CONFIG: dict[str, Any] = {
    "server": {"api_keys": [ALICE, BOB]},
    "models": {"echo": {"driver": "echo", "context_window": 1000}},
}
OPENAI_UA = {"user-agent": "OpenAI/Python 2.8.1"}


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as made:
        yield made


def _client(app: InProcessApp, key: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=app.url + "/v1",
        api_key=key,
        max_retries=0,
        http_client=app.http_client(),
        default_headers=headers or None,
    )


def test_401_in_openai_terms(app: InProcessApp) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        _client(app, "sk-wrong").responses.create(model="echo", input="hi")
    assert caught.value.body["message"] == "Incorrect API key provided: sk-w***ng."  # type: ignore[index]
    assert caught.value.code == "invalid_api_key"
    http: httpx.Client = app.http_client()
    missing = http.post("/v1/chat/completions", json={"model": "echo", "messages": []}, headers=OPENAI_UA)
    assert missing.status_code == 401
    error = missing.json()["error"]
    assert (
        error["message"].startswith("You didn't provide an API key.") and "x-api-key" not in error["message"]
    )
    assert error["code"] == "invalid_api_key"
    # the Messages API keeps its own words
    anthropic = http.post("/v1/messages", json={}, headers={"x-api-key": "nope"})
    assert anthropic.json()["error"]["message"] == "invalid x-api-key"


def test_two_keys_in_two_headers(app: InProcessApp) -> None:
    """Bearer alice with x-api-key bob is refused (it was served as bob); the
    same key in both (Claude Code may send both) is that key."""
    conflicting = _client(app, ALICE, **{"x-api-key": BOB})
    with pytest.raises(openai.AuthenticationError) as caught:
        conflicting.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}])
    assert "different API keys" in caught.value.body["message"]  # type: ignore[index]
    same = _client(app, ALICE, **{"x-api-key": ALICE})
    assert same.responses.create(model="echo", input="hi").output_text == "hi"


def test_x_request_id(app: InProcessApp) -> None:
    client = _client(app, ALICE)
    done = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}])
    assert done._request_id is not None and done._request_id.startswith("req_")  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve("resp_nope")
    assert caught.value.request_id is not None and caught.value.request_id.startswith("req_")
    raw = client.responses.with_raw_response.create(model="echo", input="hi")
    assert raw.headers["x-request-id"] == raw.headers["request-id"]
    http: httpx.Client = app.http_client(headers={"authorization": f"Bearer {ALICE}"})
    assert "x-request-id" in http.get("/v1/models").headers
    assert "x-request-id" in http.get("/v1/nowhere").headers  # an unrouted path the door claims
    assert "x-request-id" not in http.post("/v1/messages", json={}, headers={"x-api-key": ALICE}).headers


@pytest.mark.parametrize(("method", "path"), [("DELETE", "/v1/models/echo"), ("POST", "/v1/models")])
def test_models_methods_in_openai_envelope(app: InProcessApp, method: str, path: str) -> None:
    http: httpx.Client = app.http_client(headers={"authorization": f"Bearer {ALICE}", **OPENAI_UA})
    refused = http.request(method, path)
    assert refused.status_code == 405 and refused.headers["allow"] == "GET"
    body = refused.json()
    assert body["error"]["type"] == "invalid_request_error" and "type" not in body  # not Anthropic's
    assert "x-request-id" in refused.headers
    # an Anthropic client keeps the core's envelope
    anthropic = http.request(
        method, path, headers={"user-agent": "x", "x-api-key": ALICE, "authorization": ""}
    )
    assert anthropic.status_code == 405 and anthropic.json()["type"] == "error"
