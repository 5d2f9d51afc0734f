"""HTTP to the replicas of a remote backend, with one failover and timeout policy.

Every remote driver (``openai``, ``vllm``, ``llamaserver``, ``ollama``) talks
to its backend through a :class:`RemoteTransport`: one pooled
``httpx.AsyncClient`` (keep-alive connections reused across requests) and a
:class:`missive.replicas.ReplicaPool` over the model's base URLs. The
transport owns what is the same for every backend: choosing a replica,
failing over, timeouts, opening a stream in the background, reading its
lines and closing it. The driver owns what differs: the body, the paths, and
the meaning of the backend's error answers (``classify``).

Failure and timeout policy (the same for every remote driver):

=========================  =============================================  ==============  ====================
when                       what happened                                  the replica     the request
=========================  =============================================  ==============  ====================
before the status line     cannot connect (``ConnectError``,              marked down     next replica
                           ``ConnectTimeout``)
before the status line     connection reset or closed while sending or    marked down     once more on a fresh
                           before the answer (``WriteError``,             (the second     connection, then the
                           ``WriteTimeout``, ``ReadError``,               time)           next replica
                           ``RemoteProtocolError``)
before the status line     no free connection in Missive's own pool       kept            next replica
                           within ``connect_timeout`` (``PoolTimeout``)
before the status line     no status line within ``read_timeout``         kept (it is     504 ``timeout_error``
                           (``ReadTimeout``): the backend is up, queued   up, only slow)
                           or prefilling; sending it again elsewhere
                           would double the work
status line                an error status: the driver's ``classify``     ``Failover``:   next replica, or the
                           says :class:`Failover` (``down`` or not) or    as it says      driver's error
                           returns the client-facing error
after the status line      ``read_timeout`` seconds without a byte        kept            504 ``timeout_error``
after the status line      connection lost (backend killed, network)      kept: the next  502 ``api_error``
                                                                          connect finds
                                                                          out
no replica left            every one down or tried                        (none)          529 ``overloaded_error``
                                                                                          with ``retry-after``
=========================  =============================================  ==============  ====================

A request is only sent again before a byte of the answer arrived (nothing
reached the client yet); after that, an error ends the message (an SSE
``error`` event when streaming). ``read_timeout`` bounds silence, not the
whole answer: a backend that keeps sending is never cut.

Sources: httpx's exception hierarchy (``httpx.TransportError`` subclasses);
the Messages API's error types (``timeout_error`` 504, ``overloaded_error``
529, ``api_error``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import BadGatewayError, MissiveError, OverloadedError, TimeoutError_
from .replicas import Replica, ReplicaPool

__all__ = ["Failover", "Classify", "RemoteTransport", "RemoteStream", "describe"]


@dataclass(frozen=True)
class Failover:
    """What :data:`Classify` returns for an error status that is the
    replica's, not the request's: send the request to another replica.

    Attributes:
        reason: why, for logs, status pages and the 529's message.
        down: True: take the replica out of rotation until a health probe
            passes (it is not serving: loading, crashed behind a proxy);
            False: skip it for this request only (it is busy: queue full).
    """

    reason: str
    down: bool = True
    #: try once more (a fresh connection, possibly the same replica) before
    #: counting it: a kept-alive connection the replica closed as it was
    #: reused looks like a dropped one.
    once_more: bool = False


#: The driver's reading of an error answer before the stream began:
#: ``(status, body, headers, replica_url) -> Failover | MissiveError``.
#: ``body`` is the whole response body (bytes, possibly empty).
Classify = Callable[[int, bytes, httpx.Headers, str], "Failover | MissiveError"]


def describe(exc: BaseException) -> str:
    """``"ConnectError: [Errno 111] Connection refused"``: an exception for a log line."""
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


#: Transport errors before the status line, after connecting, that mean the
#: replica is not serving (marked down, next replica), once a second try on a
#: fresh connection failed too. ``ReadTimeout`` is not among them.
_REPLICA_DOWN = (httpx.WriteError, httpx.WriteTimeout, httpx.ReadError, httpx.RemoteProtocolError,
                 httpx.NetworkError)


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
    ) -> None:
        self.name = name
        self.backend = backend
        self.classify = classify
        self.read_timeout = read_timeout
        self.retry_after = retry_after
        self.client = httpx.AsyncClient(
            headers=dict(headers or {}),
            timeout=httpx.Timeout(connect=connect_timeout, read=read_timeout, write=read_timeout,
                                  pool=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.pool = ReplicaPool(urls, client=self.client, name=name, health_path=health_path)

    @property
    def base_url(self) -> str:
        """The replica URLs, for messages (one URL when there is one replica)."""
        return ", ".join(r.url for r in self.pool.replicas)

    async def aclose(self) -> None:
        """Stop the health probes and close the connections (``Driver.aclose``)."""
        await self.pool.aclose()
        await self.client.aclose()

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
            return OverloadedError(f"{self.backend} at {replica.url} (model '{self.name}') is busy: "
                                   f"{failover.reason}", retry_after=retry_after)
        what = "every replica failed" if tried else "no healthy replica"
        failures = "; ".join(f"{r.url}: {r.last_error}" for r in self.pool.replicas if r.last_error)
        return OverloadedError(f"{self.backend} of model '{self.name}' is unavailable ({what}: "
                               f"{failures or 'unknown error'}); retry later",
                               retry_after=retry_after)

    # -- one attempt ------------------------------------------------------------

    async def _attempt(self, replica: Replica, method: str, path: str, json: Any, *,
                       stream: bool, classify: Classify | None) -> httpx.Response | Failover:
        """Send once to ``replica``: the 2xx response (body unread when
        ``stream``), or a :class:`Failover`.

        Raises:
            TimeoutError_: no status line within ``read_timeout``.
            MissiveError: ``classify``'s error for the status.
        """
        request = self.client.build_request(method, replica.url + path, json=json)
        try:
            response = await self.client.send(request, stream=stream)
        except httpx.PoolTimeout as exc:
            return Failover(describe(exc), down=False)
        except httpx.ReadTimeout:
            raise self.timeout_error(f"waiting for the answer to {path}") from None
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError) as exc:
            return Failover(describe(exc))
        except _REPLICA_DOWN as exc:
            return Failover(describe(exc), once_more=True)
        except httpx.HTTPError as exc:  # an unsupported URL, a protocol error of our own
            raise BadGatewayError(f"could not send to {self.backend} of model '{self.name}' at "
                                  f"{replica.url}: {describe(exc)}") from None
        if 200 <= response.status_code < 300:
            return response
        try:
            raw = await response.aread() if stream else response.content
        except httpx.HTTPError:
            raw = b""
        finally:
            if stream:
                await response.aclose()
        verdict = (classify or self.classify)(response.status_code, raw, response.headers, replica.url)
        if isinstance(verdict, MissiveError):
            raise verdict
        return verdict

    def _note(self, replica: Replica, failover: Failover, tried: set[Replica],
              skipped: list[tuple[Replica, Failover]], again: set[Replica]) -> bool:
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

    async def request(self, method: str, path: str, json: Any = None, *,
                      classify: Classify | None = None) -> httpx.Response:
        """``method path`` with a JSON body, to the least busy healthy
        replica, failing over by the policy: the first successful answer
        (2xx, body read). ``classify`` replaces the transport's for this
        call (a driver that needs the request's context to word an error).

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
                replica = self.pool.take(exclude=tried)
            except OverloadedError:
                raise self._none_left(tried, skipped) from None
            try:
                outcome = await self._attempt(replica, method, path, json, stream=False, classify=classify)
            finally:
                self.pool.release(replica)
            if isinstance(outcome, Failover):
                self._note(replica, outcome, tried, skipped, again)
                continue
            return outcome

    async def json(self, method: str, path: str, json: Any = None, *, classify: Classify | None = None) -> Any:
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

    def stream(self, method: str, path: str, json: Any = None, *,
               classify: Classify | None = None) -> RemoteStream:
        """Start a streaming request now, in a task (see :class:`RemoteStream`;
        ``classify`` as in :meth:`request`). Must be called from the event loop."""
        return RemoteStream(self, method, path, json, classify)


class RemoteStream:
    """One streaming request in flight.

    The request starts at once in a task and goes to the least busy healthy
    replica, failing over by the policy until a replica answers 2xx; the
    replica counts it as outstanding until :meth:`aclose`. The driver may
    start the message while the backend queues and prefills (some backends,
    llama-server among them, send their headers only with the first token):
    :meth:`wait_open` waits a bounded time for an early refusal.

    Use as ``async with transport.stream(...) as stream`` or call
    :meth:`aclose` in a ``finally``: closing (idempotent; also while the
    request is still being sent) closes the connection, which is how every
    supported backend learns to stop generating (vLLM's, llama-server's and
    Ollama's handlers cancel on disconnect).

    Attributes:
        replica: the replica answering (None until one did).
    """

    def __init__(self, transport: RemoteTransport, method: str, path: str, json: Any,
                 classify: Classify | None = None) -> None:
        self._transport = transport
        self._classify = classify
        self._method = method
        self._path = path
        self._json = json
        self._held: Replica | None = None
        self._closed = False
        self.replica: Replica | None = None
        self._task: asyncio.Task[httpx.Response] = asyncio.ensure_future(self._open())

    async def __aenter__(self) -> RemoteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._transport.pool.release(held)

    async def _open(self) -> httpx.Response:
        transport = self._transport
        tried: set[Replica] = set()
        again: set[Replica] = set()
        skipped: list[tuple[Replica, Failover]] = []
        while True:
            try:
                replica = transport.pool.take(exclude=tried)
            except OverloadedError:
                raise transport._none_left(tried, skipped) from None
            self._held = replica
            try:
                outcome = await transport._attempt(replica, self._method, self._path, self._json, stream=True,
                                                   classify=self._classify)
            except BaseException:
                self._release()
                raise
            if isinstance(outcome, Failover):
                self._release()
                transport._note(replica, outcome, tried, skipped, again)
                continue
            self.replica = replica
            return outcome

    async def wait_open(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the answer's
        status line.

        Returns:
            True if it came (a 2xx), False if the time ran out first.

        Raises:
            MissiveError: the request was refused, timed out or no replica
                could take it (see :meth:`RemoteTransport.request`).
        """
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        if not done:
            return False
        self._task.result()
        return True

    async def response(self) -> httpx.Response:
        """The accepted response (waiting for it); errors as :meth:`wait_open`."""
        return await asyncio.shield(self._task)

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines (without line ends), waiting for the answer first.

        Raises:
            TimeoutError_: ``read_timeout`` seconds without a byte (504).
            BadGatewayError: the connection was lost mid-answer (502).
            MissiveError: as :meth:`wait_open`.
        """
        response = await self.response()
        where = self.replica.url if self.replica is not None else None
        try:
            # httpx types aiter_lines as an AsyncIterator; it is an async generator (aclose).
            async with contextlib.aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
                async for line in lines:
                    yield line
        except httpx.ReadTimeout:
            raise self._transport.timeout_error("mid-answer") from None
        except httpx.TransportError as exc:
            raise self._transport.lost_error(exc, where) from None

    async def aclose(self) -> None:
        """Abort the request: cancel it while it is being sent, or close the
        response and its connection; release the replica. Idempotent; never
        swallows the caller's own cancellation (an unfinished open is left to
        finish in the background, and its late response closed)."""
        if self._closed:
            return
        self._closed = True
        task = self._task
        if not task.done():
            task.cancel()
            task.add_done_callback(self._abandoned)
            return
        if not task.cancelled() and task.exception() is None:
            await task.result().aclose()
        self._release()

    def _abandoned(self, task: asyncio.Task[httpx.Response]) -> None:
        """Done-callback of an aborted open: retrieve its outcome, close a
        late response, release the replica."""
        if not task.cancelled() and task.exception() is None:
            asyncio.ensure_future(task.result().aclose())
        self._release()
