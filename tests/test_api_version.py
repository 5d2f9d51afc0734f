"""The ``anthropic-version`` header (:mod:`missive.protocol.api_version`):
the API's 400 ``anthropic-version: "X" is not a valid version`` for a value
that is no version of the API (Anthropic docs, "Versions": 2023-01-01,
2023-06-01, 2026-10-21), while every real version, a missing header and a
later date (a newer SDK than this server) are answered."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import InProcessApp, in_process_app

USER = [{"role": "user", "content": "hi"}]


def _calls(client: anthropic.Anthropic, version: Any) -> list[Any]:
    """A message and a token count with this header value (``anthropic.Omit()``: none)."""
    headers = {"anthropic-version": version}
    return [
        lambda: client.messages.with_raw_response.create(
            model="echo", max_tokens=5, messages=USER, extra_headers=headers
        ),
        lambda: client.messages.with_raw_response.count_tokens(
            model="echo", messages=USER, extra_headers=headers
        ),
    ]


@pytest.mark.parametrize("version", ["banana", "2023-06-01, 2023-06-01", "2024-10-22", "2023-02-30"])
def test_a_value_that_is_no_version_is_the_api_400(
    echo_in_process: anthropic.Anthropic, version: str
) -> None:
    for call in _calls(echo_in_process, version):
        with pytest.raises(anthropic.BadRequestError) as info:
            call()
        error = info.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(f'anthropic-version: "{version}" is not a valid version'), error
        assert "2023-06-01, 2026-10-21" in error["message"]  # what to send instead


@pytest.mark.parametrize("version", ["2023-06-01", "2023-01-01", "2026-10-21", anthropic.Omit(), ""])
def test_real_versions_and_no_header_are_answered(  # an empty value is no header
    echo_in_process: anthropic.Anthropic, version: Any
) -> None:
    for call in _calls(echo_in_process, version):
        raw = call()
        assert raw.http_response.status_code == 200
        assert "anthropic-version" not in raw.headers.get("missive-ignored", "")


def test_a_repeated_header_is_read_as_the_api_reads_it(echo_app: InProcessApp) -> None:
    """Two ``anthropic-version`` headers are one value, ``"a, b"``, refused
    (decolua/9router#1227: a proxy that added its own)."""
    resp = echo_app.http_client(httpx).post(
        "/v1/messages",
        json={"model": "echo", "max_tokens": 5, "messages": USER},
        headers=httpx.Headers([("anthropic-version", "2023-06-01"), ("anthropic-version", "2023-06-01")]),
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"].startswith(
        'anthropic-version: "2023-06-01, 2023-06-01" is not a valid version'
    )


def test_a_later_version_is_answered_and_reported(
    echo_in_process: anthropic.Anthropic, echo_config: dict
) -> None:
    """A date after the newest version known here may be a version this
    server predates: answered, reported in ``missive-ignored``; strict mode
    refuses it as any ignored part."""
    for call in _calls(echo_in_process, "2027-03-01"):
        raw = call()
        assert raw.http_response.status_code == 200
        assert raw.headers["missive-ignored"] == (
            "anthropic-version (version 2027-03-01 is newer than this server knows: answered alike)"
        )
    with in_process_app({**echo_config, "server": {"strict": True}}) as app:
        http = app.http_client(httpx)
        body = {"model": "echo", "max_tokens": 5, "messages": USER}
        resp = http.post("/v1/messages", json=body, headers={"anthropic-version": "2027-03-01"})
        assert resp.status_code == 400
        assert resp.json()["error"]["message"].startswith(
            "strict mode: this server does not support: anthropic-version (version 2027-03-01"
        )
        assert http.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}).is_success
        batch = {"requests": [{"custom_id": "a", "params": body}]}
        resp = http.post("/v1/messages/batches", json=batch, headers={"anthropic-version": "banana"})
        assert resp.status_code == 400 and "is not a valid version" in resp.json()["error"]["message"]
