"""Connections their clients close are closed by the server at once (issue 16).

Hypercorn kept a keep-alive connection its client had closed open until its
``keep_alive_timeout`` (75 s under ``missive serve``): the socket sat in
``CLOSE-WAIT`` and held a descriptor (:mod:`missive.server.connections`). Each test
here has clients leave streams in one way (before the answer, in the middle,
after ``message_stop``, after the whole body, through httpx pools), then
checks that the server's open descriptors return to their baseline and no
socket is left in ``CLOSE-WAIT`` within a few seconds, far below 75 s.
The server is a real ``missive serve`` on the echo driver; its descriptors
and sockets are read from ``/proc`` (Linux).
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from missive.testing import ServerProcess, open_fds, serve_process, tcp_states, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

CLIENTS = 16
#: Seconds the server gets to close what its clients closed (a deadline
#: for polling, far below the keep-alive timeout of 75 s it must not wait for).
SETTLE = 20.0

WORDS = " ".join(f"w{i}" for i in range(64))


def request_bytes(body: dict[str, Any], close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    head = (
        "POST /v1/messages HTTP/1.1\r\nhost: missive\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n" + ("connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + data


def stream_body(slow: bool = False) -> dict[str, Any]:
    """A 64-token streamed echo answer; ``slow``: scripted with pauses, so it
    is still running when the client leaves."""
    content = WORDS
    if slow:
        content = json.dumps({"script": [{"text": "a"}, {"sleep": 0.2}] * 20 + [{"text": "end"}]})
    return {
        "model": "echo",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": content}],
    }


def read_until(sock: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    data = b""
    while marker not in data and len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process({"models": {"echo": {"driver": "echo", "context_window": 1000}}}) as server:
        # One answer on a connection the server closes itself: whatever the
        # first request opens lazily is in the baseline.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request_bytes(stream_body(), close=True))
            read_until(sock, b"\r\n0\r\n\r\n")
        yield server


def settled(server: ServerProcess, baseline: int) -> bool:
    pid = server.process.pid
    return open_fds(pid) <= baseline and tcp_states(pid).get("CLOSE_WAIT", 0) == 0


def check_released(server: ServerProcess, baseline: int) -> None:
    pid = server.process.pid
    ok = wait_until(lambda: settled(server, baseline), SETTLE)
    assert ok, (
        f"{SETTLE} s after its clients left, the server holds {open_fds(pid)} descriptors "
        f"(baseline {baseline}), sockets {tcp_states(pid)}"
    )


def baseline_of(server: ServerProcess) -> int:
    pid = server.process.pid
    quiet = wait_until(lambda: not {"ESTABLISHED", "CLOSE_WAIT"} & set(tcp_states(pid)), SETTLE)
    assert quiet, f"connections left by an earlier test: {tcp_states(pid)}"
    return open_fds(pid)


@pytest.mark.parametrize("leave", ["after_body", "after_message_stop", "mid_stream", "before_answer"])
def test_connections_closed_by_clients_are_closed_at_once(server: ServerProcess, leave: str) -> None:
    """Clients each stream an answer over their own keep-alive connection and
    close the socket at one point (after the whole chunked body, right after
    ``message_stop``, in the middle of a slow answer, or just after sending
    the request); within a few seconds the server holds no more descriptors
    than before and no socket in CLOSE-WAIT."""
    baseline = baseline_of(server)
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(CLIENTS)]
    try:
        for sock in sockets:
            sock.sendall(request_bytes(stream_body(slow=leave == "mid_stream")))
        for sock in sockets:
            if leave == "after_body":
                assert b"event: message_stop" in read_until(sock, b"\r\n0\r\n\r\n")
            elif leave == "after_message_stop":
                assert b"event: message_stop" in read_until(sock, b"event: message_stop")
            elif leave == "mid_stream":
                assert b"event: content_block_delta" in read_until(sock, b"event: content_block_delta")
    finally:
        for sock in sockets:
            sock.close()
    check_released(server, baseline)


def test_httpx_pools_closed_after_streams_are_released(server: ServerProcess) -> None:
    """Clients that stream through httpx connection pools (three answers on
    each keep-alive connection), then close their pools: the server releases
    every connection within a few seconds."""
    baseline = baseline_of(server)
    clients = [httpx.Client(base_url=server.url, timeout=30) for _ in range(CLIENTS)]
    try:
        for _ in range(3):
            for client in clients:
                with client.stream("POST", "/v1/messages", json=stream_body()) as response:
                    assert response.status_code == 200
                    assert "event: message_stop" in response.read().decode()
        assert tcp_states(server.process.pid).get("ESTABLISHED", 0) >= CLIENTS  # kept alive meanwhile
    finally:
        for client in clients:
            client.close()
    check_released(server, baseline)


@pytest.mark.parametrize(
    ("raw", "status", "fragment"),
    [
        (
            b"POST /v1/messages HTTP/1.1\r\nhost: missive\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n",
            431,
            "Request headers too large",
        ),
        (b"POST /v1/messages HTTP/1.1\r\nhost missive\r\n\r\n", 400, "Malformed HTTP request"),
    ],
)
def test_requests_hypercorn_refuses_get_the_envelope(
    server: ServerProcess, raw: bytes, status: int, fragment: str
) -> None:
    """What Hypercorn answers before the app runs (headers past its limit, a
    request it cannot parse) carries the error envelope and a request id
    (:mod:`missive.server.http_errors`), not an empty body; the SDK reads it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        answer = read_until(sock, b"}}")
        sock.settimeout(2)
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    envelope = json.loads(body)
    assert envelope["type"] == "error" and envelope["error"]["type"] == "invalid_request_error"
    assert fragment in envelope["error"]["message"]
    assert envelope["request_id"] == headers["request-id"] and headers["request-id"].startswith("req_")


def test_both_content_length_and_transfer_encoding_is_a_400_and_the_connection_closes(
    server: ServerProcess,
) -> None:
    """RFC 9112 section 6.1: a request with both ``Content-Length`` and
    ``Transfer-Encoding`` ought to be an error (request smuggling: a proxy
    in front that frames by ``Content-Length`` would forward what follows the
    chunked body as part of this request; read as chunked, it is a second
    request here), and the server must close the connection after answering.
    The answer is the envelope's 400 with ``connection: close``, and the
    request hidden after the chunked body is never answered."""
    hidden = b"GET /v1/models HTTP/1.1\r\nhost: missive\r\n\r\n"
    body = b"0\r\n\r\n" + hidden
    raw = (
        b"POST /v1/messages HTTP/1.1\r\nHost: missive\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        answer, closed = b"", False
        try:
            while chunk := sock.recv(65536):
                answer += chunk
            closed = True  # the server closed it: nothing more is read from this connection
        except TimeoutError:
            pass
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # the hidden GET got no answer
    assert closed, answer
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in head.decode().split("\r\n")[1:])}
    assert headers["connection"] == "close"
    envelope = json.loads(rest[: int(headers["content-length"])])
    assert envelope["type"] == "error" and envelope["error"]["type"] == "invalid_request_error"
    assert "both Content-Length and Transfer-Encoding" in envelope["error"]["message"]
    assert envelope["request_id"] == headers["request-id"]
    # The same message with one framing header is served.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request_bytes({**stream_body(), "stream": False}, close=True))
        assert read_until(sock, b"}}").startswith(b"HTTP/1.1 200 ")
