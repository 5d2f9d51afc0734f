"""Usage per key (issue 32, core/missive/keys/usage.py and metrics.py)
through a live server on the echo driver: ``GET /v1/usage`` (admin keys)
and the ``missive:key_*`` counters equal the sums of the ``usage`` the
answers reported, per key and model, batch requests counted for their
batch's key; ``missive usage`` prints the same; usage survives a restart
(it is kept in the state directory) and ``usage.enabled = false`` turns it
off.

The restarted server, the one with usage off and the one that counted
nothing are the app in process on a state folder of the test's (no
socket: what they check is the state directory and the answers).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from missive.cli.main import cli
from missive.config.keys import derived_name
from missive.testing import InProcessApp, ServerProcess, in_process_app, serve_process
from missive_echo import script

ALICE, BOB, ADMIN = "sk-usage-alice", "sk-usage-bob", "sk-usage-admin"
FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
DEADLINE = 60.0


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CONFIG: dict[str, Any] = {
    "server": {"api_keys": [ALICE]},
    "keys": {"bob": {"key_sha256": sha256(BOB)}, "ops": {"key_sha256": sha256(ADMIN), "scope": "admin"}},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000, "aliases": ["claude-*"]},
        "echo-b": {"driver": "echo", "context_window": 1000},
    },
}
Sums = dict[tuple[str, str], Counter[str]]


def client(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=DEADLINE)


def add(sums: Sums, key: str, model: str, usage: Any) -> None:
    counts = sums.setdefault((key, model), Counter())
    counts["requests"] += 1
    for name in FIELDS:
        counts[name] += getattr(usage, name) or 0


def http_of(server: str | InProcessApp) -> Any:
    """An HTTP client of a live server's URL or of an app in process."""
    if isinstance(server, InProcessApp):
        return server.http_client(timeout=30)
    return httpx.Client(base_url=server, timeout=30)


def usage_report(server: str | InProcessApp, **params: str) -> dict[str, Any]:
    with http_of(server) as http:
        answer = http.get("/v1/usage", params=params, headers={"x-api-key": ADMIN})
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()
    return report


def totals(report: dict[str, Any]) -> Sums:
    return {
        (r["key_name"], r["model"]): Counter({k: v for k, v in r.items() if k not in ("key_name", "model")})
        for r in report["totals"]
    }


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{url}/metrics", headers={"x-api-key": ADMIN}, timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def traffic(state: Path) -> Iterator[tuple[ServerProcess, Sums]]:
    """A server and the usage its answers reported, per (key name, model)."""
    alice_name = derived_name(ALICE)
    sums: Sums = {}
    with serve_process(CONFIG, env={"MISSIVE_STATE_DIR": str(state)}) as server:
        alice, bob = client(server.url, ALICE), client(server.url, BOB)
        for text in ("one", "one two three", "a b c d e f g"):
            add(
                sums,
                alice_name,
                "echo",
                alice.messages.create(
                    model="echo", max_tokens=50, messages=[{"role": "user", "content": text}]
                ).usage,
            )
        cached = script({"text": "hi"}, {"text": " there"}, cache_read_input_tokens=3)
        add(
            sums,
            alice_name,
            "echo",
            alice.messages.create(
                model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": cached}]
            ).usage,
        )
        with alice.messages.stream(
            model="echo-b", max_tokens=50, messages=[{"role": "user", "content": "streamed words here"}]
        ) as stream:
            add(sums, alice_name, "echo-b", stream.get_final_message().usage)
        for text in ("x y", "p q r s"):
            add(
                sums,
                "bob",
                "echo-b",
                bob.messages.create(
                    model="echo-b", max_tokens=50, messages=[{"role": "user", "content": text}]
                ).usage,
            )
        # Not counted: count_tokens, a bad body, an unknown model, a bad key.
        alice.messages.count_tokens(model="echo", messages=[{"role": "user", "content": "uncounted"}])
        with pytest.raises(anthropic.BadRequestError):
            alice.messages.create(model="echo", max_tokens=-1, messages=[{"role": "user", "content": "no"}])
        with pytest.raises(anthropic.NotFoundError):
            alice.messages.create(model="absent", max_tokens=5, messages=[{"role": "user", "content": "no"}])
        with pytest.raises(anthropic.AuthenticationError):
            client(server.url, "sk-wrong").messages.create(
                model="echo", max_tokens=5, messages=[{"role": "user", "content": "no"}]
            )
        # A batch's requests are its key's.
        batch = bob.messages.batches.create(
            requests=[
                {
                    "custom_id": f"r{i}",
                    "params": {
                        "model": "echo",
                        "max_tokens": 50,
                        "messages": [{"role": "user", "content": "batch " * (i + 1)}],
                    },
                }
                for i in range(2)
            ]
        )
        deadline = time.monotonic() + DEADLINE
        while bob.messages.batches.retrieve(batch.id).processing_status != "ended":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for line in bob.messages.batches.results(batch.id):
            assert line.result.type == "succeeded"
            add(sums, "bob", "echo", line.result.message.usage)
        yield server, sums


