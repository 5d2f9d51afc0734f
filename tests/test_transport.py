"""The remote transport's failover and timeout policy (:mod:`missive.remote.transport`),
case by case, against raw local HTTP servers that misbehave on purpose.
The same policy through live servers and each driver: tests/test_remote_faults.py."""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from missive.protocol.errors import (
    BadGatewayError,
    InvalidRequestError,
    MissiveError,
    OverloadedError,
    TimeoutError_,
)
from missive.remote.transport import Failover, RemoteTransport
from missive.testing import closed_port

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, scope="module")
def _collect_leftover_clients() -> None:
    gc.collect()  # see tests/test_replicas.py


class RawBackend:
    """A loopback HTTP/1.1 server whose answer to each request is the next of
    ``plan`` (the last one repeats):

    * ``"ok"``: 200 with body ``ok``; ``"503"``, ``"500"``, ``"400"``: that status;
    * ``"drop"``: close the connection without answering;
    * ``"hang"``: read the request, answer nothing;
    * ``"lines"``: 200 chunked, two lines, then a clean end;
    * ``"sse"``: 200 chunked, ``data: one``, ``data: [DONE]``, then the end a moment later;
    * ``"lines-drop"``: 200 chunked, one line, then close mid-body;
    * ``"lines-hang"``: 200 chunked, one line, then silence.
    """

    def __init__(self, plan: list[str]) -> None:
        self.plan = list(plan)
        self.requests = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._open.append(conn)
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        data = b""
        try:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.requests += 1
                action = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
                if action == "drop":
                    conn.close()
                    return
                if action == "hang":
                    time.sleep(30)
                    return
                if action == "sse":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                        b"b\r\ndata: one\n\n\r\ne\r\ndata: [DONE]\n\n\r\n"
                    )
                    time.sleep(0.05)  # the body's end comes a little later, in its own packet
                    conn.sendall(b"0\r\n\r\n")
                    continue
                if action.startswith("lines"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\none\r\n\r\n")
                    if action == "lines-drop":
                        conn.close()
                        return
                    if action == "lines-hang":
                        time.sleep(30)
                        return
                    conn.sendall(b"5\r\ntwo\r\n\r\n0\r\n\r\n")
                    continue
                status = int(action) if action.isdigit() else 200
                body = b"ok" if status == 200 else b'{"error": "nope"}'
                conn.sendall(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body))
        except OSError:
            return

    def close(self) -> None:
        self.sock.close()
        for conn in self._open:
            try:
                conn.close()
            except OSError:
                pass


def classify(status: int, raw: bytes, headers: httpx.Headers, url: str) -> Failover | MissiveError:
    """A driver's reading: 503 busy (skip), 5xx down, 4xx the request's fault."""
    if status == 503:
        return Failover("busy", down=False)
    if status >= 500:
        return Failover(f"HTTP {status}")
    return InvalidRequestError(f"refused: {raw.decode()}")


@pytest.fixture
def make() -> Iterator:
    made: list[object] = []

    def build(*plans: list[str], read_timeout: float = 5.0) -> tuple[RemoteTransport, list[RawBackend]]:
        backends = [RawBackend(plan) for plan in plans]
        transport = RemoteTransport(
            [b.url for b in backends],
            name="m",
            backend="the backend",
            classify=classify,
            connect_timeout=1.0,
            read_timeout=read_timeout,
            health_path="/health",
        )
        made.append((transport, backends))
        return transport, backends

    yield build
    for _, backends in made:  # type: ignore[misc]
        for b in backends:
            b.close()


async def test_a_dropped_connection_is_tried_once_more_without_marking_the_replica(make) -> None:
    transport, [backend] = make(["drop", "ok"])
    try:
        response = await transport.request("GET", "/work")
        assert response.text == "ok" and backend.requests == 2
        assert transport.pool.replicas[0].healthy
    finally:
        await transport.aclose()


async def test_dropped_twice_marks_down_and_fails_over(make) -> None:
    transport, [first, second] = make(["drop"], ["ok"])
    transport.pool.replicas[1].outstanding = 5  # the first is chosen first
    try:
        response = await transport.request("GET", "/work")
        assert response.text == "ok" and first.requests == 2
        assert not transport.pool.replicas[0].healthy and transport.pool.replicas[1].healthy
    finally:
        await transport.aclose()


async def test_refused_connection_marks_down_at_once(make) -> None:
    transport, [backend] = make(["ok"])
    with closed_port() as down:
        dead = down.url
        transport.pool.replicas.insert(0, type(transport.pool.replicas[0])(dead))
        transport.pool.replicas[1].outstanding = 5
        try:
            assert (await transport.request("GET", "/work")).text == "ok"
            assert not transport.pool.replicas[0].healthy
            assert "ConnectError" in (transport.pool.replicas[0].last_error or "")
        finally:
            transport.pool.replicas[1].outstanding = 0
            await transport.aclose()


