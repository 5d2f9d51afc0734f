"""``GET /metrics`` (core/missive/metrics.py) through the app in process (no
socket) on the echo driver: counters move by exactly what the answers
reported, errors are counted by status and type, histograms get one
observation per message, the load gauges follow held and queued requests
(streams held open at the ASGI level, their clients hanging up with
``http.disconnect``), the endpoint needs a key unless
``server.metrics_public``, and the shipped Grafana dashboard uses only names
the server exposes."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from media_files import b64, image_bytes
from prometheus_client.parser import text_string_to_metric_families

from missive.testing import HeldRequest, InProcessApp, in_process_app, until
from missive_echo import script

KEY = "sk-metrics-test-key"  # an admin key: /metrics needs one
USER_KEY = "sk-metrics-user-key"
ONE_SLOT = {"capabilities": {"max_concurrency": 1}}
CONFIG: dict[str, Any] = {
    "server": {"api_keys": [USER_KEY], "ping_interval": 0.3},
    "keys": {"ops": {"key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "scope": "admin"}},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000},
        "small": {"driver": "echo", "context_window": 12},
        "vision": {
            "driver": "echo",
            "context_window": 100_000,
            "settings": {"capabilities": {"input_media": ["image/png"]}},
        },
        "single": {"driver": "echo", "context_window": 1000, "queue_depth": 4, "settings": ONE_SLOT},
    },
}
DASHBOARD = Path(__file__).parent.parent / "docs" / "grafana-dashboard.json"
DEADLINE = 30.0  # seconds; only reached when a test fails

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(server: InProcessApp) -> Iterator[anthropic.Anthropic]:
    with server.sdk(api_key=KEY, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def http(server: InProcessApp) -> Iterator[httpx.Client]:
    """An httpx client of the app (no key of its own)."""
    with server.http_client(httpx, timeout=10) as c:
        yield c


def scrape(server: InProcessApp, key: str | None = KEY) -> Samples:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    with server.http_client(httpx, timeout=10) as http:
        response = http.get("/metrics", headers={"x-api-key": key} if key else {})
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist yet."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def ask(text: str, model: str = "echo", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": text}], **extra}


def test_metrics_need_a_key(http: httpx.Client) -> None:
    """With API keys configured, /metrics answers 401 in the API's envelope
    without one, 403 to a user key, and the exposition with an admin key
    (x-api-key or Bearer)."""
    refused = http.get("/metrics")
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    user = http.get("/metrics", headers={"x-api-key": USER_KEY})
    assert user.status_code == 403 and user.json()["error"]["type"] == "permission_error"
    bearer = http.get("/metrics", headers={"authorization": f"Bearer {KEY}"})
    assert bearer.status_code == 200
    assert bearer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE missive:requests_total counter" in bearer.text


def test_metrics_public_needs_no_key() -> None:
    """``server.metrics_public = true`` serves /metrics without a key while
    the API itself still requires one."""
    config = {**CONFIG, "server": {**CONFIG["server"], "metrics_public": True}}
    with in_process_app(config) as app:
        http = app.http_client(httpx, timeout=10)
        assert http.get("/metrics").status_code == 200
        assert http.get("/v1/models").status_code == 401


def test_token_counters_move_by_the_reported_usage(server: InProcessApp, client: anthropic.Anthropic) -> None:
    """Prompt, cached and output token counters grow by exactly the usage the
    client received, over a plain answer (with a cache hit), a stream cut
    by max_tokens, and count_tokens (which counts no tokens); successes are
    counted by stop reason and requests by status."""
    before = scrape(server)
    plain = client.messages.create(
        **ask(script({"text": "one two three", "tokens": 3}, cache_read_input_tokens=4))
    )
    with client.messages.stream(**ask("a b c d e f g h", max_tokens=3)) as stream:
        streamed = stream.get_final_message()
    counted = client.messages.count_tokens(model="echo", messages=[{"role": "user", "content": "x y z"}])
    after = scrape(server)

    assert plain.usage.cache_read_input_tokens == 4 and streamed.stop_reason == "max_tokens"
    usages = [plain.usage, streamed.usage]
    prompt = sum(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens for u in usages)
    assert delta(before, after, "missive:prompt_tokens_total", model_name="echo") == prompt
    assert delta(before, after, "missive:prompt_tokens_cached_total", model_name="echo") == 4
    assert delta(before, after, "missive:generation_tokens_total", model_name="echo") == 3 + 3
    assert (
        delta(before, after, "missive:request_success_total", model_name="echo", finished_reason="end_turn")
        == 1
    )
    assert (
        delta(before, after, "missive:request_success_total", model_name="echo", finished_reason="max_tokens")
        == 1
    )
    ok = {"model_name": "echo", "status": "200", "error_type": ""}
    assert delta(before, after, "missive:requests_total", endpoint="/v1/messages", **ok) == 2
    assert delta(before, after, "missive:requests_total", endpoint="/v1/messages/count_tokens", **ok) == 1
    assert counted.input_tokens == 3


def test_errors_are_counted_by_status_and_type(
    server: InProcessApp, client: anthropic.Anthropic, http: httpx.Client
) -> None:
    """A 400 invalid_request_error (prompt too long, for a known model), a 404
    not_found_error (unknown model: model_name is empty, never the client's
    string), and an error event in a stream (status 200 with the error's
    type, no success counted)."""
    before = scrape(server)
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        client.messages.create(**ask("word " * 40, model="small"))
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(**ask("hello", model="no-such-model"))
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(
            **ask(script({"text": "a"}, {"error": {"type": "overloaded_error"}}))
        ) as s:
            s.get_final_message()
    assert http.get("/v1/messages", headers={"x-api-key": "t"}).status_code == 405
    assert http.get("/v1/nowhere", headers={"x-api-key": "t"}).status_code == 404
    after = scrape(server)

    messages = {"endpoint": "/v1/messages"}
    assert (
        delta(
            before,
            after,
            "missive:requests_total",
            model_name="small",
            status="400",
            error_type="invalid_request_error",
            **messages,
        )
        == 1
    )
    assert (
        delta(
            before,
            after,
            "missive:requests_total",
            model_name="",
            status="404",
            error_type="not_found_error",
            **messages,
        )
        == 1
    )
    assert (
        delta(
            before,
            after,
            "missive:requests_total",
            model_name="echo",
            status="200",
            error_type="overloaded_error",
            **messages,
        )
        == 1
    )
    assert (
        delta(
            before,
            after,
            "missive:requests_total",
            model_name="",
            status="405",
            error_type="invalid_request_error",
            **messages,
        )
        == 1
    )  # its route, a wrong method
    assert (
        delta(
            before,
            after,
            "missive:requests_total",
            model_name="",
            status="404",
            error_type="not_found_error",
            endpoint="other",
        )
        == 1
    )  # no route: not the path itself
    assert not any("no-such-model" in str(labels) or "nowhere" in str(labels) for _, labels in after)
    success = sum(v for (name, _), v in after.items() if name == "missive:request_success_total")
    assert success == sum(v for (name, _), v in before.items() if name == "missive:request_success_total")


def test_histograms_observe_each_message(server: InProcessApp, client: anthropic.Anthropic) -> None:
    """One observation per message in the time-to-first-token, end-to-end,
    queue, decode and per-token histograms; a scripted 0.3 s silence before
    the first token shows in time to first token and end-to-end latency,
    and a 0.3 s pause between tokens in the decode time."""
    before = scrape(server)
    client.messages.create(**ask(script({"sleep": 0.3}, {"text": "a "}, {"sleep": 0.3}, {"text": "b"})))
    after = scrape(server)

    for name in (
        "time_to_first_token_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_decode_time_seconds",
        "time_per_output_token_seconds",
    ):
        assert delta(before, after, f"missive:{name}_count", model_name="echo") == 1, name
    assert delta(before, after, "missive:time_to_first_token_seconds_sum", model_name="echo") >= 0.3
    assert delta(before, after, "missive:e2e_request_latency_seconds_sum", model_name="echo") >= 0.6
    assert delta(before, after, "missive:request_decode_time_seconds_sum", model_name="echo") >= 0.3
    assert (
        delta(before, after, "missive:time_to_first_token_seconds_bucket", model_name="echo", le="0.25") == 0
    )


def test_media_blocks_are_counted_by_kind(server: InProcessApp, client: anthropic.Anthropic) -> None:
    """An image block and a text document processed for one message add 1 to
    each kind."""
    before = scrape(server)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": b64(image_bytes())},
    }
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}
    client.messages.create(
        model="vision",
        max_tokens=5,
        messages=[
            {"role": "user", "content": [image, document, {"type": "text", "text": "describe"}]},
        ],
    )
    after = scrape(server)
    assert delta(before, after, "missive:media_processed_total", kind="image") == 1
    assert delta(before, after, "missive:media_processed_total", kind="document") == 1


def held(server: InProcessApp, model: str, steps: list[dict[str, Any]]) -> HeldRequest:
    """A streaming ``POST /v1/messages`` held open as a client's connection
    (``InProcessApp.hold``): ``close()`` is the client hanging up."""
    body = {
        "model": model,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": script(*steps)}],
    }
    return server.hold("/v1/messages", body, {"x-api-key": KEY})


def test_load_gauges_follow_running_and_waiting_requests(server: InProcessApp) -> None:
    """A held slot shows as 1 running, a request behind it as 1 waiting; once
    both clients hang up the gauges fall back to 0, the waiter's queue time
    is observed, and the request cut mid-stream is counted with
    error_type client_disconnected."""
    before = scrape(server)
    holder = held(server, "single", [{"text": "holding"}, {"sleep": 120}])
    assert holder.status() == 200
    waiter = held(server, "single", [{"text": "served"}, {"sleep": 120}])
    try:
        until(
            lambda: value(scrape(server), "missive:num_requests_waiting", model_name="single") == 1,
            "1 waiting",
        )
        now = scrape(server)
        assert value(now, "missive:num_requests_running", model_name="single") == 1
        holder.close()
        assert waiter.status() == 200  # admitted once the holder left
    finally:
        holder.close()
        waiter.close()
    until(lambda: value(scrape(server), "missive:num_requests_running", model_name="single") == 0, "idle")
    until(
        lambda: (
            delta(
                before,
                scrape(server),
                "missive:requests_total",
                model_name="single",
                endpoint="/v1/messages",
                status="200",
                error_type="client_disconnected",
            )
            == 2
        ),
        "both cut streams counted",
    )
    after = scrape(server)
    assert value(after, "missive:num_requests_waiting", model_name="single") == 0
    assert delta(before, after, "missive:request_queue_time_seconds_count", model_name="single") == 2
    assert delta(before, after, "missive:request_queue_time_seconds_sum", model_name="single") > 0


def _dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    return {name for expr in exprs for name in re.findall(r"missive:[a-zA-Z0-9_:]+", expr)}


def test_dashboard_uses_only_exposed_metric_names(http: httpx.Client) -> None:
    """Every ``missive:`` series the Grafana dashboard queries is exposed by
    /metrics (histograms as ``_bucket``, ``_sum``, ``_count``), and the
    dashboard charts every metric family the server has."""
    text = http.get("/metrics", headers={"x-api-key": KEY}).text
    exposed: set[str] = set()
    families: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\w+)$", text, re.MULTILINE):
        families.add(name)
        exposed |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    used = _dashboard_metric_names()
    assert used and used <= exposed, sorted(used - exposed)
    charted = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert families <= charted, sorted(families - charted)
