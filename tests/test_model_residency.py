"""Models loaded on demand, unloaded when idle, and kept within a memory
budget (:mod:`missive.models.residency`), observed from outside: ``/v1/models``,
``/readyz``, ``/v1/status``, ``/metrics``, the SSE bytes and the log. The
echo driver stands for a model (``settings.start_delay``: a load that
takes time; ``memory_mib``: what it weighs), as the app in process (its
log's messages from ``InProcessApp.log()``); the GGUF model on a live server."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from missive.models.residency import idle_expired, plan_eviction
from missive.server.services import services
from missive.testing import InProcessApp, in_process_app, serve_process, until
from missive_echo import script

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(server: Any, path: str) -> Any:
    """``path`` of ``server``: a live server's URL, or an app in process's HTTP client."""
    if isinstance(server, str):
        return httpx.get(f"{server}{path}", timeout=10)
    return server.get(path)


def scrape(server: Any) -> Samples:
    response = get(server, "/metrics")
    assert response.status_code == 200, response.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def metric(server: Any, name: str, **labels: str) -> float:
    return scrape(server).get((name, frozenset(labels.items())), 0.0)


def say(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def raw_stream(server: Any, model: str, text: str = "hello there") -> list[tuple[str, str]]:
    """The (event, data) frames of a streamed message, as sent (``server`` as for :func:`get`)."""
    body = {"model": model, "max_tokens": 50, "stream": True, "messages": say(text)}
    frames = []
    if isinstance(server, str):
        opened = httpx.stream("POST", f"{server}/v1/messages", json=body, timeout=30)
    else:
        opened = server.stream("POST", "/v1/messages", json=body)
    with opened as response:
        assert response.status_code == 200, response.read()
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                frames.append((event, line[6:]))
    return frames


def test_eviction_plan_takes_the_least_recently_used_idle_models() -> None:
    loaded = {"a": 100, "b": 100, "c": 100}
    used = {"a": 3.0, "b": 1.0, "c": 2.0}
    assert plan_eviction(100, 400, loaded, used, set()) == ([], True)
    assert plan_eviction(150, 400, loaded, used, set()) == (["b"], True)
    assert plan_eviction(250, 400, loaded, used, {"c"}) == (["b", "a"], True)
    assert plan_eviction(250, 400, loaded, used, {"a", "c"}) == (["b"], False)  # busy models in the way
    assert plan_eviction(500, 400, loaded, used, set()) == (["b", "c", "a"], False)  # larger than the budget
    assert idle_expired(10.0, {"a": 5.0, "b": 5.0, "c": None}, {"a": 4.0, "b": 6.0, "c": 0.0}, set()) == ["a"]
    assert idle_expired(10.0, {"a": 5.0}, {"a": 4.0}, {"a"}) == []


LAZY_CONFIG: dict[str, Any] = {
    "server": {"ping_interval": 0.2, "metrics_public": True},
    "models": {
        "lazy": {"driver": "echo", "context_window": 1000, "lazy": True, "settings": {"start_delay": 1.2}},
        "lazy-sdk": {
            "driver": "echo",
            "context_window": 1000,
            "lazy": True,
            "settings": {"start_delay": 0.6},
        },
        "lazy-count": {"driver": "echo", "context_window": 1000, "lazy": True},
        "idle": {"driver": "echo", "context_window": 1000, "idle_unload": 1.0},
        "broken": {
            "driver": "echo",
            "context_window": 1000,
            "lazy": True,
            "settings": {"start_error": "weights are corrupt"},
        },
    },
}


@pytest.fixture(scope="module")
def lazy_server() -> Iterator[InProcessApp]:
    """The app in process: the frames of a stream (its pings included), the
    gauges and the log's messages need no socket."""
    with in_process_app(LAZY_CONFIG) as app:
        yield app