async def test_busy_replica_is_skipped_not_marked_and_all_busy_is_529(make) -> None:
    transport, [busy, idle] = make(["503"], ["ok"])
    transport.pool.replicas[1].outstanding = 5
    try:
        assert (await transport.request("GET", "/work")).text == "ok"
        assert transport.pool.replicas[0].healthy and busy.requests == 1
        idle.plan = ["503"]
        with pytest.raises(OverloadedError) as caught:
            await transport.request("GET", "/work")
        assert "is busy: busy" in caught.value.message
        assert all(r.healthy for r in transport.pool.replicas)
    finally:
        await transport.aclose()


async def test_5xx_fails_over_and_4xx_is_the_request_fault(make) -> None:
    transport, [broken, fine] = make(["500"], ["400"])
    transport.pool.replicas[1].outstanding = 5
    try:
        with pytest.raises(InvalidRequestError, match="refused"):
            await transport.request("GET", "/work")
        assert not transport.pool.replicas[0].healthy and transport.pool.replicas[1].healthy
        with pytest.raises(InvalidRequestError):
            await transport.request("GET", "/work")  # a 4xx never takes a replica out
        assert transport.pool.replicas[1].healthy
    finally:
        await transport.aclose()


async def test_no_answer_is_504_and_not_sent_elsewhere(make) -> None:
    transport, [slow, other] = make(["hang"], ["ok"], read_timeout=0.5)
    transport.pool.replicas[1].outstanding = 5
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError_) as caught:
            await transport.request("POST", "/work", {"x": 1})
        assert time.monotonic() - started < 2
        assert "0.5 s" in caught.value.message and caught.value.status == 504
        assert other.requests == 0, "a slow replica's request is not doubled on another"
        assert transport.pool.replicas[0].healthy
    finally:
        await transport.aclose()


async def test_stream_lines_then_lost_connection_is_502_and_replica_kept(make) -> None:
    transport, [backend] = make(["lines-drop"])
    try:
        stream = transport.stream("POST", "/chat", {})
        lines = []
        with pytest.raises(BadGatewayError, match="lost the connection"):
            async for line in stream.lines():
                lines.append(line)
        await stream.aclose()
        assert lines == ["one"]
        assert transport.pool.replicas[0].healthy and transport.pool.replicas[0].outstanding == 0
    finally:
        await transport.aclose()


async def test_stream_silent_mid_answer_is_504(make) -> None:
    transport, [backend] = make(["lines-hang"], read_timeout=0.5)
    try:
        async with transport.stream("POST", "/chat", {}) as stream:
            lines = []
            with pytest.raises(TimeoutError_, match="mid-answer"):
                async for line in stream.lines():
                    lines.append(line)
        assert lines == ["one"] and transport.pool.replicas[0].outstanding == 0
    finally:
        await transport.aclose()


async def test_stream_closed_while_opening_releases_the_replica(make) -> None:
    transport, [backend] = make(["hang"])
    try:
        stream = transport.stream("POST", "/chat", {})
        assert not await stream.wait_open(0.2)
        assert transport.pool.replicas[0].outstanding == 1
        await stream.aclose()
        for _ in range(100):
            if transport.pool.replicas[0].outstanding == 0:
                break
            await anyio.sleep(0.01)
        assert transport.pool.replicas[0].outstanding == 0
    finally:
        await transport.aclose()


async def test_whole_stream_reads_every_line(make) -> None:
    transport, [backend] = make(["lines"])
    try:
        async with transport.stream("POST", "/chat", {}) as stream:
            assert await stream.wait_open(None)
            assert [line async for line in stream.lines()] == ["one", "two"]
    finally:
        await transport.aclose()


async def test_a_stream_read_past_its_end_line_keeps_its_connection(make) -> None:
    """Read with ``end=sse_done``, the body's end (which arrives after the
    ``[DONE]`` line) is read too, so the next request reuses the connection;
    without ``end``, a reader stopping at ``[DONE]`` closes it."""
    from missive.remote.transport import sse_done

    transport, [backend] = make(["sse"])
    try:
        for _ in range(3):
            async with transport.stream("POST", "/chat", {}) as stream:
                lines = [line async for line in stream.lines(end=sse_done)]
            assert lines == ["data: one", "", "data: [DONE]"]
        assert backend.requests == 3 and backend.connections == 1
        async with transport.stream("POST", "/chat", {}) as stream:
            async for line in stream.lines():
                if sse_done(line):
                    break
        async with transport.stream("POST", "/chat", {}) as stream:
            assert [line async for line in stream.lines(end=sse_done)][-1] == "data: [DONE]"
        assert backend.requests == 5 and backend.connections == 2
    finally:
        await transport.aclose()


async def test_replicas_use_the_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY / NO_PROXY as httpx honoured them, read once per replica."""
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    transport = RemoteTransport(
        ["http://127.0.0.1:1", "http://gpu1:8000"],
        name="m",
        backend="the backend",
        classify=classify,
        connect_timeout=1.0,
        read_timeout=1.0,
        health_path="/health",
    )
    try:
        assert transport._proxy("http://127.0.0.1:1") is None
        assert transport._proxy("http://gpu1:8000") == "http://proxy.example:3128"
        monkeypatch.delenv("HTTP_PROXY")
        assert transport._proxy("http://gpu1:8000") == "http://proxy.example:3128", "read once"
    finally:
        await transport.aclose()
