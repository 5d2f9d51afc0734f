"""The web console's server side (core/missive/console/) through the app
in process on the echo driver, with httpx and the SDK: the page's files, its
JSON calls behind the keys, the recent requests (filters, detail, captured
bodies per key), the graphs' series, and that the console's own calls stay
out of the log, the metrics and the list. The page itself is tested in a
browser by tests/test_console_browser.py."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import InProcessApp, in_process_app, until
from missive_echo import script

KEY = "sk-console-Hq71"  # an admin key: the console needs one
USER_KEY = "sk-console-user-Vb20"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def capture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capture")


@pytest.fixture(scope="module")
def server(capture_dir: Path) -> Iterator[InProcessApp]:
    """The app in process: the console's calls, answers and log lines need no socket."""
    config: dict[str, Any] = {
        "server": {"capture_dir": str(capture_dir)},
        "keys": {
            "ops": {"key_sha256": sha256(KEY), "scope": "admin"},
            "bob": {"key_sha256": sha256(USER_KEY)},
        },
        "models": {
            "echo": {"driver": "echo", "context_window": 1000},
            "echo-b": {"driver": "echo", "context_window": 1000},
        },
    }
    with in_process_app(config) as app:
        yield app


def sdk(server: InProcessApp, key: str = KEY) -> anthropic.Anthropic:
    return server.sdk(api_key=key)


def get(server: InProcessApp, path: str, api_key: str | None = KEY, **params: Any) -> httpx.Response:
    headers = {"x-api-key": api_key} if api_key else {}
    with server.http_client() as http:
        response: httpx.Response = http.get(path, headers=headers, params=params)
    return response


