"""Message Batches below interactive traffic, through the SDK on the echo
driver: the cap on the slots batches take, preemption of a batch request
when an interactive one has to wait, no batch request starting while an
interactive one waits, cancel mid-way, and stopping (or killing) ``missive
serve`` mid-way and starting it again on the same state directory.

Batch requests are scripted to sleep (``{"sleep": s}``), so a test can see
them running (``missive:batch_requests_running``) and tell an interactive
request served at once from one that waited behind them. Every wait is for
an event under a generous deadline.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import ServerProcess, in_process_app, serve_process, until
from missive_echo import script

DEADLINE = 60.0  # seconds; only reached when a test fails
ONE_SLOT = {"capabilities": {"max_concurrency": 1}}

CONFIG: dict[str, Any] = {
    "batches": {"max_slots": 2},  # a count: 2 slots of the unbounded "open", 1 of the one-slot ones
    "models": {
        "open": {"driver": "echo", "context_window": 1000},
        # queue_depth 0: an interactive request may wait only for a slot a batch holds
        "one": {"driver": "echo", "context_window": 1000, "queue_depth": 0, "settings": ONE_SLOT},
        "busy": {"driver": "echo", "context_window": 1000, "settings": ONE_SLOT},
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("state")
    with serve_process(CONFIG, env={"MISSIVE_STATE_DIR": str(state)}) as proc:
        yield proc


def make_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=DEADLINE)


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> anthropic.Anthropic:
    return make_client(server.url)


def request(custom_id: str, model: str, *steps: dict[str, Any]) -> dict[str, Any]:
    text = script(*steps) if steps else custom_id
    return {
        "custom_id": custom_id,
        "params": {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": text}]},
    }


def gauge(server: Any, name: str, model: str) -> float:
    return gauges(server, model, name)[name]


def gauges(server: Any, model: str, *names: str) -> dict[str, float]:
    """Several of ``model``'s metrics from one scrape (consistent together):
    ``server`` a live server's URL, or an app in process's HTTP client."""
    metrics = (
        httpx.get(f"{server}/metrics", timeout=DEADLINE)
        if isinstance(server, str)
        else server.get("/metrics")
    )
    text = metrics.text
    out = {}
    for name in names:
        found = re.search(rf'^missive:{name}\{{model_name="{re.escape(model)}"\}} (\S+)$', text, re.MULTILINE)
        out[name] = float(found.group(1)) if found else 0.0
    return out


def wait_for(condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    until(condition, what, timeout, 0.05)


def wait_ended(client: anthropic.Anthropic, batch_id: str, timeout: float = DEADLINE) -> Any:
    wait_for(
        lambda: client.messages.batches.retrieve(batch_id).processing_status == "ended",
        "batch ended",
        timeout,
    )
    return client.messages.batches.retrieve(batch_id)


def results(client: anthropic.Anthropic, batch_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in client.messages.batches.results(batch_id):
        assert line.custom_id not in out, line.custom_id
        out[line.custom_id] = line.result
    return out


def test_batches_take_at_most_max_slots(client: anthropic.Anthropic, server: ServerProcess) -> None:
    items = [request(f"r{i}", "open", {"sleep": 0.6}, {"text": f"done {i}"}) for i in range(6)]
    batch = client.messages.batches.create(requests=items)
    seen: list[float] = []
    while client.messages.batches.retrieve(batch.id).processing_status != "ended":
        seen.append(gauge(server.url, "batch_requests_running", "open"))
        time.sleep(0.05)
    assert max(seen) == 2, seen  # the cap, reached and never passed
    got = results(client, batch.id)
    assert [got[f"r{i}"].message.content[0].text for i in range(6)] == [f"done {i}" for i in range(6)]


def test_interactive_request_preempts_a_batch_request(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    before = gauge(server.url, "batch_preemptions_total", "one")
    # Each batch request holds the one slot for 8 s.
    items = [request(f"b{i}", "one", {"text": "a"}, {"sleep": 8}, {"text": "b"}) for i in range(2)]
    batch = client.messages.batches.create(requests=items)
    wait_for(lambda: gauge(server.url, "batch_requests_running", "one") == 1, "a batch request running")
    started = time.monotonic()
    answer = client.messages.create(
        model="one", max_tokens=20, messages=[{"role": "user", "content": "me first"}]
    )
    waited = time.monotonic() - started
    assert answer.content[0].text == "me first"
    assert waited < 6, f"the interactive request waited {waited:.1f} s behind a batch request (8 s)"
    assert gauge(server.url, "batch_preemptions_total", "one") == before + 1
    # The preempted request runs again from the start: nothing is lost or doubled.
    ended = wait_ended(client, batch.id)
    assert ended.request_counts.succeeded == 2
    assert {r.message.content[0].text for r in results(client, batch.id).values()} == {"ab"}


def test_no_batch_request_starts_while_an_interactive_one_waits(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    holder = make_client(server.url)
    done: list[str] = []

    def interactive(text: str, sleep: float) -> None:
        message = holder.messages.create(
            model="busy",
            max_tokens=20,
            messages=[{"role": "user", "content": script({"sleep": sleep}, {"text": text})}],
        )
        done.append(message.content[0].text)

    first = threading.Thread(target=interactive, args=("first", 1.5))
    first.start()
    wait_for(
        lambda: gauge(server.url, "num_requests_running", "busy") == 1, "the interactive request running"
    )
    second = threading.Thread(target=interactive, args=("second", 1.5))
    second.start()
    wait_for(lambda: gauge(server.url, "num_requests_waiting", "busy") == 1, "the second one waiting")
    batch = client.messages.batches.create(requests=[request("later", "busy", {"text": "batch"})])
    # Neither while the first runs with the second waiting, nor ahead of the
    # second: no scrape shows a batch request running beside an interactive
    # one running or waiting (the server may start the batch request once the
    # second has ended, before this thread has seen its answer).
    seen = 0
    while second.is_alive():
        now = gauges(
            server.url, "busy", "num_requests_running", "num_requests_waiting", "batch_requests_running"
        )
        interactive = (
            now["num_requests_running"] - now["batch_requests_running"] + now["num_requests_waiting"]
        )
        if interactive >= 1:
            seen += 1
            assert now["batch_requests_running"] == 0, now
        time.sleep(0.05)
    assert seen > 0
    first.join()
    assert done == ["first", "second"]
    assert wait_ended(client, batch.id).request_counts.succeeded == 1


def test_cancel_mid_way(client: anthropic.Anthropic, server: ServerProcess) -> None:
    items = [
        request("quick", "busy", {"text": "fast"}),
        request("slow", "busy", {"sleep": 30}, {"text": "late"}),
        request("queued", "busy", {"text": "never"}),
    ]
    batch = client.messages.batches.create(requests=items)
    wait_for(
        lambda: client.messages.batches.retrieve(batch.id).request_counts.succeeded == 1, "the first done"
    )
    wait_for(lambda: gauge(server.url, "batch_requests_running", "busy") == 1, "the slow one running")
    started = time.monotonic()
    canceled = client.messages.batches.cancel(batch.id)
    assert canceled.cancel_initiated_at is not None
    ended = wait_ended(client, batch.id)
    assert time.monotonic() - started < 20  # the running request was stopped, not waited for
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (1, 2)
    got = results(client, batch.id)
    assert got["quick"].type == "succeeded" and got["slow"].type == got["queued"].type == "canceled"
    assert gauge(server.url, "batch_requests_running", "busy") == 0


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_restart_mid_way_loses_nothing(tmp_path: Path, stop: str) -> None:
    config = {"batches": {"max_slots": 1}, "models": {"echo": {"driver": "echo", "context_window": 1000}}}
    env = {"MISSIVE_STATE_DIR": str(tmp_path)}
    items = [request(f"r{i}", "echo", {"sleep": 1.0}, {"text": f"answer {i}"}) for i in range(4)]
    with serve_process(config, env=env) as first:
        client = make_client(first.url)
        batch = client.messages.batches.create(requests=items)
        wait_for(lambda: client.messages.batches.retrieve(batch.id).request_counts.succeeded >= 1, "one done")
        wait_for(lambda: gauge(first.url, "batch_requests_running", "echo") == 1, "the next one running")
        if stop == "sigkill":
            first.process.kill()  # no shutdown at all: a crash
        else:
            first.process.terminate()
        first.process.wait(timeout=DEADLINE)
        assert first.process.returncode == (0 if stop == "sigterm" else -9), first.log()
    # The restart: the app in process on the same state directory (the stop is the process's).
    with in_process_app(config, state_dir=tmp_path) as second:
        client = second.sdk(timeout=DEADLINE)
        before = client.messages.batches.retrieve(batch.id)
        assert before.processing_status == "in_progress"
        assert 1 <= before.request_counts.succeeded < 4 and before.request_counts.errored == 0
        ended = wait_ended(client, batch.id)
        assert ended.request_counts.succeeded == 4 and ended.request_counts.processing == 0
        got = results(client, batch.id)
        assert sorted(got) == [f"r{i}" for i in range(4)]
        assert all(got[f"r{i}"].message.content[0].text == f"answer {i}" for i in range(4))
        assert [b.id for b in client.messages.batches.list()] == [batch.id]


def test_a_lazy_model_loads_for_its_batch_and_stays_while_it_runs(tmp_path: Path) -> None:
    config = {
        "models": {"later": {"driver": "echo", "context_window": 1000, "lazy": True, "idle_unload": 0.5}}
    }
    # The app in process on the test's state folder: the batch and the gauges need no socket.
    with in_process_app(config, state_dir=tmp_path) as app:
        client = app.sdk(timeout=DEADLINE)
        metrics = app.http_client(timeout=DEADLINE)
        assert gauge(metrics, "model_loaded", "later") == 0
        items = [request(f"r{i}", "later", {"sleep": 1.0}, {"text": f"done {i}"}) for i in range(3)]
        batch = client.messages.batches.create(requests=items)
        seen = []
        while client.messages.batches.retrieve(batch.id).processing_status != "ended":
            seen.append(gauge(metrics, "model_loaded", "later"))
            time.sleep(0.1)
        # Loaded on demand for the batch, never unloaded under it (idle_unload 0.5 s < each request).
        assert seen and 1.0 in seen and seen[seen.index(1.0) :].count(0.0) == 0, seen
        got = results(client, batch.id)
        assert [got[f"r{i}"].message.content[0].text for i in range(3)] == ["done 0", "done 1", "done 2"]
        assert gauge(metrics, "model_loads_total", "later") == 1
        # Idle again: unloaded as configured.
        wait_for(lambda: gauge(metrics, "model_loaded", "later") == 0, "unloaded when idle")
