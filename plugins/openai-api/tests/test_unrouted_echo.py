"""OpenAI's envelope on what no view of the door answers (``Gateway.claim``):
a method ``/v1/responses`` or ``/v1/chat/completions`` does not take (405),
a path under them no route serves (404), and an endpoint OpenAI clients try
that Missive does not serve (``/v1/completions``, ``/v1/embeddings``: 404
saying which endpoints are served); Anthropic clients keep theirs."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

BEARER = {"authorization": "Bearer k"}
ANTHROPIC = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/responses", 405),
        ("PUT", "/v1/responses/resp_1", 405),
        ("PATCH", "/v1/v1/responses/resp_1", 405),
        ("GET", "/v1/responses/resp_1/input_items/extra", 404),
        ("GET", "/v1/chat/completions/x", 404),
    ],
)
def test_door_paths(raw: httpx.Client, method: str, path: str, status: int) -> None:
    """Whoever asks: the door owns these paths."""
    for headers in (BEARER, ANTHROPIC, {}):
        error = openai_error(raw.request(method, path, headers=headers), status)
        assert path in error["message"]


def test_endpoints_not_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="echo", prompt="hi")
    body: Any = caught.value.body
    assert caught.value.status_code == 404 and caught.value.type == "invalid_request_error"
    assert body["message"].startswith("Invalid URL (POST /v1/completions): this server serves")
    assert "POST /v1/chat/completions" in body["message"] and "POST /v1/responses" in body["message"]
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="echo", input="hi")
    assert "Invalid URL (POST /v1/embeddings)" in caught.value.message


def test_openai_clients_by_user_agent(raw: httpx.Client) -> None:
    error = openai_error(raw.post("/v1/embeddings", headers={"user-agent": "OpenAI/Python 2.8.1"}), 404)
    assert "GET /v1/models" in error["message"]


def test_anthropic_clients_keep_their_envelope(raw: httpx.Client) -> None:
    for headers in (ANTHROPIC, {**BEARER, "anthropic-version": "2023-06-01"}, {**BEARER, "x-api-key": "k"}):
        response = raw.post("/v1/completions", headers=headers)
        assert response.status_code == 404 and response.json()["type"] == "error"
    response = raw.get("/v1/messages", headers=BEARER)  # the Messages API's own path
    assert response.status_code == 405 and response.json()["type"] == "error"
