"""Every HTTP call the driver makes to Ollama, and the translation of its errors.

One pooled :class:`httpx.AsyncClient` per configured model, and a
:class:`missive.replicas.ReplicaPool` over its base URLs (``base_url``, or
several ``base_urls``: replicas serving the same tags). Each call goes to the
healthy replica with the fewest requests in flight; before any answer byte,
a replica that cannot be reached (connection refused, reset or timed out) is
marked unhealthy and the call goes to the next one, and a replica answering
503 ("server busy": its queue is full) is skipped for this call only. With
no replica left the call is a 529 with ``retry-after``. Unhealthy replicas are
probed with ``GET /api/version`` until they answer (the pool's backoff).

Endpoints (Ollama ``docs/api.md``, ``server/routes.go``):

* ``GET /api/tags``: the local models (``{"models": [{"name": "qwen3:8b", ...}]}``);
* ``POST /api/show`` ``{"model"}``: ``model_info`` (``<arch>.context_length``)
  and ``capabilities`` (``["completion", "tools", "vision", "thinking"]``);
* ``POST /api/chat``: NDJSON, one JSON object per line; an ``{"error": "..."}``
  object is an error, before the first line as the HTTP status and body,
  after it as a line (``server/routes.go`` ``streamResponse``);
* ``GET /api/version``: the health probe.

Errors become :mod:`missive.errors` classes; Ollama's own wording is kept in
the message, prefixed with where it came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from missive.api import (
    BadGatewayError,
    InvalidRequestError,
    MissiveError,
    OverloadedError,
    RateLimitError,
    Replica,
    ReplicaPool,
    TimeoutError_,
)

from .settings import OllamaSettings

__all__ = ["ContextOverflow", "OllamaClient", "ChatStream", "HEALTH_PATH"]

#: Ollama's wordings for a prompt over ``num_ctx`` with ``truncate: false``:
#: the runners' ``errorInputTooLong`` ("the input length exceeds the context
#: length") and llama-server's ``exceed_context_size_error`` ("the request
#: exceeds the available context size") in Ollama's native chat mode.
_OVERFLOW_MARKERS = ("exceeds the context length", "exceeds the available context size", "exceed_context_size")


class ContextOverflow(BadGatewayError):
    """Ollama refused the prompt as longer than ``num_ctx``; the driver turns
    it into :class:`~missive.errors.PromptTooLongError` with its own counts."""


#: Path probed on an unhealthy replica (``GET /api/version``, docs/api.md "Version").
HEALTH_PATH = "/api/version"


class _Skip(Exception):
    """A replica that cannot take this call: try the next one."""

    def __init__(self, replica: Replica, reason: str, *, down: bool) -> None:
        super().__init__(reason)
        self.replica = replica
        self.reason = reason
        self.down = down


class OllamaClient:
    """HTTP to the Ollama replicas of one model tag.

    Raises (every method): :class:`~missive.errors.OverloadedError` (529,
    ``retry-after``) when no replica can be reached or every one is busy,
    :class:`~missive.errors.TimeoutError_` (504) after ``read_timeout`` of
    silence, :class:`~missive.errors.BadGatewayError` (502) for Ollama's
    failures, unknown models and malformed answers,
    :class:`~missive.errors.InvalidRequestError` (400) when Ollama rejects the
    request body, :class:`ContextOverflow` for a prompt over ``num_ctx``.
    """

    def __init__(self, settings: OllamaSettings) -> None:
        self.settings = settings
        self.urls = settings.urls
        timeout = httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)
        self._http = httpx.AsyncClient(timeout=timeout)
        self.pool = ReplicaPool(self.urls, client=self._http, name=settings.tag, health_path=HEALTH_PATH)

    @property
    def base_url(self) -> str:
        """The replica URLs, for messages (one URL when there is one replica)."""
        return ", ".join(self.urls)

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self._http.aclose()

    # -- error translation -------------------------------------------------

    def error(self, status: int | None, message: str, where: str | None = None) -> MissiveError:
        """The Missive error for an Ollama error ``message`` (HTTP ``status``,
        None for an error line inside a stream) from the replica at ``where``."""
        where = f"Ollama at {where or self.base_url}"
        lowered = message.lower()
        if any(marker in lowered for marker in _OVERFLOW_MARKERS):
            return ContextOverflow(f"{where}: {message}")
        if status == 404 or ("model" in lowered and "not found" in lowered):
            # The client's model id was valid for Missive; the server lacks the
            # configured tag: a server-side configuration problem, not a 404.
            tag = self.settings.tag
            return BadGatewayError(
                f"{where} has no model '{tag}' ({message}); pull it with `ollama pull {tag}` "
                "or fix settings.model"
            )
        if status == 429:
            return RateLimitError(f"{where} is rate limiting: {message}", retry_after=self.settings.retry_after)
        if status == 503:
            return OverloadedError(f"{where} is busy: {message}", retry_after=self.settings.retry_after)
        if status == 400:
            return InvalidRequestError(f"{where} rejected the request: {message}")
        return BadGatewayError(f"{where} failed: {message}")

    def transport_error(self, exc: httpx.HTTPError, *, streaming: bool = False, where: str | None = None
                        ) -> MissiveError:
        """The Missive error for an httpx failure (of the replica at ``where``)."""
        where = f"Ollama at {where or self.base_url}"
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return OverloadedError(
                f"{where} is unreachable ({type(exc).__name__}: {exc}); retry later",
                retry_after=self.settings.retry_after,
            )
        if isinstance(exc, httpx.TimeoutException):
            return TimeoutError_(f"{where} sent nothing for {self.settings.read_timeout:g} s")
        what = "the connection was lost mid-answer" if streaming else "the request failed"
        return BadGatewayError(f"{where}: {what} ({type(exc).__name__}: {exc})")

    def _error_body(self, status: int, raw: bytes, where: str | None = None) -> MissiveError:
        try:
            data = json.loads(raw)
            message = data["error"] if isinstance(data, dict) and isinstance(data.get("error"), str) else None
        except ValueError:
            message = None
        if message is None:
            message = raw.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
        return self.error(status, message, where)

    # -- replicas ------------------------------------------------------------

    def _before_first_byte(self, replica: Replica, exc: httpx.HTTPError) -> _Skip | MissiveError:
        """A failure before the answer began: skip a replica that cannot be
        reached or dropped the connection (marked unhealthy); a read timeout
        is the 504 (the replica is up, only slow)."""
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
            return self.transport_error(exc, where=replica.url)
        if isinstance(exc, httpx.TransportError):
            return _Skip(replica, f"{type(exc).__name__}: {exc}".rstrip(": "), down=True)
        return self.transport_error(exc, where=replica.url)

    def _skipped(self, skip: _Skip, tried: set[Replica], last: list[_Skip]) -> None:
        tried.add(skip.replica)
        last.append(skip)
        if skip.down:
            self.pool.mark_failed(skip.replica, skip.reason)

    def _none_left(self, last: list[_Skip]) -> OverloadedError:
        """The 529 when no replica is left, in Ollama's words."""
        if last and not last[-1].down:
            return OverloadedError(f"Ollama at {last[-1].replica.url} is busy: {last[-1].reason}",
                                   retry_after=self.settings.retry_after)
        reasons = "; ".join(f"{r.url}: {r.last_error}" for r in self.pool.replicas if r.last_error)
        return OverloadedError(f"Ollama at {self.base_url} is unreachable ({reasons or 'no healthy replica'}); "
                               "retry later", retry_after=self.settings.retry_after)

    # -- endpoints ---------------------------------------------------------

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        tried: set[Replica] = set()
        last: list[_Skip] = []
        while True:
            try:
                hold = self.pool.acquire(exclude=tried)
                replica = await hold.__aenter__()
            except OverloadedError:
                raise self._none_left(last) from None
            try:
                try:
                    resp = await self._http.request(method, replica.url + path, json=body)
                except httpx.HTTPError as exc:
                    failure = self._before_first_byte(replica, exc)
                    if isinstance(failure, _Skip):
                        self._skipped(failure, tried, last)
                        continue
                    raise failure from exc
                if resp.status_code == 503:
                    self._skipped(_Skip(replica, self._error_body(503, resp.content).message, down=False),
                                  tried, last)
                    continue
                if resp.status_code != 200:
                    raise self._error_body(resp.status_code, resp.content, replica.url)
                try:
                    data = resp.json()
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    raise BadGatewayError(
                        f"Ollama at {replica.url} answered {path} with something other than a JSON object"
                    )
                return data
            finally:
                await hold.__aexit__(None, None, None)

    async def tags(self) -> dict[str, Any]:
        """``GET /api/tags``: ``{"models": [{"name", "model", "details", ...}]}``."""
        return await self._json("GET", "/api/tags")

    async def show(self, model: str) -> dict[str, Any]:
        """``POST /api/show``: ``model_info``, ``capabilities``, ``template``, ``details``..."""
        return await self._json("POST", "/api/show", {"model": model})

    def chat(self, body: dict[str, Any]) -> ChatStream:
        """Start ``POST /api/chat`` (``body["stream"]`` must be true) in the background."""
        return ChatStream(self, body)


