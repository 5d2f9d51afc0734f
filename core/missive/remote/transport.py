"""HTTP to the replicas of a remote backend, with one failover and timeout policy.

Every remote driver (``openai``, ``vllm``, ``llamaserver``, ``ollama``) talks
to its backend through a :class:`RemoteTransport`: one pooled
``aiohttp.ClientSession`` (keep-alive connections reused across requests) and
a :class:`missive.remote.replicas.ReplicaPool` over the model's base URLs. The
transport owns what is the same for every backend: choosing a replica,
failing over, timeouts, opening a stream in the background, reading its
lines and closing it. The driver owns what differs: the body, the paths, and
the meaning of the backend's error answers (``classify``).

Why aiohttp and not httpx (which the media fetcher and the replica probes
use): the gateway's cost per request is mostly this client's. Measured
against an instant backend (benchmarks/bench_gateway.py, issue 19), one
16-chunk streamed answer costs httpx 1.1 ms of CPU at 1 connection and 2.7 ms
at 64 (httpcore's pool scans every connection twice per request, and checks
each idle one with a ``poll``), aiohttp 0.24 ms at either: its HTTP parser is
C and its pool a per-host queue.

A connection goes back to the pool only when its answer was read to the
end: :meth:`RemoteStream.lines` reads past the backend's own end line
(``data: [DONE]``) to the end of the body, so the next request needs no new
TCP connection.

Failure and timeout policy (the same for every remote driver):

======================  =============================================  ==============  ====================
when                    what happened                                  the replica     the request
======================  =============================================  ==============  ====================
before the status line  cannot connect (refused, unreachable, no       marked down     next replica
                        connection within ``connect_timeout``)
before the status line  connection reset or closed while sending or    marked down     once more on a fresh
                        before the answer, or an answer that is not    (the second     connection, then the
                        HTTP (a kept-alive connection the backend      time)           next replica
                        closed as it was reused looks like this)
before the status line  no status line within ``read_timeout``: the    kept (it is     504 ``timeout_error``
                        backend is up, queued or prefilling; sending   up, only slow)
                        it again elsewhere would double the work
status line             an error status: the driver's ``classify``     ``Failover``:   next replica, or the
                        says :class:`Failover` (``down`` or not) or    as it says      driver's error
                        returns the client-facing error
after the status line   ``read_timeout`` seconds without a byte        kept            504 ``timeout_error``
after the status line   connection lost (backend killed, network)      kept: the next  502 ``api_error``
                                                                       connect finds
                                                                       out
no replica left         every one down or tried                        (none)          529
                                                                                       ``overloaded_error``
                                                                                       with ``retry-after``
======================  =============================================  ==============  ====================

A request is only sent again before a byte of the answer arrived (nothing
reached the client yet); after that, an error ends the message (an SSE
``error`` event when streaming). ``read_timeout`` bounds silence, not the
whole answer: a backend that keeps sending is never cut. A replica is reached
through the proxy the environment names for it (``HTTP_PROXY``,
``HTTPS_PROXY``, ``NO_PROXY``, read once per replica URL: aiohttp's own
``trust_env`` reads them on every request, 0.1 ms each).

Sources: aiohttp's exception hierarchy (``aiohttp.ClientError`` subclasses,
``ConnectionTimeoutError`` and ``SocketTimeoutError`` since 3.10); the
Messages API's error types (``timeout_error`` 504, ``overloaded_error`` 529,
``api_error``).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import certifi
import httpx

from ..protocol import fastjson
from ..protocol.errors import BadGatewayError, MissiveError, OverloadedError, TimeoutError_
from ..routing.policy import LeastOutstanding
from ..routing.prefix import RouteKey
from .answers import END_GRACE, Answer, Classify, Failover, describe, sse_done
from .replicas import Replica, ReplicaPool
from .stream import RemoteStream

__all__ = [
    "Failover",
    "Classify",
    "Answer",
    "RemoteTransport",
    "RemoteStream",
    "describe",
    "sse_done",
    "END_GRACE",
]


#: Errors before the status line, after connecting, that mean the replica is
#: not serving (marked down, next replica), once a second try on a fresh
#: connection failed too: a reset or closed connection, an answer that is not
#: HTTP. Timeouts are not among them.
_REPLICA_DOWN = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientResponseError,
    ConnectionError,
)


#: Methods aiohttp itself sends once more when the connection is closed or
#: reset before the answer (its ``IDEMPOTENT_METHODS``).
_RETRIED_BY_AIOHTTP = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


def _tls_context() -> ssl.SSLContext:
    """The certificates an ``https`` backend is checked against, as httpx
    checked them: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's
    bundle (a Python without the system's store, as on macOS, still works)."""
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _body(json: Any) -> bytes | None:
    """A request body as JSON bytes (None: no body)."""
    return None if json is None else fastjson.dumps(json)


class RemoteTransport:
    """HTTP to one model's replicas (see the module doc for the policy).

    Args:
        urls: the replicas' base URLs (at least one).
        name: the Missive model id, for messages.
        backend: how messages name the backend (``"the backend"``,
            ``"llama-server"``, ``"Ollama"``).
        classify: the driver's reading of error statuses (:data:`Classify`).
        connect_timeout: seconds to open a connection (also the wait for a
            free connection of Missive's pool).
        read_timeout: seconds without a byte before giving up (also bounds
            sending the body).
        health_path: path probed with ``GET`` on a replica marked down.
        headers: sent with every request (``authorization``...).
        retry_after: seconds the 529 suggests when no replica is left
            (None: until the next health probe of a replica that is down).
        policy: the replica policy (:mod:`missive.routing.policy`; default
            least outstanding); requests sent with a ``route`` key follow it.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        name: str,
        backend: str,
        classify: Classify,
        connect_timeout: float,
        read_timeout: float,
        health_path: str,
        headers: Mapping[str, str] | None = None,
        retry_after: int | None = None,
        policy: LeastOutstanding | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.classify = classify
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retry_after = retry_after
        self.headers = {"content-type": "application/json", **dict(headers or {})}
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}
        # The replica probes (rare, off the request path) keep httpx, as the
        # media fetcher does: see missive.remote.replicas.
        self.probe_client = httpx.AsyncClient(headers=dict(headers or {}))
        self.pool = ReplicaPool(
            urls, client=self.probe_client, name=name, health_path=health_path, policy=policy
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled session, made on first use (an aiohttp session belongs
        to the running event loop, which does not exist yet when drivers are
        built)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ssl=_tls_context()),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.connect_timeout, sock_read=self.read_timeout
                ),
                headers=self.headers,
                trust_env=False,
            )
        return self._session

    def _proxy(self, url: str) -> str | None:
        """The proxy the environment names for ``url`` (None: none or
        ``NO_PROXY``), read once per URL (the standard library's
        ``getproxies`` and ``proxy_bypass``, as httpx reads them)."""
        if url not in self._proxies:
            parts = urlsplit(url)
            proxy = urllib.request.getproxies().get(parts.scheme)
            if proxy and urllib.request.proxy_bypass(parts.hostname or ""):
                proxy = None
            self._proxies[url] = proxy or None
        return self._proxies[url]

    def route_key(self, body: Mapping[str, Any], session: str | None) -> RouteKey:
        """What the replica policy routes a chat ``body`` (``messages``,
        ``tools``) of ``session`` by: pass it as ``route`` to :meth:`stream`
        or :meth:`request` (the prompt's block hashes only under
        ``replica_policy = "prefix"``)."""
        return self.pool.policy.key(body, session)

    @property
    def base_url(self) -> str:
        """The replica URLs, for messages (one URL when there is one replica)."""
        return ", ".join(r.url for r in self.pool.replicas)

    async def aclose(self) -> None:
        """Stop the health probes and close the connections (``Driver.aclose``)."""
        await self.pool.aclose()
        await self.probe_client.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- messages ---------------------------------------------------------------

    def timeout_error(self, what: str) -> TimeoutError_:
        """The 504 for ``read_timeout`` seconds of silence ``what`` (``"mid-answer"``...)."""
        return TimeoutError_(
            f"{self.backend} of model '{self.name}' sent nothing for {self.read_timeout:g} s ({what}); "
            "raise settings.read_timeout if it needs longer"
        )

    def lost_error(self, exc: BaseException, where: str | None = None) -> BadGatewayError:
        """The 502 for a connection lost after the answer began."""
        at = f" at {where}" if where else ""
        return BadGatewayError(
            f"lost the connection to {self.backend}{at} of model '{self.name}' mid-answer ({describe(exc)})"
        )

    def _none_left(self, tried: set[Replica], skipped: list[tuple[Replica, Failover]]) -> OverloadedError:
        """The 529 when no replica can take the request: the pool's, or, when
        the last replica tried was only busy, in its words."""
        retry_after = self.retry_after or self.pool.retry_after()
        if skipped and not skipped[-1][1].down:
            replica, failover = skipped[-1]
            return OverloadedError(
                f"{self.backend} at {replica.url} (model '{self.name}') is busy: {failover.reason}",
                retry_after=retry_after,
            )
        what = "every replica failed" if tried else "no healthy replica"
        failures = "; ".join(f"{r.url}: {r.last_error}" for r in self.pool.replicas if r.last_error)
        return OverloadedError(
            f"{self.backend} of model '{self.name}' is unavailable ({what}: "
            f"{failures or 'unknown error'}); retry later",
            retry_after=retry_after,
        )

    # -- one attempt ------------------------------------------------------------

    async def _attempt(
        self, replica: Replica, method: str, path: str, json: Any, *, stream: bool, classify: Classify | None
    ) -> aiohttp.ClientResponse | Answer | Failover:
        """Send once to ``replica``: the 2xx response (body unread when
        ``stream``, else read whole as an :class:`Answer`), or a :class:`Failover`.

        Raises:
            TimeoutError_: no status line within ``read_timeout``.
            MissiveError: ``classify``'s error for the status.
        """
        try:
            response = await self.session.request(
                method, replica.url + path, data=_body(json), proxy=self._proxy(replica.url)
            )
        except aiohttp.ConnectionTimeoutError as exc:
            return Failover(describe(exc, "ConnectTimeout"))
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError):
            raise self.timeout_error(f"waiting for the answer to {path}") from None
        except aiohttp.ClientConnectorError as exc:
            return Failover(describe(exc.os_error, "ConnectError"))
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            # aiohttp has sent an idempotent request (GET...) once more on a
            # fresh connection already (ClientSession._request): that was the
            # policy's second try.
            return Failover(describe(exc), once_more=method.upper() not in _RETRIED_BY_AIOHTTP)
        except _REPLICA_DOWN as exc:
            return Failover(describe(exc), once_more=True)
        except aiohttp.ClientError as exc:  # an unsupported URL, a protocol error of our own
            raise BadGatewayError(
                f"could not send to {self.backend} of model '{self.name}' at {replica.url}: {describe(exc)}"
            ) from None
        if 200 <= response.status < 300:
            if stream:
                return response
            try:
                content = await response.read()
            except (aiohttp.SocketTimeoutError, asyncio.TimeoutError):
                response.close()
                raise self.timeout_error(f"reading the answer to {path}") from None
            except aiohttp.ClientError as exc:
                response.close()
                raise self.lost_error(exc, replica.url) from None
            return Answer(response.status, response.headers, content, replica.url)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raw = b""
        finally:
            response.close()
        verdict = (classify or self.classify)(response.status, raw, response.headers, replica.url)
        if isinstance(verdict, MissiveError):
            raise verdict
        return verdict

    def _note(
        self,
        replica: Replica,
        failover: Failover,
        tried: set[Replica],
        skipped: list[tuple[Replica, Failover]],
        again: set[Replica],
    ) -> bool:
        """Count a failover; False when the request should first be tried once
        more (``once_more``, the first time for this replica)."""
        if failover.once_more and replica not in again:
            again.add(replica)
            return False
        tried.add(replica)
        skipped.append((replica, failover))
        if failover.down:
            self.pool.mark_failed(replica, failover.reason)
        return True

    # -- requests ---------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        classify: Classify | None = None,
        route: RouteKey | None = None,
    ) -> Answer:
        """``method path`` with a JSON body, to the healthy replica the
        replica policy picks for ``route`` (None: the least busy), failing
        over by the policy: the first successful answer (2xx, body read).
        ``classify`` replaces the transport's for this call (a driver that
        needs the request's context to word an error).

        Raises:
            OverloadedError: no replica could take it (529, ``retry-after``).
            TimeoutError_: ``read_timeout`` without an answer (504).
            MissiveError: ``classify``'s error for an error status.
        """
        tried: set[Replica] = set()
        again: set[Replica] = set()
        skipped: list[tuple[Replica, Failover]] = []
        while True:
            try:
                replica = self.pool.take(exclude=tried, route=route)
            except OverloadedError:
                raise self._none_left(tried, skipped) from None
            try:
                outcome = await self._attempt(replica, method, path, json, stream=False, classify=classify)
            finally:
                self.pool.release(replica)
            if isinstance(outcome, Failover):
                self._note(replica, outcome, tried, skipped, again)
                continue
            assert isinstance(outcome, Answer)
            return outcome

    async def json(
        self, method: str, path: str, json: Any = None, *, classify: Classify | None = None
    ) -> Any:
        """:meth:`request`, then the answer's JSON.

        Raises:
            BadGatewayError: the answer is not JSON; and as :meth:`request`.
        """
        response = await self.request(method, path, json, classify=classify)
        try:
            return response.json()
        except ValueError:
            raise BadGatewayError(
                f"{self.backend} of model '{self.name}' answered {path} with malformed JSON"
            ) from None

    def stream(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        classify: Classify | None = None,
        route: RouteKey | None = None,
    ) -> RemoteStream:
        """Start a streaming request now, in a task (see :class:`RemoteStream`;
        ``classify`` and ``route`` as in :meth:`request`). Must be called
        from the event loop."""
        return RemoteStream(self, method, path, json, classify, route)
