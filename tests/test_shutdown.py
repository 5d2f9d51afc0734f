"""Graceful shutdown of ``missive serve`` on SIGTERM (core/missive/shutdown.py).

Each test runs its own ``missive serve`` on the echo driver, whose scripts
stream slowly (``sleep`` steps), and sends it SIGTERM while answers run.
Requests whose exact bytes matter go over raw sockets; the others through
the official SDK (``max_retries=0``: it retries 529s by itself). Every wait
is for an event under a generous deadline; the time checks that remain
compare against the grace period (1 s or 30 s), not the machine's speed.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import anthropic
import anyio
import httpx
import pytest

from missive.config import Config
from missive.server import shutdown
from missive.server.app import create_app
from missive.server.services import services
from missive.server.shutdown import Drain, serve_until_stopped
from missive.serving.admission import Admission
from missive.testing import ServerProcess, serve_process, until
from missive_echo import script

DEADLINE = 30.0  # seconds; reached only when a test fails


def config(grace: float, **model: Any) -> dict[str, Any]:
    return {
        "server": {"ping_interval": 0.3, "shutdown_grace": grace},
        "models": {"echo": {"driver": "echo", "context_window": 1000, **model}},
    }


def health(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", timeout=10).json()


class RawStream:
    """One streaming ``POST /v1/messages`` on its own socket; ``received``
    holds every byte the server has sent so far."""

    def __init__(self, url: str, steps: list[dict[str, Any]]) -> None:
        body = json.dumps(
            {
                "model": "echo",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": script(*steps)}],
            }
        ).encode()
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=DEADLINE)
        self.sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.received = b""

    def read_until(self, marker: bytes) -> None:
        while marker not in self.received:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed before {marker!r}: {self.received!r}"
            self.received += chunk

    def read_all(self) -> bytes:
        while chunk := self.sock.recv(65536):
            self.received += chunk
        return self.received

    def events(self) -> list[dict[str, Any]]:
        """The SSE events received (``event:`` name checked against ``data.type``)."""
        found = []
        for block in self.received.split(b"\r\n\r\n", 1)[1].split(b"\n\n"):
            lines = [line for line in block.decode().splitlines() if line.startswith(("event: ", "data: "))]
            if len(lines) == 2:
                data = json.loads(lines[1][6:])
                assert lines[0] == f"event: {data['type']}"
                found.append(data)
        return found

    def close(self) -> None:
        self.sock.close()


def in_thread(func: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``func`` in a thread; the returned callable joins it and returns
    its result or raises its exception."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = func()
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(DEADLINE)
        assert not thread.is_alive(), "the request never ended"
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return join


def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


def exit_status(server: ServerProcess, timeout: float = DEADLINE) -> int:
    return server.process.wait(timeout=timeout)


def test_a_stream_running_at_sigterm_finishes_within_the_grace() -> None:
    """A stream in progress when SIGTERM arrives goes on to its normal end
    (every delta, ``message_stop``) during the 30 s grace; then the process
    closes its models and exits 0. It runs 4 s after the signal: longer than
    Hypercorn's own default grace (3 s)."""
    steps = [{"text": "one"}, {"sleep": 2.0}, {"text": " two"}, {"sleep": 2.0}, {"text": " three"}]
    with serve_process(config(30.0)) as server:
        with client(server).messages.stream(
            model="echo", max_tokens=50, messages=[{"role": "user", "content": script(*steps)}]
        ) as stream:
            texts = iter(stream.text_stream)
            assert next(texts) == "one"
            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            rest = "".join(texts)
            final = stream.get_final_message()
        assert rest == " two three"
        # it was still streaming after the signal: its last 4 s (less the time
        # "one" took to arrive), longer than Hypercorn's default grace (3 s)
        assert time.monotonic() - signalled > 3.0
        assert final.stop_reason == "end_turn" and final.content[0].text == "one two three"
        assert exit_status(server) == 0
        log = server.log()
        assert "shutting down: new connections refused, 0 waiting requests answered 529, 1 generations" in log
        assert "stopped: models closed" in log
        assert "overloaded_error" not in log


