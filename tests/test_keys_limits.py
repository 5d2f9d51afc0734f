"""Limits per key (issue 32, core/missive/keys/limits.py) through the app
and the official SDK: each limit (requests, input and output tokens per
minute and per day, concurrent requests) answers 429 ``rate_limit_error``
with ``retry-after`` and the API's ``anthropic-ratelimit-*`` headers once
reached; admitted answers carry the headers too, streams included; and with
two workers the limits are the server's, not each worker's.

The tests run on the app in process (``server``, no socket), but for the
two workers' test, which needs a live server of two processes. The
concurrent test holds its running stream open on the app's event loop as
an ASGI server does (:func:`held_stream`: its first event read, then the
``http.disconnect`` a server gives the app when the client closes the
connection).

The echo model's tokens are words: an 8-word prompt is 8 input tokens and
its echo 8 output tokens. Refills make values drift with time only upward
(toward the limit), so the checks below are exact where a bucket was full
or where its refill over the test's life is under one token (per-day
limits), and bounds elsewhere; none depends on the machine's speed.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import InProcessApp, in_process_app, serve_process, until
from missive_echo import script
from missive_openai.testing import FakeChatServer

EIGHT = "one two three four five six seven eight"
PREFIX = "anthropic-ratelimit-"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


LIMITS: dict[str, dict[str, int]] = {
    "rpm": {"requests_per_minute": 2},
    "itpm": {"input_tokens_per_minute": 5},
    "otpm": {"output_tokens_per_minute": 5},
    "itpd": {"input_tokens_per_day": 5},
    "otpd": {"output_tokens_per_day": 5},
    "conc": {"concurrent_requests": 1},
    "all": {
        "requests_per_minute": 10,
        "input_tokens_per_minute": 1000,
        "output_tokens_per_minute": 1000,
        "input_tokens_per_day": 50,
        "output_tokens_per_day": 60,
    },
    "free": {},
}
CONFIG: dict[str, Any] = {
    "keys": {name: {"key_sha256": sha256(f"sk-{name}"), **limits} for name, limits in LIMITS.items()},
    "models": {"echo": {"driver": "echo", "context_window": 1000}},
}


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    """The app of ``CONFIG`` in process."""
    with in_process_app(CONFIG) as app:
        yield app


def client(server: InProcessApp, name: str) -> anthropic.Anthropic:
    return server.sdk(api_key=f"sk-{name}", max_retries=0, timeout=60)


def send(api: anthropic.Anthropic, text: str = EIGHT) -> dict[str, str]:
    """One admitted message; its rate-limit headers."""
    raw = api.messages.with_raw_response.create(
        model="echo", max_tokens=50, messages=[{"role": "user", "content": text}]
    )
    raw.parse()
    return {k: v for k, v in raw.headers.items() if k.startswith(PREFIX)}


def refused(api: anthropic.Anthropic) -> tuple[str, int, dict[str, str]]:
    """One message refused with 429: its message, ``retry-after``, rate-limit headers."""
    with pytest.raises(anthropic.RateLimitError) as info:
        api.messages.create(model="echo", max_tokens=50, messages=[{"role": "user", "content": EIGHT}])
    response = info.value.response
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert body["request_id"] == response.headers["request-id"]
    retry = int(response.headers["retry-after"])
    assert 1 <= retry <= 60
    return (
        body["error"]["message"],
        retry,
        {k: v for k, v in response.headers.items() if k.startswith(PREFIX)},
    )


def reset_in(headers: dict[str, str], name: str) -> float:
    """Seconds from now to the ``-reset`` time of ``name`` (RFC 3339)."""
    at = datetime.strptime(headers[f"{PREFIX}{name}-reset"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc
    )
    return at.timestamp() - time.time()


def test_requests_per_minute(server: InProcessApp) -> None:
    api = client(server, "rpm")
    first, second = send(api), send(api)
    assert (first[f"{PREFIX}requests-limit"], first[f"{PREFIX}requests-remaining"]) == ("2", "1")
    assert second[f"{PREFIX}requests-remaining"] in ("0", "1")
    message, retry, headers = refused(api)
    assert "2 requests per minute" in message and "keys.rpm.requests_per_minute" in message
    assert retry <= 30  # one request refills in 60 / 2 s
    assert headers[f"{PREFIX}requests-remaining"] == "0" and headers[f"{PREFIX}requests-limit"] == "2"
    assert 0 < reset_in(headers, "requests") <= 61
    assert not any("tokens" in name for name in headers)  # only the limits the key has


@pytest.mark.parametrize(
    ("name", "kind", "retry_most", "reset_least"),
    [
        ("itpm", "input", 48, 0),
        ("otpm", "output", 48, 0),
        ("itpd", "input", 60, 86400),
        ("otpd", "output", 60, 86400),
    ],
)
def test_token_limits(
    server: InProcessApp, name: str, kind: str, retry_most: int, reset_least: float
) -> None:
    """A key with 5 tokens a minute (or a day) is admitted while its bucket
    holds a token; the 8-token answer overdraws it, so the next request is
    refused until 4 tokens (-3 to +1) have refilled: 48 s at 5 a minute, a
    day's 13.8 hours clamped to the SDKs' 60 s at 5 a day, while ``-reset``
    says when the bucket is full (8 tokens away)."""
    api = client(server, name)
    headers = send(api)
    assert (headers[f"{PREFIX}{kind}-tokens-limit"], headers[f"{PREFIX}{kind}-tokens-remaining"]) == (
        "5",
        "5",
    )
    assert headers[f"{PREFIX}tokens-limit"] == "5"  # the one token limit in effect
    message, retry, headers = refused(api)
    assert f"5 {kind} tokens per {'minute' if name.endswith('m') else 'day'}" in message
    assert retry <= retry_most and (retry == 60) == (reset_least > 0)
    assert headers[f"{PREFIX}{kind}-tokens-remaining"] == "0" and headers[f"{PREFIX}tokens-remaining"] == "0"
    full_in = reset_in(headers, f"{kind}-tokens")
    assert reset_least < full_in <= (8 / 5) * (86400 if reset_least else 60) + 1
    assert headers[f"{PREFIX}tokens-reset"] == headers[f"{PREFIX}{kind}-tokens-reset"]
    other = "output" if kind == "input" else "input"
    assert f"{PREFIX}{other}-tokens-limit" not in headers and f"{PREFIX}requests-limit" not in headers


def test_cached_input_tokens_do_not_count(server: InProcessApp) -> None:
    """Input tokens read from the cache do not count toward an input limit
    (the API's rule): a prompt of 8 tokens, 6 of them cache reads, takes 2."""
    api = client(server, "all")  # 50 input tokens a day: its most restrictive input limit
    before = send(api, "a b")  # 2 tokens
    text = script({"text": "ok"}, cache_read_input_tokens=6, padding="w " * 8)
    message = api.messages.create(model="echo", max_tokens=50, messages=[{"role": "user", "content": text}])
    assert message.usage.cache_read_input_tokens == 6 and message.usage.input_tokens > 0
    after = send(api, "a b")
    spent = int(before[f"{PREFIX}input-tokens-remaining"]) - int(after[f"{PREFIX}input-tokens-remaining"])
    assert spent == 2 + message.usage.input_tokens  # "a b", then the scripted prompt's uncached part


def test_every_header_on_a_key_with_every_limit(server: InProcessApp) -> None:
    """Admitted answers, streamed or not, carry the requests, tokens, input
    and output headers; the tokens ones are the most restrictive limit in
    effect (the per-day input limit here), each per-kind one the more
    restrictive of its minute and day limits."""
    api = client(server, "all")
    first = send(api)
    with api.messages.with_streaming_response.create(
        model="echo",
        max_tokens=50,
        stream=True,
        messages=[{"role": "user", "content": EIGHT}],
    ) as stream:
        streamed = {k: v for k, v in stream.headers.items() if k.startswith(PREFIX)}
        stream.read()
    for headers in (first, streamed):
        assert {name.rsplit("-", 1)[0] for name in headers} == {
            f"{PREFIX}requests",
            f"{PREFIX}tokens",
            f"{PREFIX}input-tokens",
            f"{PREFIX}output-tokens",
        }
    assert first[f"{PREFIX}requests-limit"] == "10"
    assert int(streamed[f"{PREFIX}requests-remaining"]) < int(first[f"{PREFIX}requests-remaining"])
    # The day limits are the restrictive ones (50 and 60 against 1000 a minute).
    assert (
        streamed[f"{PREFIX}input-tokens-limit"] == "50" and streamed[f"{PREFIX}output-tokens-limit"] == "60"
    )
    used_in = int(first[f"{PREFIX}input-tokens-remaining"]) - int(streamed[f"{PREFIX}input-tokens-remaining"])
    used_out = int(first[f"{PREFIX}output-tokens-remaining"]) - int(
        streamed[f"{PREFIX}output-tokens-remaining"]
    )
    assert (used_in, used_out) == (8, 8)  # the first answer's usage, counted when it ended
    assert streamed[f"{PREFIX}tokens-limit"] == "50"
    assert streamed[f"{PREFIX}tokens-remaining"] == streamed[f"{PREFIX}input-tokens-remaining"]
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        assert reset_in(streamed, kind) > 0


def test_a_key_without_limits_gets_no_headers(server: InProcessApp) -> None:
    assert send(client(server, "free")) == {}


def test_concurrent_requests(server: InProcessApp) -> None:
    """With one request running, a second of the key is refused (retry-after
    1); once the first ends (its client left), the key is admitted again."""
    api = client(server, "conc")
    long = script({"text": "a"}, {"sleep": 120}, {"text": "b"})
    body = {
        "model": "echo",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": long}],
    }
    with server.hold("/v1/messages", body, {"x-api-key": "sk-conc"}) as held:
        assert held.status() == 200
        first = held.wait_for(b"\n\n")
        assert first.decode().splitlines()[0] == "event: message_start"  # it is running
        message, retry, headers = refused(api)
        assert retry == 1 and "1 requests running" in message and "concurrent_requests" in message
        assert headers == {}  # no rate-limit header describes concurrency
    until(lambda: _admitted(api), "the key admitted once its request ended")


def _admitted(api: anthropic.Anthropic) -> bool:
    try:
        api.messages.create(model="echo", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    except anthropic.RateLimitError:
        return False
    return True


def test_the_sdk_retries_a_429_after_retry_after(server: InProcessApp) -> None:
    """The SDK's own retry (max_retries) of a 429 honours retry-after: with a
    concurrent limit, its retry a second later succeeds once the running
    request has ended (here it already has: the retry is admitted)."""
    api = server.sdk(api_key="sk-conc", max_retries=2, timeout=60)
    assert api.messages.create(
        model="echo", max_tokens=5, messages=[{"role": "user", "content": "y"}]
    ).content


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreads connections on Linux")
def test_two_workers_share_the_limits() -> None:
    """With two workers, a key's 4 requests a minute are the server's: on
    one connection to each worker, alternating, the first 4 requests are
    admitted and the rest refused on both workers (separate counts would
    admit 4 on each)."""
    with FakeChatServer(vllm=False) as fake:
        config = {
            "server": {"workers": 2},
            "keys": {
                "ops": {"key_sha256": sha256("sk-ops"), "scope": "admin"},
                "four": {"key_sha256": sha256("sk-four"), "requests_per_minute": 4},
            },
            "models": {
                "gen": {
                    "driver": "openai",
                    "context_window": 2048,
                    "settings": {"base_url": fake.url, "model": "fake-model"},
                }
            },
        }
        with serve_process(config) as server:
            by_worker: dict[int, httpx.Client] = {}
            deadline = time.monotonic() + 60
            while len(by_worker) < 2:
                assert time.monotonic() < deadline, "no connection reached the second worker"
                http = httpx.Client(base_url=server.url, timeout=30)
                pid = http.get("/v1/status", headers={"x-api-key": "sk-ops"}).json()["worker"]["pid"]
                if pid in by_worker:
                    http.close()
                else:
                    by_worker[pid] = http
            body = {"model": "gen", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
            statuses: dict[int, list[int]] = {pid: [] for pid in by_worker}
            for _ in range(4):
                for pid, http in by_worker.items():
                    statuses[pid].append(
                        http.post("/v1/messages", json=body, headers={"x-api-key": "sk-four"}).status_code
                    )
            for http in by_worker.values():
                http.close()
            assert [s for pid in by_worker for s in statuses[pid]].count(200) == 4, statuses
            assert all(seen[:2] == [200, 200] and seen[2:] == [429, 429] for seen in statuses.values()), (
                statuses
            )