class ChatStream:
    """One ``/api/chat`` request in flight.

    The request starts at once in a task, so the driver can start the message
    while Ollama loads the model and evaluates the prompt; it goes to the
    least busy healthy replica, and to the next one if that replica cannot be
    reached or is busy before answering. The replica counts the request as
    outstanding until :meth:`aclose`, which (also on cancellation) closes the
    connection: Ollama cancels the generation when its request context ends
    (``c.Request.Context()``).
    """

    def __init__(self, client: OllamaClient, body: dict[str, Any]) -> None:
        self._client = client
        self._body = body
        self._hold: contextlib.AbstractAsyncContextManager[Replica] | None = None
        self.replica: Replica | None = None
        self._task: asyncio.Task[httpx.Response] = asyncio.ensure_future(self._open())

    async def _release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            await hold.__aexit__(None, None, None)

    async def _open(self) -> httpx.Response:
        client = self._client
        tried: set[Replica] = set()
        last: list[_Skip] = []
        while True:
            hold = client.pool.acquire(exclude=tried)
            try:
                replica = await hold.__aenter__()
            except OverloadedError:
                raise client._none_left(last) from None
            self._hold, self.replica = hold, replica
            try:
                request = client._http.build_request("POST", replica.url + "/api/chat", json=self._body)
                try:
                    resp = await client._http.send(request, stream=True)
                except httpx.HTTPError as exc:
                    failure = client._before_first_byte(replica, exc)
                    if isinstance(failure, _Skip):
                        client._skipped(failure, tried, last)
                        await self._release()
                        continue
                    raise failure from exc
                if resp.status_code == 200:
                    return resp
                try:
                    raw = await resp.aread()
                except httpx.HTTPError as exc:
                    raise client.transport_error(exc, where=replica.url) from exc
                finally:
                    await resp.aclose()
                if resp.status_code == 503:
                    client._skipped(_Skip(replica, client._error_body(503, raw).message, down=False), tried, last)
                    await self._release()
                    continue
                raise client._error_body(resp.status_code, raw, replica.url)
            except BaseException:
                await self._release()
                raise

    async def wait_open(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for Ollama's response
        headers. True if they came; raises the translated error if the request failed."""
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        if not done:
            return False
        self._task.result()
        return True

    async def lines(self) -> AsyncIterator[dict[str, Any]]:
        """The stream's JSON objects, in order; ``{"error": ...}`` lines raised.

        Raises:
            BadGatewayError: a line that is not a JSON object; connection lost.
            TimeoutError_: ``read_timeout`` without a byte.
        """
        resp = await self._task
        client = self._client
        where = self.replica.url if self.replica is not None else None
        try:
            async with contextlib.aclosing(resp.aiter_lines()) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        obj = None
                    if not isinstance(obj, dict):
                        raise BadGatewayError(f"Ollama at {where} sent a malformed stream line: {line[:200]!r}")
                    if "error" in obj:
                        raise client.error(None, str(obj["error"]), where)
                    yield obj
        except httpx.HTTPError as exc:
            raise client.transport_error(exc, streaming=True, where=where) from exc

    async def aclose(self) -> None:
        """Abort the request (idempotent) and release the replica. Never
        swallows the caller's own cancellation."""
        task = self._task
        if not task.done():
            task.cancel()  # httpx closes the connection it was opening or reading
            task.add_done_callback(self._abandoned)
            return
        if not task.cancelled() and task.exception() is None:
            await task.result().aclose()
        await self._release()

    def _abandoned(self, task: asyncio.Task[httpx.Response]) -> None:
        """Done-callback of an abandoned request: retrieve its outcome, close a
        late response, release the replica."""
        if not task.cancelled() and task.exception() is None:
            asyncio.ensure_future(task.result().aclose())
        asyncio.ensure_future(self._release())