def test_the_grace_ends_what_still_runs_with_overloaded_error() -> None:
    """With a 1 s grace, a stream still running then ends with an SSE
    ``error`` event (``overloaded_error``) right after the text it had sent,
    with no ``message_stop`` (raw bytes) and the SDK raising APIStatusError;
    a non-streaming request still running gets a 529 envelope. The process
    exits 0 soon after, well before Hypercorn's own timeout (grace + 5 s)."""
    long = [{"text": "partial"}, {"sleep": 60}, {"text": " never"}]
    with serve_process(config(1.0)) as server:
        raw = RawStream(server.url, long)
        raw.read_until(b"partial")
        sdk_text: list[str] = []

        def sdk_stream() -> None:
            with client(server).messages.stream(
                model="echo", max_tokens=50, messages=[{"role": "user", "content": script(*long)}]
            ) as stream:
                for text in stream.text_stream:
                    sdk_text.append(text)

        streamed = in_thread(sdk_stream)
        answered = in_thread(
            lambda: client(server).messages.create(
                model="echo", max_tokens=50, messages=[{"role": "user", "content": script(*long)}]
            )
        )
        until(lambda: sdk_text and health(server)["generating"] == 3, "three generations running")
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()

        raw.read_all()
        ended = time.monotonic() - signalled
        events = raw.events()
        assert [e["type"] for e in events if e["type"] != "ping"] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "error",
        ]
        assert events[2]["delta"] == {"type": "text_delta", "text": "partial"}
        error = events[-1]["error"]
        assert error["type"] == "overloaded_error"
        assert error["message"].startswith("the server is shutting down: this answer was ended")
        assert "when the shutdown grace period (server.shutdown_grace = 1 s) ran out" in error["message"]
        assert 0.9 < ended < 5.5  # at the end of the 1 s grace, not before, not at Hypercorn's (grace + 5 s)

        with pytest.raises(anthropic.APIStatusError) as caught:
            streamed()
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert sdk_text == ["partial"]

        with pytest.raises(anthropic.APIStatusError) as refused:
            answered()
        assert refused.value.status_code == 529
        assert refused.value.body["error"]["type"] == "overloaded_error"
        assert refused.value.body["error"]["message"].startswith("the server is shutting down")
        assert refused.value.response.headers["retry-after"] == "1"

        assert exit_status(server, timeout=10) == 0
        assert time.monotonic() - signalled < 5.5  # before Hypercorn's own timeout (grace + 5 s)
        assert "stopped: models closed" in server.log()


def test_a_queued_request_gets_529_at_sigterm() -> None:
    """With ``max_concurrency`` 1 (``settings.capabilities``), a request
    waiting behind a running stream is answered 529 ``overloaded_error`` at
    once when SIGTERM arrives, long before the 30 s grace; the running
    stream goes on. When it ends (its client hangs up) the process exits 0
    without waiting for the rest of the grace."""
    one_slot = {"settings": {"capabilities": {"max_concurrency": 1}}}
    with serve_process(config(30.0, **one_slot)) as server:
        holder = RawStream(server.url, [{"text": "holding"}, {"sleep": 120}])
        holder.read_until(b"holding")
        queued = in_thread(
            lambda: client(server).messages.create(
                model="echo", max_tokens=50, messages=[{"role": "user", "content": "waiting"}]
            )
        )
        until(lambda: health(server)["waiting"] == 1, "the second request queued")
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        with pytest.raises(anthropic.APIStatusError) as caught:
            queued()
        assert time.monotonic() - signalled < 15.0  # at once, not at the end of the 30 s grace
        assert caught.value.status_code == 529
        body = caught.value.body
        assert body["error"]["type"] == "overloaded_error"
        assert body["error"]["message"].startswith("the server is shutting down and starts no new generation")
        assert caught.value.response.headers["retry-after"] == "1"
        assert caught.value.response.headers["connection"] == "close"

        holder.received = b""
        holder.read_until(b"event: ping")  # the running stream still runs
        assert server.process.poll() is None
        holder.close()
        assert exit_status(server, timeout=15) == 0
        assert time.monotonic() - signalled < 15.0


def test_new_connections_are_refused_after_sigterm() -> None:
    """Once SIGTERM arrives, connecting is refused and an idle keep-alive
    connection is closed by the server, while a stream already running
    keeps its connection (it still receives pings). A second signal (here
    SIGINT, Ctrl-C) ends the 30 s grace at once: the stream gets its
    ``error`` event and the process exits 0."""
    with serve_process(config(30.0)) as server:
        holder = RawStream(server.url, [{"text": "holding"}, {"sleep": 120}])
        holder.read_until(b"holding")
        parsed = urlparse(server.url)
        idle = socket.create_connection((parsed.hostname, parsed.port), timeout=DEADLINE)
        idle.sendall(b"GET /livez HTTP/1.1\r\nhost: test\r\n\r\n")
        answer = b""
        while not answer.endswith(b'{"status":"ok"}\n'):
            answer += idle.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")  # served; the connection stays open

        server.process.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                socket.create_connection((parsed.hostname, parsed.port), timeout=5).close()
            except ConnectionRefusedError:
                return True
            return False

        until(refused, "a new connection refused", 10)
        assert idle.recv(65536) == b""  # closed by the server, not reused for a new request
        idle.close()
        holder.received = b""
        holder.read_until(b"event: ping")
        assert server.process.poll() is None

        server.process.send_signal(signal.SIGINT)  # a second signal (Ctrl-C too) ends the grace now
        signalled = time.monotonic()
        holder.read_until(b"event: error")
        assert b'"type":"overloaded_error"' in holder.received
        assert b"by a second shutdown signal, before the grace period" in holder.received
        assert exit_status(server, timeout=15) == 0
        assert time.monotonic() - signalled < 15.0  # not after the 30 s grace


