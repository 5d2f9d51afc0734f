"""Replicas of one backend deployment: least-outstanding choice, failover, health probes.

A model served by a remote backend (vLLM, llama-server, Ollama...) may list
several base URLs, replicas of one deployment. :class:`ReplicaPool` spreads
requests over them without a scheduler of its own:

* **choice**: by the model's replica policy (:mod:`missive.routing.policy`):
  the healthy replica with the fewest outstanding requests (ties broken
  round-robin, so an idle fleet is used evenly), or, with ``prefix``, the one
  holding the longest prefix of the request's prompt, else its session's,
  under a bound on load; a replica marked failed loses its prefix entries;
* **failure**: a driver that gets a connection error, or a 5xx status before
  the first byte of the answer, calls :meth:`ReplicaPool.mark_failed`; the
  replica is skipped from then on;
* **recovery**: a failed replica is probed in the background (``GET`` of
  ``health_path``: vLLM and llama-server answer ``/health``, any
  OpenAI-compatible server ``/v1/models``) after ``probe_interval`` seconds,
  doubling up to ``max_probe_interval`` while it keeps failing; a 2xx answer
  makes it healthy again;
* **failover**: a request that failed before its first byte is sent again to
  another replica (``acquire(exclude=...)``); never after bytes were streamed
  to the client, which the driver knows and the pool does not;
* **checks**: :meth:`ReplicaPool.check` probes the replicas believed
  healthy, so a backend that died while idle is found before a request
  fails on it (``GET /readyz`` and ``GET /v1/status`` call it).

Drivers use it through :class:`missive.remote.transport.RemoteTransport`, which
holds the replica while a request or stream runs (:meth:`ReplicaPool.take` /
:meth:`ReplicaPool.release`) and applies the failover policy.

The pool owns no HTTP client: it borrows the ``httpx.AsyncClient`` the
transport keeps for the probes (requests go over the transport's aiohttp
session; probes are rare and off the request path), which run as asyncio
tasks (Missive serves on asyncio) until the replica recovers or
:meth:`ReplicaPool.aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence

import anyio
import httpx

from ..protocol.errors import OverloadedError
from ..routing.policy import LeastOutstanding
from ..routing.prefix import RouteKey

__all__ = ["Replica", "ReplicaPool", "redact_url"]

log = logging.getLogger("missive.replicas")


def redact_url(url: str) -> str:
    """``url`` without the user and password it may carry
    (``http://user:secret@gpu1:8000`` -> ``http://gpu1:8000``), for metric
    labels and status pages."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


class Replica:
    """One backend base URL and its state.

    Attributes:
        url: base URL without a trailing slash (``http://gpu1:8000``).
        outstanding: requests currently using it.
        healthy: False from :meth:`ReplicaPool.mark_failed` until a probe succeeds.
        last_error: why it was last marked failed (for logs and error messages).
        next_probe_at: ``time.monotonic()`` of the next health probe, when unhealthy.
        routed: requests with a route key sent here, by the policy's reason
            (``prefix``, ``session``, ``least_outstanding``), for ``/metrics``.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.outstanding = 0
        self.healthy = True
        self.last_error: str | None = None
        self.next_probe_at: float | None = None
        self._probe_interval = 0.0
        self.routed: Counter[str] = Counter()

    def __repr__(self) -> str:
        state = "healthy" if self.healthy else f"unhealthy ({self.last_error})"
        return f"Replica({self.url!r}, outstanding={self.outstanding}, {state})"


class ReplicaPool:
    """Replicas of one deployment (see the module doc).

    Args:
        urls: base URLs, at least one; duplicates are dropped.
        client: the driver's HTTP client, used for health probes.
        name: what the replicas serve, for log lines and errors (the model id).
        health_path: path probed with ``GET`` on a failed replica.
        probe_interval: seconds before the first probe of a failed replica.
        max_probe_interval: cap of the doubling interval, in seconds.
        probe_timeout: seconds a probe may take.
        policy: how a replica is chosen (default: least outstanding).

    Raises:
        ValueError: no URL.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        client: httpx.AsyncClient,
        name: str = "backend",
        health_path: str = "/health",
        probe_interval: float = 1.0,
        max_probe_interval: float = 30.0,
        probe_timeout: float = 5.0,
        policy: LeastOutstanding | None = None,
    ) -> None:
        unique = list(dict.fromkeys(u.rstrip("/") for u in urls))
        if not unique:
            raise ValueError("a replica pool needs at least one URL")
        self.replicas = [Replica(u) for u in unique]
        self.client = client
        self.name = name
        self.health_path = "/" + health_path.lstrip("/")
        self.probe_interval = probe_interval
        self.max_probe_interval = max_probe_interval
        self.probe_timeout = probe_timeout
        self.policy = policy or LeastOutstanding()
        self._probing: set[Replica] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._check: asyncio.Task[None] | None = None
        self._checked_at: float | None = None

    def healthy(self) -> list[Replica]:
        """Replicas currently accepting requests."""
        return [r for r in self.replicas if r.healthy]

    def choose(self, exclude: Collection[Replica] = (), route: RouteKey | None = None) -> Replica | None:
        """The healthy replica not in ``exclude`` that the policy picks for a
        request keyed ``route`` (None: least outstanding, ties round-robin).
        None when there is none."""
        candidates = [r for r in self.replicas if r.healthy and r not in exclude]
        if not candidates:
            return None
        replica, reason = self.policy.choose(candidates, route)
        if route is not None:
            replica.routed[reason] += 1
        return replica

    @contextlib.asynccontextmanager
    async def acquire(
        self, exclude: Collection[Replica] = (), route: RouteKey | None = None
    ) -> AsyncIterator[Replica]:
        """Hold the chosen replica for one request (its ``outstanding`` count is
        raised until the block exits, also on cancellation).

        Raises:
            OverloadedError: 529 with ``retry-after``: every replica is unhealthy
                or already tried; the message names the last failure.
        """
        replica = self.take(exclude, route)
        try:
            yield replica
        finally:
            self.release(replica)

    def take(self, exclude: Collection[Replica] = (), route: RouteKey | None = None) -> Replica:
        """:meth:`choose` a replica and count one more request on it, until
        :meth:`release` (the synchronous half of :meth:`acquire`, for holders
        that outlive a ``with`` block, such as a stream opened in a task).

        Raises:
            OverloadedError: as :meth:`acquire`.
        """
        replica = self.choose(exclude, route)
        if replica is None:
            raise self._overloaded(exclude)
        replica.outstanding += 1
        return replica

    def release(self, replica: Replica) -> None:
        """End one request on ``replica`` taken with :meth:`take`."""
        replica.outstanding -= 1

    def retry_after(self) -> int:
        """Seconds until the next health probe of a replica that is down
        (at least 1): what a 529 suggests as ``retry-after``."""
        now = time.monotonic()
        waits = [
            r.next_probe_at - now for r in self.replicas if not r.healthy and r.next_probe_at is not None
        ]
        return max(1, int(min(waits) + 0.999)) if waits else 1

    def _overloaded(self, exclude: Collection[Replica]) -> OverloadedError:
        retry_after = self.retry_after()
        failures = "; ".join(f"{r.url}: {r.last_error}" for r in self.replicas if r.last_error)
        what = "every replica failed" if exclude else "no healthy replica"
        return OverloadedError(
            f"backend for '{self.name}' unavailable ({what}: {failures or 'unknown error'})",
            retry_after=retry_after,
        )

    def mark_failed(self, replica: Replica, reason: str) -> None:
        """Take ``replica`` out of rotation until a health probe succeeds.

        Call it for a connection error or a 5xx status before the first byte;
        not for a 4xx (the request's fault, not the replica's). Must be called
        from the event loop. Idempotent while the replica is unhealthy.
        """
        replica.last_error = reason
        if not replica.healthy:
            return
        log.warning("replica %s of %s marked unhealthy: %s", replica.url, self.name, reason)
        replica.healthy = False
        self.policy.forget(replica)  # its cache is gone, or will be stale when it is back
        replica._probe_interval = self.probe_interval
        replica.next_probe_at = time.monotonic() + replica._probe_interval
        self._start_probe(replica)

    def _start_probe(self, replica: Replica) -> None:
        if replica in self._probing:
            return
        self._probing.add(replica)
        task = asyncio.get_running_loop().create_task(self._probe_until_healthy(replica))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop the health probes (call from ``Driver.aclose``)."""
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def check(self, wait: float | None = None) -> None:
        """Probe every replica believed healthy, now; one whose probe fails is
        marked failed (:meth:`mark_failed`: out of rotation, recovery probes
        start). Replicas already unhealthy are left to their recovery probes.

        A check starts at most once per ``probe_interval`` seconds (callers
        in between share the running one, or the state it left), and runs in
        its own task: ``wait`` bounds how long this call waits for it (None:
        until it ends), and a check not done by then still completes, for
        the next caller to see.
        """
        task = self._check
        if task is None or task.done():
            now = time.monotonic()
            if self._checked_at is not None and now - self._checked_at < self.probe_interval:
                return
            self._checked_at = now
            task = self._check = asyncio.get_running_loop().create_task(self._check_all())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.wait({task}, timeout=wait)

    async def _check_all(self) -> None:
        targets = self.healthy()
        results = await asyncio.gather(*(self.probe(r) for r in targets), return_exceptions=True)
        for replica, ok in zip(targets, results, strict=True):
            if ok is not True and replica.healthy:
                self.mark_failed(replica, replica.last_error or f"health check failed: {ok!r}")

    async def probe(self, replica: Replica) -> bool:
        """One health check: ``GET {url}{health_path}``; True on a 2xx answer."""
        try:
            response = await self.client.get(replica.url + self.health_path, timeout=self.probe_timeout)
        except httpx.HTTPError as exc:
            replica.last_error = f"health probe failed: {type(exc).__name__}"
            return False
        if 200 <= response.status_code < 300:
            return True
        replica.last_error = f"health probe answered {response.status_code}"
        return False

    async def _probe_until_healthy(self, replica: Replica) -> None:
        try:
            while not replica.healthy:
                assert replica.next_probe_at is not None
                await anyio.sleep(max(0.0, replica.next_probe_at - time.monotonic()))
                if await self.probe(replica):
                    log.info("replica %s of %s is healthy again", replica.url, self.name)
                    replica.healthy = True
                    replica.next_probe_at = None
                    break
                replica._probe_interval = min(self.max_probe_interval, replica._probe_interval * 2)
                replica.next_probe_at = time.monotonic() + replica._probe_interval
        finally:
            self._probing.discard(replica)
