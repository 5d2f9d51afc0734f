"""A streaming request to a remote backend (:class:`RemoteStream`): opened
in the background on the replica the policy picks, read line by line past
the backend's end line so its connection goes back to the pool, closed by
dropping the connection (how every supported backend learns to stop). The
failover and timeout policy is :mod:`missive.remote.transport`'s."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp
import anyio

from ..protocol.errors import BadGatewayError, OverloadedError, TimeoutError_
from ..routing.prefix import RouteKey
from .answers import END_GRACE, Answer, Classify, Failover, sse_done
from .replicas import Replica, ReplicaPool

__all__ = ["RemoteStream", "Transport"]


class Transport(Protocol):
    """What a stream needs of its :class:`~missive.remote.transport.RemoteTransport`
    (which builds it): the replicas, one attempt, the failover count, the errors."""

    pool: ReplicaPool

    def timeout_error(self, what: str) -> TimeoutError_: ...

    def lost_error(self, exc: BaseException, where: str | None = None) -> BadGatewayError: ...

    def _none_left(self, tried: set[Replica], skipped: list[tuple[Replica, Failover]]) -> OverloadedError: ...

    async def _attempt(
        self, replica: Replica, method: str, path: str, json: Any, *, stream: bool, classify: Classify | None
    ) -> aiohttp.ClientResponse | Answer | Failover: ...

    def _note(
        self,
        replica: Replica,
        failover: Failover,
        tried: set[Replica],
        skipped: list[tuple[Replica, Failover]],
        again: set[Replica],
    ) -> bool: ...


class RemoteStream:
    """One streaming request in flight.

    The request starts at once in a task and goes to the healthy replica the
    replica policy picks (the least busy, without a route key), failing over
    by the policy until a replica answers 2xx; the replica counts it as
    outstanding until :meth:`aclose`. The driver may start the message while
    the backend queues and prefills (some backends, llama-server among them,
    send their headers only with the first token): :meth:`wait_open` waits a
    bounded time for an early refusal.

    Use as ``async with transport.stream(...) as stream`` or call
    :meth:`aclose` in a ``finally``: closing (idempotent; also while the
    request is still being sent) closes the connection, which is how every
    supported backend learns to stop generating (vLLM's, llama-server's and
    Ollama's handlers cancel on disconnect).

    Attributes:
        replica: the replica answering (None until one did).
    """

    def __init__(
        self,
        transport: Transport,
        method: str,
        path: str,
        json: Any,
        classify: Classify | None = None,
        route: RouteKey | None = None,
    ) -> None:
        self._transport = transport
        self._route = route
        self._classify = classify
        self._method = method
        self._path = path
        self._json = json
        self._held: Replica | None = None
        self._closed = False
        self.replica: Replica | None = None
        #: :meth:`sse_data` met ``data: [DONE]`` (the answer ended cleanly).
        self.sse_ended = False
        self._task: asyncio.Task[aiohttp.ClientResponse] = asyncio.ensure_future(self._open())

    async def __aenter__(self) -> RemoteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._transport.pool.release(held)

    async def _open(self) -> aiohttp.ClientResponse:
        transport = self._transport
        tried: set[Replica] = set()
        again: set[Replica] = set()
        skipped: list[tuple[Replica, Failover]] = []
        while True:
            try:
                replica = transport.pool.take(exclude=tried, route=self._route)
            except OverloadedError:
                raise transport._none_left(tried, skipped) from None
            self._held = replica
            try:
                outcome = await transport._attempt(
                    replica, self._method, self._path, self._json, stream=True, classify=self._classify
                )
            except BaseException:
                self._release()
                raise
            if isinstance(outcome, Failover):
                self._release()
                transport._note(replica, outcome, tried, skipped, again)
                continue
            assert isinstance(outcome, aiohttp.ClientResponse)
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

    async def response(self) -> aiohttp.ClientResponse:
        """The accepted response (waiting for it); errors as :meth:`wait_open`."""
        return await asyncio.shield(self._task)

    async def lines(self, end: Callable[[str], bool] | None = None) -> AsyncGenerator[str, None]:
        """The body's lines (without line ends), waiting for the answer first.

        ``end``: the backend's own end-of-answer line (:func:`sse_done` for
        ``data: [DONE]``). After yielding it, the rest of the body is read
        and dropped (at most :data:`END_GRACE` seconds) and the iteration
        stops: a response read to its end leaves its connection in the pool
        for the next request, while one closed before its end (the final
        ``0`` chunk unread) closes the connection, and the next request pays
        a new TCP connection. The caller must therefore go on iterating after
        the end line (not ``break``).

        Raises:
            TimeoutError_: ``read_timeout`` seconds without a byte (504).
            BadGatewayError: the connection was lost mid-answer (502).
            MissiveError: as :meth:`wait_open`.
        """
        response = await self.response()
        where = self.replica.url if self.replica is not None else None
        reader = _LineReader(response.content)
        try:
            while (batch := await reader.read()) is not None:
                for line in batch:
                    yield line
                    if end is not None and end(line):
                        with anyio.move_on_after(END_GRACE):
                            while await reader.read() is not None:
                                pass  # nothing should follow; a body that never ends is closed
                        return
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError):
            raise self._transport.timeout_error("mid-answer") from None
        except aiohttp.ClientError as exc:
            raise self._transport.lost_error(exc, where) from None

    async def sse_data(self) -> AsyncIterator[str]:
        """The ``data:`` payloads of an OpenAI-style SSE body, stripped, in
        order; blank separators, comments (``: ping``) and other fields are
        skipped. ``data: [DONE]`` is not yielded: it sets :attr:`sse_ended`
        and ends the body (read to its end, as :meth:`lines` with
        :func:`sse_done`). Raises as :meth:`lines`."""
        async with contextlib.aclosing(self.lines(end=sse_done)) as lines:
            async for line in lines:
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    self.sse_ended = True  # lines() reads the body's end: go on, the connection is reused
                    continue
                yield data

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
            task.result().close()  # back to the pool when read to its end, else the connection is closed
        self._release()

    def _abandoned(self, task: asyncio.Task[aiohttp.ClientResponse]) -> None:
        """Done-callback of an aborted open: retrieve its outcome, close a
        late response, release the replica."""
        if not task.cancelled() and task.exception() is None:
            task.result().close()
        self._release()


class _LineReader:
    """The lines of a response body, batch by batch, without their ends
    (``\\n``, ``\\r\\n`` or ``\\r``, as SSE and NDJSON allow), decoded as UTF-8
    (undecodable bytes replaced); a last line without an end is given too. No
    line length limit (a tool call's arguments may arrive as one long line).
    A plain object rather than an async generator, so that nothing is left
    for the garbage collector to finalize when the reader is abandoned.

    When the connection is lost, the lines that arrived before the loss come
    first, then the error: aiohttp's reads raise a stored error before
    handing out what is still buffered (``StreamReader.readany`` checks the
    error first), so the end of an answer whose backend died right after
    sending it would be lost; the buffer is read with its private
    ``_read_nowait`` (when it is there).
    """

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content
        self._rest = b""
        self._error: BaseException | None = None
        self._done = False

    async def read(self) -> list[str] | None:
        """The next lines (possibly none), or None at the end of the body.

        Raises:
            aiohttp.ClientError: the connection was lost; asyncio.TimeoutError:
                ``sock_read`` seconds without a byte.
        """
        if self._error is not None:
            raise self._error
        if self._done:
            return None
        try:
            chunk = await self._content.readany()
        except aiohttp.ClientError as exc:
            salvage = getattr(self._content, "_read_nowait", None)
            chunk = salvage(-1) if salvage is not None else b""
            if not chunk:
                raise
            self._error = exc
        if not chunk:
            self._done = True
            rest, self._rest = self._rest, b""
            if rest.endswith(b"\r"):  # a line ended by a lone \r
                return [rest[:-1].decode("utf-8", "replace")]
            return [rest.decode("utf-8", "replace")] if rest else []
        return self._split(chunk)

    def _split(self, chunk: bytes) -> list[str]:
        data = self._rest + chunk if self._rest else chunk
        cr = False
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
            cr = data.endswith(b"\r")  # maybe the first half of a \r\n still to come
            if cr:
                data = data[:-1]
            data = data.replace(b"\r", b"\n")
        parts = data.split(b"\n")
        self._rest = parts.pop() + (b"\r" if cr else b"")
        return [part.decode("utf-8", "replace") for part in parts]
