"""Message Batches through the official SDK (``client.messages.batches``)
on the echo driver: create, retrieve, list with the API's pagination,
results as JSON Lines, cancel, delete, the create body's validation and
limits, expiry and archiving.

The module's server is the app in process (no socket; its batches database
its own), and so is expiry's (on the test's state folder). ``missive
batches`` runs against a live server of its own, and "one server per
database" needs a second process on the state directory of an app in
process. Waits are for events (the batch ending) under
generous deadlines; no check depends on the machine's speed.
Scheduling below interactive traffic, the slot cap and restarts are in
tests/test_batches_scheduling.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import InProcessApp, in_process_app, serve_process
from missive_echo import script

DEADLINE = 60.0  # seconds; only reached when a test fails

CONFIG: dict[str, Any] = {
    "server": {"max_body_bytes": 4096},
    "batches": {"max_requests": 50, "max_body_bytes": 400_000},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000, "aliases": ["claude-*"]},
        "echo-small": {"driver": "echo", "context_window": 12},
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(server: InProcessApp) -> anthropic.Anthropic:
    return server.sdk(timeout=DEADLINE)


def live_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=DEADLINE)


def request(custom_id: str, text: str, model: str = "echo", **params: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "params": {
            "model": model,
            "max_tokens": 50,
            "messages": [{"role": "user", "content": text}],
            **params,
        },
    }


def wait_ended(client: anthropic.Anthropic, batch_id: str, timeout: float = DEADLINE) -> Any:
    """The batch once its ``processing_status`` is ``ended``."""
    deadline = time.monotonic() + timeout
    while True:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.processing_status}: {batch.request_counts}"
        time.sleep(0.05)


def results(client: anthropic.Anthropic, batch_id: str) -> dict[str, Any]:
    """``custom_id`` -> result, checking each custom_id comes once."""
    out: dict[str, Any] = {}
    for line in client.messages.batches.results(batch_id):
        assert line.custom_id not in out, line.custom_id
        out[line.custom_id] = line.result
    return out


GOOD = {
    "plain": request("plain", "one two three"),
    "alias": request("alias", "through an alias", model="claude-whatever"),
    "capped": request("capped", "a b c d e f g", max_tokens=3),
    "scripted": request("scripted", script({"text": "Hel"}, {"text": "lo"}, stop_reason="end_turn")),
    "system": request("system", "hi", system="be brief", temperature=0),
}
BAD = {
    "no-messages": {"custom_id": "no-messages", "params": {"model": "echo", "max_tokens": 5, "messages": []}},
    "unknown-model": request("unknown-model", "x", model="no-such-model"),
    "streamed": request("streamed", "x", stream=True),
    "too-long": request(
        "too-long", "one two three four five six seven eight nine ten eleven twelve", model="echo-small"
    ),
    "scripted-error": request(
        "scripted-error", script({"text": "a"}, {"error": {"type": "api_error", "message": "boom"}})
    ),
    "bad-temperature": request("bad-temperature", "x", temperature=7),
}


def alone(client: anthropic.Anthropic, item: dict[str, Any]) -> Any:
    """What the same request gives on its own: the Message, or the error's body."""
    params = dict(item["params"])
    required = {key: params.pop(key) for key in ("model", "max_tokens", "messages")}
    try:
        return client.messages.create(**required, extra_body=params)
    except anthropic.APIStatusError as exc:
        return exc