def test_usage_equals_the_sum_of_the_answers_usage(traffic: tuple[ServerProcess, Sums]) -> None:
    server, sums = traffic
    report = usage_report(server.url)
    assert totals(report) == sums
    assert report["bucket_width"] == "1d" and len(report["data"]) in (7, 8)  # 7 days, aligned to UTC days
    by_bucket: Sums = {}
    for bucket in report["data"]:
        for row in bucket["results"]:
            kept = by_bucket.setdefault((row["key_name"], row["model"]), Counter())
            kept.update({k: v for k, v in row.items() if k not in ("key_name", "model")})
    assert by_bucket == sums
    hourly = usage_report(server.url, bucket_width="1h")
    assert len(hourly["data"]) in (24, 25) and totals(hourly) == sums
    only_bob = usage_report(server.url, key_name="bob", model="echo-b")
    assert totals(only_bob) == {("bob", "echo-b"): sums[("bob", "echo-b")]}


def test_key_metrics_equal_the_sums(traffic: tuple[ServerProcess, Sums]) -> None:
    """``missive:key_*_tokens_total`` per key and model are the same sums;
    ``missive:key_requests_total`` counts each key's requests by status."""
    server, sums = traffic
    samples = scrape(server.url)
    for (key, model), counts in sums.items():
        labels = frozenset({("key_name", key), ("model_name", model)})
        for name in FIELDS:
            assert samples.get((f"missive:key_{name}_total", labels), 0.0) == counts[name], (key, model, name)
    alice = derived_name(ALICE)
    for (key, model), counts in sums.items():
        # Every API request of the key: Alice's count_tokens too (200, model echo).
        extra = 1 if (key, model) == (alice, "echo") else 0
        labels = frozenset({("key_name", key), ("model_name", model), ("status", "200")})
        assert samples[("missive:key_requests_total", labels)] == counts["requests"] + extra, (key, model)
    assert (
        samples[
            (
                "missive:key_requests_total",
                frozenset({("key_name", alice), ("model_name", ""), ("status", "400")}),
            )
        ]
        == 1
    )
    assert not any(
        dict(labels).get("key_name") == "sk-wrong" or ALICE in str(labels) for _, labels in samples
    )


def test_missive_usage_prints_the_same(traffic: tuple[ServerProcess, Sums]) -> None:
    server, sums = traffic
    shown = CliRunner().invoke(cli, ["usage", "--url", server.url, "--api-key", ADMIN, "--json"])
    assert shown.exit_code == 0, shown.output
    assert totals(json.loads(shown.output)) == sums
    table = CliRunner().invoke(cli, ["usage", "--url", server.url, "--api-key", ADMIN, "--since", "2d"])
    assert table.exit_code == 0, table.output
    rows = {tuple(line.split()[:3]) for line in table.output.splitlines()[2:]}
    assert rows == {(key, model, str(counts["requests"])) for (key, model), counts in sums.items()}
    denied = CliRunner().invoke(cli, ["usage", "--url", server.url, "--api-key", BOB])
    assert denied.exit_code == 1 and "answered 403" in denied.output and "admin key" in denied.output


def test_bad_usage_queries_are_400(traffic: tuple[ServerProcess, Sums]) -> None:
    server, _ = traffic
    for params, words in (
        ({"bucket_width": "1m"}, "bucket_width"),
        ({"starting_at": "yesterday"}, "starting_at"),
        ({"starting_at": "2026-01-02T00:00:00Z", "ending_at": "2026-01-01"}, "after"),
        ({"starting_at": "2020-01-01", "bucket_width": "1h"}, "1000 buckets"),
    ):
        answer = httpx.get(f"{server.url}/v1/usage", params=params, headers={"x-api-key": ADMIN}, timeout=10)
        assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
        assert words in answer.json()["error"]["message"], answer.text


def test_usage_survives_a_restart(traffic: tuple[ServerProcess, Sums], state: Path) -> None:
    """Written to the state directory when the server stops: a new server
    on it reports the same usage."""
    server, sums = traffic
    server.process.terminate()
    server.process.wait(timeout=30)
    with in_process_app(CONFIG, state_dir=state) as again:
        assert totals(usage_report(again)) == sums


def test_usage_can_be_turned_off(tmp_path: Path) -> None:
    config = {**CONFIG, "usage": {"enabled": False}}
    with in_process_app(config, state_dir=tmp_path) as app:
        app.sdk(api_key=ALICE).messages.create(
            model="echo", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
        answer = app.http_client().get("/v1/usage", headers={"x-api-key": ADMIN})
        assert answer.status_code == 404 and "usage.enabled" in answer.json()["error"]["message"]
    assert not (tmp_path / "usage.sqlite3").exists()


def test_a_server_that_counted_nothing_writes_nothing(tmp_path: Path) -> None:
    """No request, no usage database (only probes and a listing were answered)."""
    with in_process_app(CONFIG, state_dir=tmp_path) as app:
        assert app.http_client().get("/v1/models", headers={"x-api-key": ALICE}).status_code == 200
    assert not list(tmp_path.glob("usage.sqlite3*"))