def recent(server: InProcessApp, **params: Any) -> dict[str, Any]:
    response = get(server, "/console/api/requests", **params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_page_and_its_files_need_no_key_and_forbid_foreign_code(server: InProcessApp) -> None:
    """``/console`` redirects to ``/console/`` (links are relative to it);
    the page and its files load without a key, with a content security
    policy allowing the server's own scripts only; other paths are 404s in
    the API's envelope."""
    redirect = get(server, "/console", None)
    assert redirect.status_code == 308 and redirect.headers["location"] == "console/"
    page = get(server, "/console/", None)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    for src in re.findall(r'(?:src|href)="(static/[^"]+)"', page.text):
        assert get(server, f"/console/{src}", None).status_code == 200, src
    script_file = get(server, "/console/static/main.js", None)
    assert script_file.headers["content-type"].startswith("text/javascript")
    assert "import" in script_file.text
    for missing in ("/console/static/nothing.js", "/console/static/..%2Froutes.py", "/console/api/nothing"):
        response = get(server, missing)
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error", missing


def test_the_data_calls_need_an_admin_key(server: InProcessApp) -> None:
    """Every JSON call but ``api/config`` answers 401 in the envelope without
    a key or with a wrong one, 403 with a user key (as ``/v1/status``)."""
    assert get(server, "/console/api/config", api_key=None).json() == {"api_key_required": True}
    for path in (
        "/console/api/status",
        "/console/api/requests",
        "/console/api/series",
        "/console/api/requests/req_abc",
    ):
        for key in (None, "sk-wrong"):
            response = get(server, path, api_key=key)
            assert response.status_code == 401, path
            assert response.json()["error"]["type"] == "authentication_error"
        refused = get(server, path, api_key=USER_KEY)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error", path
        assert (
            "the web console needs an admin key; key 'bob' has the user scope"
            in refused.json()["error"]["message"]
        )


def test_status_is_the_v1_status(server: InProcessApp) -> None:
    mine = get(server, "/console/api/status").json()
    theirs = get(server, "/v1/status").json()
    assert mine["models"].keys() == theirs["models"].keys() == {"echo", "echo-b"}
    assert mine["models"]["echo"]["status"] == "ready" and mine["version"] == theirs["version"]


def test_a_request_is_listed_with_its_facts_and_ignored_fields(server: InProcessApp) -> None:
    """A streamed request shows with its model, status, usage, times, stop
    reason and the ``missive-ignored`` items, newest first."""
    with sdk(server).messages.with_streaming_response.create(
        model="echo",
        max_tokens=20,
        stream=True,
        messages=[
            {"role": "user", "content": script({"text": "a b", "tokens": 2}, cache_read_input_tokens=1)}
        ],
        extra_body={"surprise_field": True},
        extra_headers={"anthropic-beta": "future-2099"},
    ) as response:
        rid = response.headers["request-id"]
        response.read()
    entry = until(
        lambda: next((e for e in recent(server)["data"] if e["request_id"] == rid), None), "the entry"
    )
    assert entry["model"] == "echo" and entry["status"] == 200 and entry["stream"] is True
    assert entry["endpoint"] == "/v1/messages" and entry["method"] == "POST"
    assert entry["output_tokens"] == 2 and entry["cache_read_input_tokens"] == 1 and entry["input_tokens"] > 0
    assert entry["stop_reason"] == "end_turn" and "error_type" not in entry
    assert 0 <= entry["ttft_s"] <= entry["duration_s"]
    assert entry["ignored"] == ["surprise_field", "anthropic-beta=future-2099"]
    assert recent(server)["data"][0]["seq"] >= entry["seq"]


def test_filters_and_paging(server: InProcessApp) -> None:
    """By model, endpoint, status class, ``error``, error type; ``limit`` and ``before`` page."""
    client = sdk(server)
    client.messages.create(model="echo-b", max_tokens=5, messages=[{"role": "user", "content": "bee"}])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(
            model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    client.messages.count_tokens(model="echo", messages=[{"role": "user", "content": "count me"}])
    assert {e["model"] for e in recent(server, model="echo-b")["data"]} == {"echo-b"}
    assert {e["model"] for e in recent(server, model="")["data"]} == {""}  # requests naming no served model
    assert {e["endpoint"] for e in recent(server, endpoint="/v1/messages/count_tokens")["data"]} == {
        "/v1/messages/count_tokens"
    }
    errors = recent(server, status="4xx")["data"]
    assert errors and all(400 <= e["status"] < 500 for e in errors)
    failed = recent(server, status="error")["data"]
    assert failed and all(e.get("error_type") for e in failed)
    assert {e["error_type"] for e in recent(server, error_type="not_found_error")["data"]} == {
        "not_found_error"
    }
    assert recent(server, status="404")["data"] == [e for e in errors if e["status"] == 404]
    everything = recent(server)
    assert {"echo", "echo-b", ""} <= set(everything["models"]) and "not_found_error" in everything[
        "error_types"
    ]
    first, second = (
        recent(server, limit=1)["data"],
        recent(server, limit=1, before=everything["data"][0]["seq"])["data"],
    )
    assert first == everything["data"][:1] and second == everything["data"][1:2]
    for bad in ({"limit": 0}, {"limit": "many"}, {"before": "x"}):
        response = get(server, "/console/api/requests", **bad)
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_detail_shows_the_captured_body_to_an_admin_key(server: InProcessApp) -> None:
    """With capture on, a request's detail holds its captured body (keys
    redacted), which an admin key sees whichever key sent it (as every
    batch, missive.keys); the user key that sent it may not use the console.
    An id the server does not keep is a 404."""
    raw = sdk(server, USER_KEY).messages.with_raw_response.create(
        model="echo", max_tokens=5, messages=[{"role": "user", "content": "Zanzibar91 secret"}]
    )
    rid = raw.headers["request-id"]
    until(lambda: any(e["request_id"] == rid for e in recent(server)["data"]), "the entry")
    detail = get(server, f"/console/api/requests/{rid}").json()
    assert detail["request_id"] == rid and detail["status"] == 200 and detail["key"] == "bob"
    assert detail["capture"]["body"]["messages"][0]["content"] == "Zanzibar91 secret"
    headers = detail["capture"]["headers"]
    assert USER_KEY not in str(detail) and "[redacted]" in (
        headers.get("x-api-key"),
        headers.get("authorization"),
    )
    assert get(server, f"/console/api/requests/{rid}", api_key=USER_KEY).status_code == 403
    assert [e["request_id"] for e in recent(server, key="bob")["data"]][0] == rid
    assert "bob" in recent(server)["keys"]
    for unknown in ("req_000000000000000000000000", "not-an-id", "req_*"):
        response = get(server, f"/console/api/requests/{unknown}")
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_series_counts_requests_and_tokens_per_model(server: InProcessApp) -> None:
    """The graphs' points add each finished request's tokens into its
    model's bucket; all models together is the sum; the load sampler fills
    the waiting and running maxima."""

    def totals(model: str | None) -> dict[str, float]:
        params = {} if model is None else {"model": model}
        points = get(server, "/console/api/series", **params).json()["points"]
        return {k: sum(p[k] or 0 for p in points) for k in ("requests_per_s", "output_tokens_per_s")}

    before = totals("echo-b")
    sdk(server).messages.create(
        model="echo-b",
        max_tokens=10,
        messages=[{"role": "user", "content": script({"text": "x", "tokens": 4})}],
    )
    after = until(
        lambda: (t := totals("echo-b"))["requests_per_s"] > before["requests_per_s"] and t, "the count"
    )
    data = get(server, "/console/api/series").json()
    assert data["bucket_s"] == 10 and len(data["points"]) == data["window_s"] // data["bucket_s"]
    assert after["output_tokens_per_s"] * data["bucket_s"] == pytest.approx(
        before["output_tokens_per_s"] * data["bucket_s"] + 4
    )
    assert {"echo", "echo-b"} <= set(data["models"])
    everyone, each = totals(None), [totals(m) for m in data["models"]]
    assert everyone["requests_per_s"] == pytest.approx(sum(t["requests_per_s"] for t in each))
    until(
        lambda: any(
            p["running_max"] is not None for p in get(server, "/console/api/series").json()["points"]
        ),
        "a load sample",
    )


def test_console_calls_stay_out_of_the_log_metrics_and_list(server: InProcessApp) -> None:
    """Watching the server does not change what it shows: console calls log
    at debug only, count in no metric and are not among the recent requests."""
    for _ in range(3):
        get(server, "/console/api/status")
        get(server, "/console/")
    listed = recent(server)["data"]
    assert not any(e["path"].startswith("/console") for e in listed)
    get(server, "/v1/models")  # an API call, logged: the access lines are there to look in
    access = "".join(line for line in server.log().splitlines() if "missive.access" in line)
    assert " /v1/models" in access and " /console" not in access
    metrics = get(server, "/metrics").text
    assert 'endpoint="/console' not in metrics


def test_console_off_is_404() -> None:
    config = {"server": {"console": False}, "models": {"echo": {"driver": "echo"}}}
    with in_process_app(config) as app:
        for path in ("/console", "/console/", "/console/static/main.js", "/console/api/status"):
            response = app.http_client().get(path)
            assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error", path


def test_status_shows_what_each_slot_holds_on_the_default_model(default_url: str) -> None:
    """The in-process engine's status lists each slot: idle once an answer
    ended, the session whose tokens it holds (first 8 characters) and how
    many; ``missive ps`` leaves the list out of its one-line details."""
    from missive.cli.ps import render_status

    session = "5e55104a-slot-states"
    client = anthropic.Anthropic(base_url=default_url, api_key="unused", max_retries=0, timeout=600)
    client.messages.create(
        model="smollm2-135m",
        max_tokens=3,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"temperature": 0},
        extra_headers={"x-claude-code-session-id": session},
    )
    status = httpx.get(f"{default_url}/v1/status").json()
    driver_status = next(iter(status["models"].values()))["driver_status"]
    states = driver_status["slot_states"]
    assert [s["slot"] for s in states] == list(range(driver_status["slots"]))
    held = [s for s in states if s["session"] == session[:8]]
    assert len(held) == 1 and held[0]["state"] == "idle" and held[0]["tokens_cached"] > 3
    assert "slot_states" not in render_status(status)