def test_mixed_batch_results_equal_the_requests_alone(client: anthropic.Anthropic) -> None:
    items = [*GOOD.values(), *BAD.values()]
    created = client.messages.batches.create(requests=items)
    assert created.id.startswith("msgbatch_") and created.type == "message_batch"
    assert created.processing_status in ("in_progress", "ended")
    counts = created.request_counts
    assert sum(counts.model_dump().values()) == len(items)
    assert created.expires_at > created.created_at
    assert created.cancel_initiated_at is None and created.archived_at is None

    ended = wait_ended(client, created.id)
    assert ended.request_counts.succeeded == len(GOOD)
    assert ended.request_counts.errored == len(BAD)
    assert (
        ended.request_counts.processing == ended.request_counts.canceled == ended.request_counts.expired == 0
    )
    assert ended.ended_at is not None and ended.ended_at >= ended.created_at
    assert ended.results_url.endswith(f"/v1/messages/batches/{created.id}/results")

    got = results(client, created.id)
    assert set(got) == set(GOOD) | set(BAD)
    for custom_id, item in GOOD.items():
        result, single = got[custom_id], alone(client, item)
        assert result.type == "succeeded", (custom_id, result)
        message = result.message
        assert message.id.startswith("msg_") and message.id != single.id
        assert message.model == item["params"]["model"]  # the requested string, as for a message
        assert message.model_dump(exclude={"id"}) == single.model_dump(exclude={"id"}), custom_id
    for custom_id, item in BAD.items():
        result, single = got[custom_id], alone(client, item)
        assert result.type == "errored", (custom_id, result)
        error = result.error
        assert error.type == "error"
        if custom_id == "streamed":
            assert error.error.type == "invalid_request_error" and error.error.message.startswith("stream:")
            continue
        assert isinstance(single, anthropic.APIStatusError), custom_id
        assert error.error.type == single.body["error"]["type"], custom_id
        assert error.error.message == single.body["error"]["message"], custom_id


def test_results_are_json_lines_in_request_order(client: anthropic.Anthropic, server: InProcessApp) -> None:
    items = [request(f"r{i}", f"line {i}") for i in range(12)]
    batch = wait_ended(client, client.messages.batches.create(requests=items).id)
    http = server.http_client(timeout=DEADLINE)
    raw = http.get(batch.results_url, headers={"x-api-key": "unused"})
    assert raw.status_code == 200
    lines = raw.text.splitlines()
    assert raw.text.endswith("\n") and len(lines) == len(items)
    parsed = [json.loads(line) for line in lines]
    assert [p["custom_id"] for p in parsed] == [f"r{i}" for i in range(12)]
    assert all(set(p) == {"custom_id", "result"} for p in parsed)
    assert parsed[3]["result"]["message"]["content"] == [{"type": "text", "text": "line 3"}]
    # Under the doubled prefix too (base URLs ending in /v1).
    again = http.get(f"/v1/v1/messages/batches/{batch.id}/results")
    assert again.text == raw.text


