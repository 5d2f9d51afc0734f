"""Probes and status (core/missive/routes/probes.py, routes/status.py,
status.py, ps.py): ``/livez``, ``/readyz`` with a remote model whose backend
is down and then comes up, ``/readyz`` before the models have started,
``/v1/status`` behind the keys, ``missive ps``, and the replica health gauge."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

import httpx
import pytest
from click.testing import CliRunner

from missive.cli.main import cli
from missive.config import Config
from missive.server.app import create_app
from missive.server.services import services
from missive.testing import ClosedPort, ServerProcess, closed_port, serve_process, until
from missive_echo import script

KEY = "sk-probes-test-key"
DEADLINE = 30.0  # seconds; only reached when a test fails


class Models(BaseHTTPRequestHandler):
    """An OpenAI-compatible server's health path (``GET /v1/models``)."""

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"object": "list", "data": [{"id": "remote", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def backend() -> Iterator[ClosedPort]:
    """A port where nothing listens (until a test starts the backend on it),
    held for the module: no other server can take it meanwhile."""
    with closed_port() as port:
        yield port


@pytest.fixture(scope="module")
def backend_port(backend: ClosedPort) -> int:
    return backend.port


@pytest.fixture(scope="module")
def server(backend_port: int) -> Iterator[ServerProcess]:
    config = {
        "keys": {"ops": {"key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "scope": "admin"}},
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 1000,
                "settings": {"capabilities": {"max_concurrency": 2}},
            },
            # Credentials in the URL must not reach metrics or status pages.
            "remote": {
                "driver": "openai",
                "context_window": 4096,
                "settings": {"base_url": f"http://user:hunter2@127.0.0.1:{backend_port}"},
            },
        },
    }
    with serve_process(config) as proc:
        yield proc


def get(url: str, path: str, key: str | None = KEY) -> httpx.Response:
    return httpx.get(f"{url}{path}", headers={"x-api-key": key} if key else {}, timeout=10)


def test_livez_answers_while_the_process_serves(server: ServerProcess) -> None:
    """/livez needs no key and is 200 even while a model's backend is down
    (a liveness failure would restart the container for nothing)."""
    until(lambda: get(server.url, "/readyz", None).status_code == 503, "not ready")
    response = get(server.url, "/livez", None)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert get(server.url, "/health", None).json() == {"status": "ok", "generating": 0, "waiting": 0}


@pytest.mark.anyio
async def test_readyz_is_503_until_the_models_have_started() -> None:
    """Before the drivers' start() (the app built, not yet served), /readyz
    is 503 with each model ``starting``; after it, 200."""
    config = Config.model_validate({"models": {"echo": {"driver": "echo"}, "echo-b": {"driver": "echo"}}})
    app = create_app(config)
    client = app.test_client()
    early = await client.get("/readyz")
    assert early.status_code == 503
    assert (await early.get_json())["models"] == {
        "echo": {"status": "starting"},
        "echo-b": {"status": "starting"},
    }
    models = services(app).models
    await models.start()
    try:
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert await ready.get_json() == {
            "status": "ready",
            "models": {"echo": {"status": "ready"}, "echo-b": {"status": "ready"}},
        }
    finally:
        await models.aclose()


def test_readyz_is_503_naming_a_lazy_model_whose_load_failed() -> None:
    """A ``lazy`` model whose load failed (the echo driver's ``start_error``
    stands for a missing or corrupt file) makes the server not ready: its
    requests get a 500 that says not to retry, so a load balancer must not
    send them here. The probe names the model and the reason, not the error
    (no key); ``/v1/status`` has the error."""
    config = {
        "keys": {"ops": {"key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "scope": "admin"}},
        "models": {
            "echo": {"driver": "echo", "context_window": 1000},
            "broken": {
                "driver": "echo",
                "context_window": 1000,
                "lazy": True,
                "settings": {"start_error": "weights are corrupt"},
            },
        },
    }
    with serve_process(config) as proc:
        ready = get(proc.url, "/readyz", None)
        assert ready.status_code == 200, ready.text  # not loaded yet: loads on its first request
        assert ready.json()["models"]["broken"] == {"status": "ready", "loaded": False}
        body = {"model": "broken", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{proc.url}/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=30)
        assert answer.status_code == 500 and answer.headers["x-should-retry"] == "false", answer.text
        ready = get(proc.url, "/readyz", None)
        assert ready.status_code == 503, ready.text
        assert ready.json() == {
            "status": "not_ready",
            "models": {
                "echo": {"status": "ready"},
                "broken": {"status": "failed", "loaded": False, "reason": "load_failed"},
            },
        }
        status = get(proc.url, "/v1/status").json()["models"]["broken"]
        assert status["status"] == "failed"
        assert status["load_error"] == "model 'broken': weights are corrupt"
        # The other model still answers: only the probe says this replica cannot serve everything.
        body["model"] = "echo"
        assert httpx.post(f"{proc.url}/v1/messages", json=body, headers={"x-api-key": KEY}).status_code == 200


def test_status_needs_a_key_and_shows_every_model(server: ServerProcess, backend_port: int) -> None:
    """/v1/status is 401 without a key; with one it shows each model's driver,
    state, context window, load and queue limits, and the remote model's
    replica (URL without credentials, its health and last error)."""
    assert get(server.url, "/v1/status", None).status_code == 401
    until(
        lambda: get(server.url, "/v1/status").json()["models"]["remote"]["status"] == "unavailable" or None,
        "the backend seen down",
    )
    body = get(server.url, "/v1/status").json()
    echo, remote = body["models"]["echo"], body["models"]["remote"]
    assert {
        k: echo[k]
        for k in (
            "status",
            "driver",
            "context_window",
            "max_concurrency",
            "running",
            "waiting",
            "queue_depth",
        )
    } == {
        "status": "ready",
        "driver": "echo",
        "context_window": 1000,
        "max_concurrency": 2,
        "running": 0,
        "waiting": 0,
        "queue_depth": 16,
    }
    assert remote["driver"] == "openai" and remote["context_window"] == 4096
    [replica] = remote["replicas"]
    assert replica["url"] == f"http://127.0.0.1:{backend_port}" and replica["healthy"] is False
    assert replica["last_error"].startswith("health probe failed")
    assert "hunter2" not in json.dumps(body)


class Held:
    """A streaming message on its own socket that holds a slot of ``echo``."""

    def __init__(self, url: str) -> None:
        body = json.dumps(
            {
                "model": "echo",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": script({"text": "holding"}, {"sleep": 120})}],
            }
        ).encode()
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=DEADLINE)
        self.sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
            + f"x-api-key: {KEY}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert self.sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_missive_ps_shows_models_and_live_load(server: ServerProcess, backend_port: int) -> None:
    """``missive ps`` prints one row per model with driver, state, context,
    running/max_concurrency and waiting/queue_depth: a held stream shows as
    1/2 running on echo; the remote model's down replica is named. Without
    a key it fails with the server's 401 and a hint."""
    held = Held(server.url)
    try:
        until(
            lambda: (
                (m := get(server.url, "/v1/status").json()["models"])["echo"]["running"] == 1
                and m["remote"]["status"] == "unavailable"
            ),
            "1 running and the backend seen down",
        )
        result = CliRunner().invoke(cli, ["ps", "--url", server.url, "--api-key", KEY])
    finally:
        held.sock.close()
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == ["MODEL", "DRIVER", "STATE", "CONTEXT", "RUNNING", "WAITING", "DETAILS"]
    by_model = {row.split()[0]: row.split() for row in rows}
    assert by_model["echo"][:6] == ["echo", "echo", "ready", "1000", "1/2", "0/16"]
    assert by_model["remote"][:6] == ["remote", "openai", "unavailable", "4096", "0", "0/16"]
    assert f"down: http://127.0.0.1:{backend_port}" in result.output and "hunter2" not in result.output

    refused = CliRunner().invoke(cli, ["ps", "--url", server.url, "--api-key", "wrong"])
    assert refused.exit_code == 1 and "answered 401" in refused.output and "--api-key" in refused.output


def test_missive_ps_json_is_the_status_document(server: ServerProcess) -> None:
    """``missive ps --json`` prints GET /v1/status as JSON."""
    result = CliRunner().invoke(cli, ["ps", "--url", server.url, "--api-key", KEY, "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.output)["models"]) == {"echo", "remote"}


def test_missive_ps_at_a_server_that_is_not_missive_fails() -> None:
    """A 200 that is not Missive's status document is an error (exit 1), not an empty table."""
    from missive.testing import start_http_server, stop_http_server

    class Other(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    other, url = start_http_server(Other)
    try:
        result = CliRunner().invoke(cli, ["ps", "--url", url])
    finally:
        stop_http_server(other)
    assert result.exit_code == 1 and "is " + url + " a Missive server?" in result.output


def test_local_driver_status_reports_slots_and_host_cache() -> None:
    """LocalDriver.status() reads the batcher's slots in use and states and
    the host cache's bytes and entries, and shows only the parts the engine has."""
    import asyncio

    from missive.engine.local import LocalDriver
    from missive.engine.runner import ModelInfo

    class Batcher:
        slots, active = 4, 1

        def slot_states(self, held: object) -> list[dict[str, object]]:
            return [{"slot": 0, "state": "generating", "session": None, "held": held}]

    class Cache:
        nbytes, max_bytes = 3 * 2**20, 64 * 2**20

        def __len__(self) -> int:
            return 2

    driver = object.__new__(LocalDriver)
    driver._info = ModelInfo(8192, "", slots=4)
    driver._batcher, driver._host_cache = Batcher(), Cache()
    driver.runner = object()  # holds no context it can tell: no tokens_cached
    assert asyncio.run(driver.status()) == {
        "loaded": True,
        "slots": 4,
        "slots_in_use": 1,
        "slot_states": [{"slot": 0, "state": "generating", "session": None, "held": None}],
        "host_cache_bytes": 3 * 2**20,
        "host_cache_entries": 2,
        "host_cache_max_bytes": 64 * 2**20,
    }
    driver._info, driver._batcher, driver._host_cache = None, None, None
    assert asyncio.run(driver.status()) == {"loaded": False}


def test_readyz_is_503_naming_a_remote_model_without_a_healthy_replica(
    server: ServerProcess, backend: ClosedPort, backend_port: int
) -> None:
    """With the backend of ``remote`` down, /readyz (no key) is 503 and names
    it ``unavailable`` while ``echo`` is ``ready``; the replica gauge shows
    0 for it, under its URL without the credentials. Once the backend
    listens, a recovery probe makes the model ready: /readyz is 200 and the
    gauge 1."""
    response = until(lambda: (r := get(server.url, "/readyz", None)).status_code == 503 and r, "503")
    assert response.json() == {
        "status": "not_ready",
        "models": {
            "echo": {"status": "ready"},
            "remote": {"status": "unavailable", "replicas_healthy": 0, "replicas_total": 1},
        },
    }
    metrics = get(server.url, "/metrics").text
    replica = f'missive:replica_healthy{{model_name="remote",replica="http://127.0.0.1:{backend_port}"}} 0.0'
    assert replica in metrics and "hunter2" not in metrics

    backend.listen(Models)  # up until the module ends: the tests that need it down come first
    # A recovery probe comes at most 30 s (the backoff's cap) after the last.
    ready = until(lambda: (r := get(server.url, "/readyz", None)).status_code == 200 and r, "ready again", 60)
    assert ready.json()["models"]["remote"] == {
        "status": "ready",
        "replicas_healthy": 1,
        "replicas_total": 1,
    }
    assert replica.replace("} 0.0", "} 1.0") in get(server.url, "/metrics").text