def test_leaving_serve_process_ends_a_running_stream_cleanly() -> None:
    """``serve_process`` stops its server with SIGTERM and, 5 s later, a
    second one: a stream a test left running gets its ``error`` event and the
    server exits 0 instead of waiting out the 30 s grace or being killed."""
    with serve_process(config(30.0)) as server:
        left = RawStream(server.url, [{"text": "left running"}, {"sleep": 120}])
        left.read_until(b"left running")
        started = time.monotonic()
    assert server.process.returncode == 0
    assert 4.5 < time.monotonic() - started < 12.0
    left.read_all()
    assert left.events()[-1]["error"]["type"] == "overloaded_error"


@pytest.mark.anyio
async def test_requests_reaching_the_app_while_draining_get_529() -> None:
    """A request that reaches the app once the drain has begun (an HTTP/2
    stream, or one that raced the close of its connection) gets 529
    ``overloaded_error`` on every API path with ``connection: close``;
    ``/readyz`` turns 503 ``shutting_down`` while ``/livez`` stays 200."""
    app = create_app(Config.model_validate({"models": {"echo": {"driver": "echo"}}}))
    test = app.test_client()
    body = {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    models = services(app).models
    await models.start()
    try:
        assert (await test.post("/v1/messages", json=body)).status_code == 200
        assert (await test.get("/readyz")).status_code == 200
        services(app).drain.begin()
        for method, path in [
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
            ("GET", "/v1/v1/models"),
        ]:
            answer = await test.open(path, method=method, json=body if method == "POST" else None)
            assert answer.status_code == 529, path
            error = (await answer.get_json())["error"]
            assert error["type"] == "overloaded_error"
            assert error["message"].startswith("the server is shutting down and accepts no new requests")
            assert answer.headers["retry-after"] == "1" and answer.headers["connection"] == "close"
        ready = await test.get("/readyz")
        assert ready.status_code == 503 and (await ready.get_json())["status"] == "shutting_down"
        assert (await test.get("/livez")).status_code == 200
    finally:
        services(app).drain.expire()
        await models.aclose()


class Models:
    """Stands for the ModelTable: records when it is closed."""

    closing = False
    closed_at: float | None = None

    async def aclose(self) -> None:
        self.closing = True
        self.closed_at = time.monotonic()


@pytest.mark.anyio
async def test_a_server_that_never_returns_is_abandoned_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On Python 3.12+ Hypercorn may wait forever for a connection whose
    client stopped reading (pgjones/hypercorn#308): ``serve_until_stopped``
    cancels it two close margins after the grace, then cancels the tasks
    still running (the connections) before it closes the models."""
    import asyncio

    monkeypatch.setattr(shutdown, "CLOSE_MARGIN", 0.2)
    drain = Drain(0.3, Admission(Config()))
    models = Models()
    connections: list[asyncio.Future[None]] = []
    closed = asyncio.Event()  # set when the last connection ends, as wait_closed() sees it

    async def connection() -> None:
        try:
            await asyncio.sleep(3600)  # a client that never reads
        finally:
            closed.set()

    async def serve(trigger: Callable[[], Any]) -> None:
        connections.append(asyncio.ensure_future(connection()))
        await trigger()
        await closed.wait()  # Python 3.12's Server.wait_closed()

    asyncio.get_running_loop().call_later(0.1, drain.begin)
    started = time.monotonic()
    with anyio.fail_after(10):
        await serve_until_stopped(serve, drain, models, signals=())
    assert connections[0].cancelled()
    assert drain.expired.done()
    assert models.closed_at is not None
    assert 0.1 + 0.3 + 2 * 0.2 <= models.closed_at - started < 3.0


def test_a_client_gone_while_queued_is_recorded_when_it_leaves() -> None:
    """A client that leaves while its request waits in the queue is logged
    and counted (499 ``client_disconnected``) as it leaves, not whenever the
    garbage collector drops its record (a newcomer saw such lines 20-45 s
    late, with those durations in the latency histogram)."""
    one_slot = {"settings": {"capabilities": {"max_concurrency": 1}}}
    with serve_process(config(30.0, **one_slot)) as server:

        def gone() -> float:
            text = httpx.get(f"{server.url}/metrics", timeout=10).text
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("missive:requests_total{") and 'status="499"' in line
            )

        holder = RawStream(server.url, [{"text": "holding"}, {"sleep": 120}])
        holder.read_until(b"holding")
        waiting = RawStream(server.url, [{"text": "never"}])
        until(lambda: health(server)["waiting"] == 1, "the second request queued")
        assert gone() == 0
        waiting.close()  # the client leaves while queued
        until(lambda: gone() == 1, "the departed client counted", timeout=15.0)
        line = until(
            lambda: [ln for ln in server.log().splitlines() if " 499 " in ln], "a 499 log line", timeout=15.0
        )[-1]
        assert "client_disconnected" in line
        duration = float(re.search(r"duration_s=([0-9.]+)", line).group(1))
        assert duration < 15.0, line  # not the 20-45 s of a record dropped by the garbage collector
        holder.close()