def test_list_pages_newest_first(client: anthropic.Anthropic) -> None:
    ids = [client.messages.batches.create(requests=[request("only", f"batch {i}")]).id for i in range(5)]
    newest_first = list(reversed(ids))
    page = client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2]
    assert page.has_more is True and page.first_id == newest_first[0] and page.last_id == newest_first[1]
    # The SDK follows after_id (last_id) page by page.
    listed = [b.id for b in client.messages.batches.list(limit=2)]
    assert listed[:5] == newest_first
    # before_id: the page of newer ones, still newest first.
    before = client.messages.batches.list(before_id=newest_first[3], limit=2)
    assert [b.id for b in before.data] == newest_first[1:3]
    assert before.has_more is True
    top = client.messages.batches.list(before_id=newest_first[1], limit=5)
    assert [b.id for b in top.data] == newest_first[:1] and top.has_more is False
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.list(limit=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.list(limit=1001)


def test_unknown_batch_is_404(client: anthropic.Anthropic) -> None:
    missing = "msgbatch_nothinghere000000000000"
    for call in (
        client.messages.batches.retrieve,
        client.messages.batches.cancel,
        client.messages.batches.delete,
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            call(missing)
        assert caught.value.body["error"]["type"] == "not_found_error"


def test_delete_only_once_ended(client: anthropic.Anthropic) -> None:
    slow = client.messages.batches.create(requests=[request("slow", script({"sleep": 30}, {"text": "late"}))])
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.batches.delete(slow.id)
    assert "cancel it" in caught.value.body["error"]["message"]
    client.messages.batches.cancel(slow.id)
    wait_ended(client, slow.id)
    deleted = client.messages.batches.delete(slow.id)
    assert deleted.id == slow.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(slow.id)
    assert slow.id not in [b.id for b in client.messages.batches.list(limit=1000).data]


def test_results_before_the_end_are_refused(client: anthropic.Anthropic, server: InProcessApp) -> None:
    slow = client.messages.batches.create(requests=[request("slow", script({"sleep": 30}, {"text": "late"}))])
    answer = server.http_client(timeout=DEADLINE).get(f"/v1/messages/batches/{slow.id}/results")
    assert answer.status_code == 400 and "processing_status is ended" in answer.json()["error"]["message"]
    with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
        client.messages.batches.results(slow.id)  # the SDK checks results_url itself
    client.messages.batches.cancel(slow.id)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([], "requests: List should have at least 1 item"),
        (
            [request("bad id!", "x")],
            "requests.0.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        ),
        ([request("x" * 65, "x")], "requests.0.custom_id: String should match pattern"),
        ([request("same", "a"), request("same", "b")], "requests.1.custom_id: Duplicate custom_id 'same'"),
        ([{"custom_id": "no-params"}], "requests.0.params: Field required"),
        ([request(f"n{i}", "x") for i in range(51)], "requests: List should have at most 50 items"),
    ],
)
def test_create_body_rules_fail_the_whole_batch(
    client: anthropic.Anthropic, requests: list[dict[str, Any]], message: str
) -> None:
    before = client.messages.batches.list(limit=1000).data
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.batches.create(requests=requests)
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith(message), caught.value.body
    assert client.messages.batches.list(limit=1000).data == before  # nothing stored


def test_batch_body_limit_is_its_own(client: anthropic.Anthropic) -> None:
    # server.max_body_bytes (4 KiB) limits messages, batches.max_body_bytes (400 kB) batches.
    big = [request(f"big{i}", "abcdefghijklmn " * 400) for i in range(10)]  # 6 kB each, 400 tokens
    batch = client.messages.batches.create(requests=big)
    assert wait_ended(client, batch.id).request_counts.succeeded == 10
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(**big[0]["params"])
    assert caught.value.status_code == 413
    huge = [request(f"huge{i}", "word " * 10_000) for i in range(9)]  # ~450 kB
    with pytest.raises(anthropic.APIStatusError) as too_big:
        client.messages.batches.create(requests=huge)
    assert too_big.value.status_code == 413
    assert "400000 bytes" in too_big.value.body["error"]["message"]


def test_cancel_a_queued_batch(client: anthropic.Anthropic) -> None:
    # The echo model runs one batch request at a time (max_slots 0.5 of no
    # limit: 1), so this one's second and third requests are queued.
    items = [
        request("first", script({"sleep": 30}, {"text": "late"})),
        request("second", "b"),
        request("third", "c"),
    ]
    batch = client.messages.batches.create(requests=items)
    deadline = time.monotonic() + DEADLINE
    canceled = client.messages.batches.cancel(batch.id)
    assert canceled.cancel_initiated_at is not None
    assert canceled.processing_status in ("canceling", "ended")
    ended = wait_ended(client, batch.id)
    assert time.monotonic() < deadline  # the running request did not sleep on
    assert ended.request_counts.canceled == 3 and ended.request_counts.processing == 0
    assert {r.type for r in results(client, batch.id).values()} == {"canceled"}
    # Canceling again changes nothing.
    assert client.messages.batches.cancel(batch.id).model_dump() == ended.model_dump()


def test_status_and_metrics(client: anthropic.Anthropic, server: InProcessApp) -> None:
    batch = wait_ended(
        client, client.messages.batches.create(requests=[request("m1", "x"), BAD["no-messages"]]).id
    )
    assert batch.request_counts.succeeded == 1
    metrics = server.http_client(timeout=DEADLINE).get("/metrics").text
    assert 'missive:batch_requests_total{model_name="echo",result="succeeded"}' in metrics
    assert 'missive:batches{processing_status="ended"}' in metrics
    assert 'missive:batch_requests_running{model_name="echo"} 0.0' in metrics
    # Batch requests are not HTTP requests: not in missive:requests_total.
    assert 'endpoint="/v1/messages/batches",error_type="",model_name="",status="200"' in metrics  # the create
    assert "BATCH" not in metrics


def test_expiry_and_archiving(tmp_path: Path) -> None:
    config = {
        "batches": {"expiry": 2.0, "retention": 4.0},
        "models": {"echo": {"driver": "echo", "context_window": 1000}},
    }
    with in_process_app(config, state_dir=tmp_path) as app:
        client = app.sdk(timeout=DEADLINE)
        items = [
            request("quick", "done"),
            request("slow", script({"sleep": 60}, {"text": "late"})),
            request("queued", "never"),
        ]
        batch = client.messages.batches.create(requests=items)
        assert (batch.expires_at - batch.created_at).total_seconds() == pytest.approx(2.0, abs=0.01)
        ended = wait_ended(client, batch.id, timeout=30)
        assert ended.request_counts.succeeded == 1 and ended.request_counts.expired == 2
        got = results(client, batch.id)
        assert got["quick"].type == "succeeded"
        assert got["slow"].type == got["queued"].type == "expired"
        # Archived once the retention has passed: no results any more.
        deadline = time.monotonic() + 30
        while client.messages.batches.retrieve(batch.id).archived_at is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        archived = client.messages.batches.retrieve(batch.id)
        assert archived.results_url is None and archived.processing_status == "ended"
        answer = app.http_client(timeout=DEADLINE).get(f"/v1/messages/batches/{batch.id}/results")
        assert answer.status_code == 404


def missive_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    return subprocess.run(
        [sys.executable, "-m", "missive", *args], capture_output=True, text=True, env=env, timeout=DEADLINE
    )


def test_missive_batches_cli(tmp_path: Path) -> None:
    """``missive batches`` against a running server (a live one of its own)."""
    with serve_process(CONFIG, env={"MISSIVE_STATE_DIR": str(tmp_path)}) as server:
        check_batches_cli(live_client(server.url), server.url)


def check_batches_cli(client: anthropic.Anthropic, url: str) -> None:
    older = [client.messages.batches.create(requests=[request("old", "x")]).id for _ in range(2)]
    batch = wait_ended(
        client,
        client.messages.batches.create(requests=[request("cli-good", "from the cli"), BAD["no-messages"]]).id,
    )
    listed = missive_cli("batches", "list", "--url", url, "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    header, first, *rest = listed.stdout.splitlines()
    assert header.split() == [
        "ID",
        "STATUS",
        "CREATED",
        "PROCESSING",
        "SUCCEEDED",
        "ERRORED",
        "CANCELED",
        "EXPIRED",
    ]
    assert first.split()[0] == batch.id and first.split()[1] == "ended"
    assert first.split()[-5:] == ["0", "1", "1", "0", "0"]
    assert [line.split()[0] for line in rest] == older[::-1]  # --limit 3
    as_json = json.loads(missive_cli("batches", "list", "--url", url, "--json", "--limit", "1").stdout)
    assert len(as_json) == 1 and as_json[0]["id"] == batch.id and as_json[0]["type"] == "message_batch"
    shown = missive_cli("batches", "show", batch.id, "--url", url)
    assert shown.returncode == 0 and f"id: {batch.id}" in shown.stdout
    assert "processing_status: ended" in shown.stdout and "requests.succeeded: 1" in shown.stdout
    out = missive_cli("batches", "results", batch.id, "--url", url)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(x["custom_id"], x["result"]["type"]) for x in lines] == [
        ("cli-good", "succeeded"),
        ("no-messages", "errored"),
    ]
    missing = missive_cli("batches", "show", "msgbatch_nothinghere000000000000", "--url", url)
    assert missing.returncode == 1 and "404" in missing.stderr and "not found" in missing.stderr


def test_disabled_and_fresh(tmp_path: Path) -> None:
    config = {"models": {"echo": {"driver": "echo", "context_window": 1000}}}
    with in_process_app(config, state_dir=tmp_path) as app:
        client = app.sdk(timeout=DEADLINE)
        # Reading creates no database; the first batch does.
        assert client.messages.batches.list().data == []
        with pytest.raises(anthropic.NotFoundError):
            client.messages.batches.retrieve("msgbatch_nothinghere000000000000")
        assert not (tmp_path / "batches.sqlite3").exists()
        client.messages.batches.create(requests=[request("one", "x")])
        assert (tmp_path / "batches.sqlite3").exists()
        # One server per database: a second one (a process) on the same state directory says so.
        with serve_process(config, env={"MISSIVE_STATE_DIR": str(tmp_path)}) as other:
            second = live_client(other.url)
            with pytest.raises(anthropic.InternalServerError) as caught:
                second.messages.batches.list()
            assert "in use by another Missive server" in caught.value.body["error"]["message"]
    off = {**config, "batches": {"enabled": False}}
    with in_process_app(off, state_dir=tmp_path) as app:
        client = app.sdk(timeout=DEADLINE)
        for call in (
            client.messages.batches.list,
            lambda: client.messages.batches.create(requests=[request("a", "b")]),
        ):
            with pytest.raises(anthropic.NotFoundError) as caught:
                call()
            assert "batches.enabled = false" in caught.value.body["error"]["message"]
