"""``server.capture_dir``: every request written as JSON, credentials redacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from missive.testing import in_process_app


def _captures(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def test_capture_writes_requests_with_credentials_redacted(tmp_path: Path) -> None:
    capture = tmp_path / "captures"
    config = {
        "server": {"capture_dir": str(capture)},
        "models": {"echo": {"driver": "echo", "context_window": 100}},
    }
    body = {
        "model": "echo",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hello there"}],
        "service_tier": "auto",
    }
    with in_process_app(config) as app:
        with app.http_client(httpx, timeout=30) as http:
            ok = http.post(
                "/v1/messages?beta=true",
                json=body,
                headers={
                    "x-api-key": "sk-secret-1",
                    "authorization": "Bearer sk-secret-2",
                    "anthropic-beta": "b1",
                },
            )
            listing = http.get("/v1/models")
            missing = http.post("/v1/nothing", content=b"not json")
    assert ok.status_code == 200 and listing.status_code == 200 and missing.status_code == 404
    records = [r for r in _captures(capture) if r["path"] != "/health"]  # a server's start-up polls
    assert [(r["method"], r["path"], r["status"]) for r in records] == [
        ("POST", "/v1/messages", 200),
        ("GET", "/v1/models", 200),
        ("POST", "/v1/nothing", 404),
    ]
    first = records[0]
    assert first["query"] == "beta=true"
    assert first["body"] == body
    assert first["request_id"] == ok.headers["request-id"]
    assert first["headers"]["x-api-key"] == "[redacted]"
    assert first["headers"]["authorization"] == "[redacted]"
    assert first["headers"]["anthropic-beta"] == "b1"
    assert "service_tier" in first["ignored"] and "anthropic-beta=b1" in first["ignored"]
    raw = "".join(p.read_text() for p in capture.glob("*.json"))
    assert "sk-secret" not in raw
    assert records[1]["body"] is None
    assert records[2]["body"] is None  # never read by a route: not captured


def test_unwritable_capture_dir_does_not_fail_requests(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = {
        "server": {"capture_dir": str(blocker / "sub")},
        "models": {"echo": {"driver": "echo", "context_window": 100}},
    }
    with in_process_app(config) as app:
        resp = app.http_client(httpx).post(
            "/v1/messages",
            json={"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
    assert resp.status_code == 200
    assert resp.json()["content"][0]["text"] == "hi"
