"""The replica pool: least-outstanding choice, failover before the first byte,
recovery after a health probe. Real HTTP against local test servers."""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpx
import pytest

from missive.protocol.errors import OverloadedError
from missive.remote.replicas import Replica, ReplicaPool, redact_url
from missive.testing import closed_port

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, scope="module")
def _collect_leftover_clients() -> None:
    """Collect garbage before the module's event loops start: an unclosed SDK
    AsyncAnthropic left by an earlier module schedules its httpx ``aclose`` on
    whatever loop is running when it is collected, and that task would fail
    inside a test here (its connections belong to a closed loop). Once per
    module: its own tests make no SDK client, and a full collection of a
    long run's heap takes 0.3 s."""
    gc.collect()


class Backend:
    """A tiny HTTP server: ``/work`` answers 200 (or ``work_status``), ``/health``
    answers ``health_status``; it counts the requests of each path."""

    def __init__(self) -> None:
        self.work_status = 200
        self.health_status = 200
        self.hits: dict[str, int] = {}
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                backend.hits[self.path] = backend.hits.get(self.path, 0) + 1
                status = backend.health_status if self.path == "/health" else backend.work_status
                body = b"ok"
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def backends() -> Iterator[list[Backend]]:
    started = [Backend(), Backend()]
    yield started
    for b in started:
        b.close()


async def _send(pool: ReplicaPool, client: httpx.AsyncClient) -> tuple[Replica, httpx.Response]:
    """The documented driver loop: fail over to another replica before the first byte."""
    tried: set[Replica] = set()
    while True:
        async with pool.acquire(exclude=tried) as replica:
            try:
                response = await client.get(replica.url + "/work")
            except httpx.TransportError as exc:
                pool.mark_failed(replica, type(exc).__name__)
                tried.add(replica)
                continue
            if response.status_code >= 500:
                pool.mark_failed(replica, f"status {response.status_code}")
                tried.add(replica)
                continue
            return replica, response


