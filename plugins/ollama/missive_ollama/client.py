"""Every HTTP call the driver makes to Ollama, and the translation of its errors.

One pooled :class:`httpx.AsyncClient` per configured model (one ``base_url``);
kept in this module so that serving several replicas later only changes this
file. Endpoints (Ollama ``docs/api.md``, ``server/routes.go``):

* ``GET /api/tags``: the local models (``{"models": [{"name": "qwen3:8b", ...}]}``);
* ``POST /api/show`` ``{"model"}``: ``model_info`` (``<arch>.context_length``)
  and ``capabilities`` (``["completion", "tools", "vision", "thinking"]``);
* ``POST /api/chat``: NDJSON, one JSON object per line; an ``{"error": "..."}``
  object is an error, before the first line as the HTTP status and body,
  after it as a line (``server/routes.go`` ``streamResponse``).

Errors become :mod:`missive.errors` classes; Ollama's own wording is kept in
the message, prefixed with where it came from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from missive.errors import (
    BadGatewayError,
    InvalidRequestError,
    MissiveError,
    OverloadedError,
    RateLimitError,
    TimeoutError_,
)

from .settings import OllamaSettings

__all__ = ["ContextOverflow", "OllamaClient", "ChatStream"]

#: Ollama's wordings for a prompt over ``num_ctx`` with ``truncate: false``:
#: the runners' ``errorInputTooLong`` ("the input length exceeds the context
#: length") and llama-server's ``exceed_context_size_error`` ("the request
#: exceeds the available context size") in Ollama's native chat mode.
_OVERFLOW_MARKERS = ("exceeds the context length", "exceeds the available context size", "exceed_context_size")


class ContextOverflow(BadGatewayError):
    """Ollama refused the prompt as longer than ``num_ctx``; the driver turns
    it into :class:`~missive.errors.PromptTooLongError` with its own counts."""


class OllamaClient:
    """HTTP to one Ollama server, for one model tag.

    Raises (every method): :class:`~missive.errors.OverloadedError` (529,
    ``retry-after``) when Ollama cannot be reached or is busy,
    :class:`~missive.errors.TimeoutError_` (504) after ``read_timeout`` of
    silence, :class:`~missive.errors.BadGatewayError` (502) for Ollama's
    failures, unknown models and malformed answers,
    :class:`~missive.errors.InvalidRequestError` (400) when Ollama rejects the
    request body, :class:`ContextOverflow` for a prompt over ``num_ctx``.
    """

    def __init__(self, settings: OllamaSettings) -> None:
        self.settings = settings
        self.base_url = settings.base_url.rstrip("/")
        timeout = httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- error translation -------------------------------------------------

    def error(self, status: int | None, message: str) -> MissiveError:
        """The Missive error for an Ollama error ``message`` (HTTP ``status``,
        None for an error line inside a stream)."""
        where = f"Ollama at {self.base_url}"
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

    def transport_error(self, exc: httpx.HTTPError, *, streaming: bool = False) -> MissiveError:
        """The Missive error for an httpx failure."""
        where = f"Ollama at {self.base_url}"
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return OverloadedError(
                f"{where} is unreachable ({type(exc).__name__}: {exc}); retry later",
                retry_after=self.settings.retry_after,
            )
        if isinstance(exc, httpx.TimeoutException):
            return TimeoutError_(f"{where} sent nothing for {self.settings.read_timeout:g} s")
        what = "the connection was lost mid-answer" if streaming else "the request failed"
        return BadGatewayError(f"{where}: {what} ({type(exc).__name__}: {exc})")

    def _error_body(self, status: int, raw: bytes) -> MissiveError:
        try:
            data = json.loads(raw)
            message = data["error"] if isinstance(data, dict) and isinstance(data.get("error"), str) else None
        except ValueError:
            message = None
        if message is None:
            message = raw.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
        return self.error(status, message)

    # -- endpoints ---------------------------------------------------------

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            resp = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self.transport_error(exc) from exc
        if resp.status_code != 200:
            raise self._error_body(resp.status_code, resp.content)
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BadGatewayError(f"Ollama at {self.base_url} answered {path} with something other than a JSON object")
        return data

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
    while Ollama loads the model and evaluates the prompt. :meth:`aclose`
    (also on cancellation) closes the connection: Ollama cancels the
    generation when its request context ends (``c.Request.Context()``).
    """

    def __init__(self, client: OllamaClient, body: dict[str, Any]) -> None:
        self._client = client
        request = client._http.build_request("POST", "/api/chat", json=body)
        self._task: asyncio.Task[httpx.Response] = asyncio.ensure_future(self._open(request))

    async def _open(self, request: httpx.Request) -> httpx.Response:
        client = self._client
        try:
            resp = await client._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise client.transport_error(exc) from exc
        if resp.status_code != 200:
            try:
                raw = await resp.aread()
            except httpx.HTTPError as exc:
                raise client.transport_error(exc) from exc
            finally:
                await resp.aclose()
            raise client._error_body(resp.status_code, raw)
        return resp

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
        try:
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if not isinstance(obj, dict):
                    raise BadGatewayError(f"Ollama at {client.base_url} sent a malformed stream line: {line[:200]!r}")
                if "error" in obj:
                    raise client.error(None, str(obj["error"]))
                yield obj
        except httpx.HTTPError as exc:
            raise client.transport_error(exc, streaming=True) from exc

    async def aclose(self) -> None:
        """Abort the request (idempotent). Never swallows the caller's own cancellation."""
        task = self._task
        if not task.done():
            task.cancel()  # httpx closes the connection it was opening or reading
            task.add_done_callback(_discard)
            return
        if task.cancelled() or task.exception() is not None:
            return
        await task.result().aclose()


def _discard(task: asyncio.Task[httpx.Response]) -> None:
    """Done-callback of an abandoned request: retrieve its outcome, close a late response."""
    if task.cancelled() or task.exception() is not None:
        return
    asyncio.ensure_future(task.result().aclose())