def test_lazy_models_are_listed_ready_and_loaded_by_their_first_request(lazy_server: InProcessApp) -> None:
    http = lazy_server.http_client(timeout=30)
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["models"]["lazy"] == {"status": "ready", "loaded": False}
    client = lazy_server.sdk()
    listed = {m.id: m for m in client.models.list()}
    assert set(LAZY_CONFIG["models"]) <= set(listed) and listed["lazy"].max_input_tokens == 1000
    assert metric(http, "missive:model_loaded", model_name="lazy") == 0
    assert metric(http, "missive:model_loaded", model_name="idle") == 1  # not lazy: loaded at start-up
    assert "model lazy: loads on its first request (lazy)" in lazy_server.log()

    began = time.monotonic()
    frames = raw_stream(http, "lazy")
    waited = time.monotonic() - began
    events = [event for event, _ in frames]
    first = events.index("message_start")
    assert first >= 3 and set(events[:first]) == {"ping"}, events  # pings while it loads (1.2 s, every 0.2 s)
    assert waited >= 1.2 and events[-1] == "message_stop"
    assert '"text":"hello"' in "".join(data for _, data in frames)
    assert metric(http, "missive:model_loaded", model_name="lazy") == 1
    assert metric(http, "missive:model_loads_total", model_name="lazy") == 1
    log = lazy_server.log()
    assert "loading model lazy (driver echo)" in log
    took = re.search(r"model lazy loaded on demand in (\d+(?:\.\d+)?) s", log)
    assert took and float(took.group(1)) >= 1.2, log  # its start_delay, and more on a busy machine
    # Loaded now: the next stream starts at once.
    assert [e for e, _ in raw_stream(http, "lazy")][0] == "message_start"

    # The SDK takes pings before message_start.
    with client.messages.stream(model="lazy-sdk", max_tokens=20, messages=say("from the sdk")) as stream:
        assert stream.get_final_text() == "from the sdk"
    # Non-streaming requests and token counts wait for the load.
    assert (
        client.messages.count_tokens(model="lazy-count", messages=say("three words here")).input_tokens == 3
    )
    assert metric(http, "missive:model_loaded", model_name="lazy-count") == 1
    status = http.get("/v1/status").json()["models"]
    assert (
        status["lazy"]["loaded"] is True
        and status["lazy"]["lazy"] is True
        and status["broken"]["loaded"] is False
    )