async def _until(condition, what: str, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not condition():
            await anyio.sleep(0.01)


async def test_least_outstanding_choice() -> None:
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool(["http://a:1", "http://b:1", "http://c:1/"], client=client)
        assert [r.url for r in pool.replicas] == ["http://a:1", "http://b:1", "http://c:1"]
        async with pool.acquire() as first, pool.acquire() as second:
            assert first is not second
            third = pool.choose()
            assert third is not None and third not in (first, second) and third.outstanding == 0
            async with pool.acquire() as held:
                assert held is third
            async with pool.acquire() as again:
                assert again is third  # finished again: the only idle replica
        assert all(r.outstanding == 0 for r in pool.replicas)
        # Ties are broken round-robin: an idle fleet is used evenly.
        picks = [pool.choose() for _ in range(6)]
        assert {p.url for p in picks if p} == {r.url for r in pool.replicas}


async def test_failover_before_first_byte_to_a_live_replica(backends: list[Backend]) -> None:
    with closed_port() as down:  # nothing listens: connection refused
        dead = down.url
        async with httpx.AsyncClient() as client:
            pool = ReplicaPool([dead, backends[0].url], client=client, probe_interval=60)
            live = pool.replicas[1]
            live.outstanding = 1  # so the dead replica is the least loaded and tried first
            replica, response = await _send(pool, client)
            assert response.status_code == 200 and replica is live
            assert backends[0].hits == {"/work": 1}
            down = pool.replicas[0]
            assert not down.healthy and down.last_error == "ConnectError"
            # Skipped from now on, while it is unhealthy.
            live.outstanding = 0
            for _ in range(3):
                replica, _ = await _send(pool, client)
                assert replica is live
            await pool.aclose()


async def test_5xx_fails_over_and_every_replica_down_is_529(backends: list[Backend]) -> None:
    for b in backends:
        b.work_status = 503
        b.health_status = 503
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool([b.url for b in backends], client=client, name="m", probe_interval=30)
        with pytest.raises(OverloadedError) as caught:
            await _send(pool, client)
        assert caught.value.status == 529
        assert caught.value.retry_after is not None and 1 <= caught.value.retry_after <= 30
        assert "backend for 'm' unavailable" in caught.value.message and "status 503" in caught.value.message
        assert all(b.hits == {"/work": 1} for b in backends)  # each tried once, no more
        with pytest.raises(OverloadedError):  # later requests fail fast: nothing healthy
            async with pool.acquire():
                pass
        await pool.aclose()


async def test_recovery_after_health_probe_with_backoff(backends: list[Backend]) -> None:
    backend = backends[0]
    backend.health_status = 503
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool([backend.url], client=client, probe_interval=0.02, max_probe_interval=0.08)
        replica = pool.replicas[0]
        pool.mark_failed(replica, "status 500")
        assert not replica.healthy
        await _until(lambda: backend.hits.get("/health", 0) >= 3, "three failed probes")
        assert not replica.healthy and replica.last_error == "health probe answered 503"
        assert replica._probe_interval == pytest.approx(0.08)  # doubled up to the cap
        backend.health_status = 200
        await _until(lambda: replica.healthy, "recovery")
        assert replica.next_probe_at is None
        _, response = await _send(pool, client)
        assert response.status_code == 200
        probes = backend.hits["/health"]
        await anyio.sleep(0.2)
        assert backend.hits["/health"] == probes  # a healthy replica is not probed
        await pool.aclose()


async def test_aclose_stops_probes(backends: list[Backend]) -> None:
    backends[0].health_status = 503
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool([backends[0].url], client=client, probe_interval=0.01, max_probe_interval=0.01)
        pool.mark_failed(pool.replicas[0], "down")
        await _until(lambda: backends[0].hits.get("/health", 0) >= 1, "a probe")
        await pool.aclose()
        seen = backends[0].hits["/health"]
        await anyio.sleep(0.1)
        assert backends[0].hits["/health"] == seen


async def test_check_takes_a_dead_idle_replica_out_of_rotation(backends: list[Backend]) -> None:
    """check() probes the replicas believed healthy: one whose health path
    fails (or where nothing listens) is marked failed without any request
    failing on it, and requests then go to the live one; a replica that
    answers stays healthy."""
    with closed_port() as down:
        dead = down.url
        backends[1].health_status = 503
        async with httpx.AsyncClient() as client:
            pool = ReplicaPool([dead, backends[0].url, backends[1].url], client=client, probe_interval=60)
            assert all(r.healthy for r in pool.replicas)  # nothing seen yet
            await pool.check()
            assert [r.healthy for r in pool.replicas] == [False, True, False]
            assert pool.replicas[0].last_error == "health probe failed: ConnectError"
            assert pool.replicas[2].last_error == "health probe answered 503"
            assert backends[0].hits == {"/health": 1}
            replica, _ = await _send(pool, client)
            assert replica is pool.replicas[1]
            await pool.aclose()


async def test_check_runs_at_most_once_per_probe_interval(backends: list[Backend]) -> None:
    """Checks closer together than probe_interval share one round of probes;
    after the interval a new round probes again."""
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool([backends[0].url], client=client, probe_interval=0.3)
        await pool.check()
        await pool.check()
        assert backends[0].hits == {"/health": 1}
        await anyio.sleep(0.35)
        await pool.check()
        assert backends[0].hits == {"/health": 2}
        await pool.aclose()


async def test_check_wait_bounds_the_wait_not_the_check(backends: list[Backend]) -> None:
    """check(wait=...) returns after ``wait`` seconds while a probe hangs; the
    check goes on and marks the replica failed when its probe times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts connections, never answers
    hanging = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        async with httpx.AsyncClient() as client:
            pool = ReplicaPool([hanging], client=client, probe_interval=60, probe_timeout=0.5)
            with anyio.fail_after(0.45):
                await pool.check(wait=0.05)
            assert pool.replicas[0].healthy  # not known yet
            await _until(lambda: not pool.replicas[0].healthy, "the probe's timeout")
            assert pool.replicas[0].last_error == "health probe failed: ReadTimeout"
            await pool.aclose()
    finally:
        listener.close()


def test_redact_url_drops_credentials() -> None:
    """Replica URLs shown in metrics and status lose their user and password."""
    assert redact_url("http://user:secret@gpu1:8000/v1") == "http://gpu1:8000/v1"
    assert redact_url("https://gpu1:8000") == "https://gpu1:8000"
    assert redact_url("http://a@b@host") == "http://host"