def test_a_model_that_cannot_load_is_an_error_and_the_server_goes_on(lazy_server: InProcessApp) -> None:
    http = lazy_server.http_client(timeout=30)
    client = lazy_server.sdk()
    with pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(model="broken", max_tokens=5, messages=say("hi"))
    assert info.value.status_code == 500
    assert info.value.response.headers["x-should-retry"] == "false"  # a retry fails the same way
    assert "model 'broken' could not be loaded: model 'broken': weights are corrupt" in str(info.value)
    frames = raw_stream(http, "broken")
    assert frames[-1][0] == "error" and "weights are corrupt" in frames[-1][1]
    assert "message_start" not in [e for e, _ in frames]
    assert (
        client.messages.create(model="idle", max_tokens=5, messages=say("still here")).content[0].text
        == "still here"
    )
    # Not ready while it cannot load: its requests get a 500 not to retry.
    ready = http.get("/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
    assert ready.json()["models"]["broken"] == {"status": "failed", "loaded": False, "reason": "load_failed"}
    assert "weights are corrupt" not in ready.text  # the error is behind the keys
    assert "weights are corrupt" in http.get("/v1/status").json()["models"]["broken"]["load_error"]
    # Its cause fixed (the file put back: here the setting the next load reads), a
    # request loads it and the server is ready again.
    settings = services(lazy_server.app).models.entries["broken"].settings
    error = settings.pop("start_error")
    try:
        mended = client.messages.create(model="broken", max_tokens=5, messages=say("mended"))
        assert mended.content[0].text == "mended"
        ready = http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["models"]["broken"] == {"status": "ready"}
        assert "load_error" not in http.get("/v1/status").json()["models"]["broken"]
    finally:
        settings["start_error"] = error


def test_an_idle_model_is_unloaded_but_never_while_in_use(lazy_server: InProcessApp) -> None:
    http = lazy_server.http_client(timeout=30)
    client = lazy_server.sdk()
    # A 2.5 s answer, longer than idle_unload (1 s): the model stays loaded.
    done: list[str] = []
    worker = threading.Thread(
        target=lambda: done.append(
            client.messages.create(
                model="idle", max_tokens=20, messages=say(script({"sleep": 2.5}, {"text": "slow"}))
            )
            .content[0]
            .text
        )
    )
    worker.start()
    until(lambda: metric(http, "missive:num_requests_running", model_name="idle") == 1, "generating")
    # The baselines, read while it is in use: loaded by now (by this request
    # if it was unloaded since an earlier test used it), and not unloaded
    # while the request runs.
    unloads = metric(http, "missive:model_unloads_total", model_name="idle", reason="idle")
    loads = metric(http, "missive:model_loads_total", model_name="idle")
    time.sleep(2.0)
    assert metric(http, "missive:model_loaded", model_name="idle") == 1
    assert metric(http, "missive:model_unloads_total", model_name="idle", reason="idle") == unloads
    worker.join(10)
    assert done == ["slow"]
    # Then idle: unloaded about a second later, still listed and ready.
    until(
        lambda: metric(http, "missive:model_unloads_total", model_name="idle", reason="idle") == unloads + 1,
        "unloaded",
    )
    assert metric(http, "missive:model_loaded", model_name="idle") == 0
    idle_for = re.findall(r"unloaded model idle \(idle for (\d+(?:\.\d+)?) s", lazy_server.log())
    assert idle_for and float(idle_for[-1]) >= 1.0, lazy_server.log()
    assert http.get("/readyz").json()["models"]["idle"] == {
        "status": "ready",
        "loaded": False,
    }
    assert "idle" in {m.id for m in client.models.list()}
    # The next request loads it again.
    assert client.messages.create(model="idle", max_tokens=5, messages=say("back")).content[0].text == "back"
    assert metric(http, "missive:model_loads_total", model_name="idle") == loads + 1


BUDGET_CONFIG: dict[str, Any] = {
    "server": {"memory_budget_mib": 300, "metrics_public": True, "queue_timeout": 20},
    "models": {
        name: {"driver": "echo", "context_window": 1000, "lazy": True, "memory_mib": mib}
        for name, mib in (("a", 200), ("b", 200), ("c", 100), ("huge", 400))
    },
}


def test_the_memory_budget_unloads_the_least_recently_used(tmp_path: Any) -> None:
    # The app in process: the answers, the gauges and the log's messages need no socket.
    with in_process_app(BUDGET_CONFIG) as server:
        http = server.http_client(timeout=30)
        client = server.sdk(timeout=60)

        def ask(model: str, text: str = "hi") -> str:
            return client.messages.create(model=model, max_tokens=20, messages=say(text)).content[0].text

        def loaded() -> set[str]:
            samples = scrape(http)
            return {
                m
                for m in BUDGET_CONFIG["models"]
                if samples[("missive:model_loaded", frozenset({("model_name", m)}))]
            }

        ask("a")
        ask("c")
        assert loaded() == {"a", "c"}  # 300 MiB: fits
        ask("b")  # 200 more: a, the least recently used, makes room
        assert loaded() == {"b", "c"}
        assert metric(http, "missive:model_unloads_total", model_name="a", reason="memory") == 1
        assert "unloaded model a (to make room for b in server.memory_budget_mib)" in server.log()
        status = http.get("/v1/status").json()["models"]
        assert status["b"]["memory_bytes"] == 200 * 2**20 and status["a"]["loaded"] is False

        # Both loaded models busy: a waits until one of them is idle.
        slow = script({"sleep": 2.0}, {"text": "slow"})
        answers: list[str] = []
        workers = [threading.Thread(target=lambda m=m: answers.append(ask(m, slow))) for m in ("b", "c")]
        for w in workers:
            w.start()
        until(
            lambda: sum(metric(http, "missive:num_requests_running", model_name=m) for m in "bc") == 2,
            "both busy",
        )
        began = time.monotonic()
        assert ask("a") == "hi"
        waited = time.monotonic() - began
        for w in workers:
            w.join(10)
        assert answers == ["slow", "slow"] and waited > 1.0
        assert "model a waits for memory: b, c in use" in server.log()
        # Unloaded for a: the least recently used of b and c, or both (when
        # both were idle by then and the first was c: 100 MiB was not enough).
        unloaded = sum(
            metric(http, "missive:model_unloads_total", model_name=m, reason="memory") for m in "bc"
        )
        assert "a" in loaded() and unloaded >= 1

        # A model larger than the budget is loaded alone.
        ask("huge")
        assert loaded() == {"huge"}
        assert (
            "model huge needs 400 MiB, more than server.memory_budget_mib (300 MiB): loaded alone"
            in server.log()
        )


def test_a_gguf_model_loads_on_demand_unloads_and_loads_again() -> None:
    """The llamacpp driver on the packaged SmolLM2: listed with its file's
    context before it is loaded, loaded by a stream (pings meanwhile),
    unloaded when idle (its driver closed), loaded again by the next request."""
    from test_model_sources import smollm2

    config = {
        "server": {"ping_interval": 0.05, "metrics_public": True},
        "models": {
            "smol": {
                "driver": "llamacpp",
                "lazy": True,
                "idle_unload": 1.0,
                "settings": {"model_path": str(smollm2()), "parallel": 1},
            }
        },
    }
    with serve_process(config) as server:
        url = server.url
        client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
        assert client.models.retrieve("smol").max_input_tokens == 8192  # from the GGUF, before loading
        assert "llama.cpp" not in server.log() and "loaded from" not in server.log()
        events = [e for e, _ in raw_stream(url, "smol", "Say hello")]
        assert events[0] == "ping" and "message_start" in events and events[-1] == "message_stop"
        until(
            lambda: metric(url, "missive:model_unloads_total", model_name="smol", reason="idle") == 1,
            "unloaded",
        )
        assert (
            client.messages.create(
                model="smol", max_tokens=5, messages=say("Hi"), extra_body={"temperature": 0}
            ).usage.output_tokens
            > 0
        )
        assert metric(url, "missive:model_loads_total", model_name="smol") == 2
        log = server.log()
    assert log.count("model smol loaded on demand in") == 2 and "unloaded model smol (idle for" in log
