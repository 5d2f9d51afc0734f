"""Every HTTP call the driver makes to Ollama, and the translation of its errors.

One :class:`missive.remote.transport.RemoteTransport` per configured model over its
base URLs (``base_url``, or several ``base_urls``: replicas serving the same
tags), with the failover and timeout policy every remote driver shares: each
call goes to the healthy replica with the fewest requests in flight; before
any answer byte, a replica that cannot be reached (connection refused, reset
or timed out) is marked unhealthy and the call goes to the next one. What is
Ollama's own is the reading of its errors (:meth:`OllamaClient.classify`): a
503 ("server busy": its queue is full, ``OLLAMA_MAX_QUEUE``) skips the
replica for this call only, without marking it down; other errors are
translated by :meth:`OllamaClient.error`. With no replica left the call is a
529 with ``settings.retry_after``. Unhealthy replicas are probed with ``GET
/api/version`` until they answer (the pool's backoff).

Endpoints (Ollama ``docs/api.md``, ``server/routes.go``):

* ``GET /api/tags``: the local models (``{"models": [{"name": "qwen3:8b", ...}]}``);
* ``POST /api/show`` ``{"model"}``: ``model_info`` (``<arch>.context_length``)
  and ``capabilities`` (``["completion", "tools", "vision", "thinking"]``);
* ``POST /api/chat``: NDJSON, one JSON object per line; an ``{"error": "..."}``
  object is an error, before the first line as the HTTP status and body,
  after it as a line (``server/routes.go`` ``streamResponse``);
* ``GET /api/version``: the health probe.

Errors become :mod:`missive.protocol.errors` classes; Ollama's own wording is kept in
the message, prefixed with where it came from.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from missive.api import (
    BadGatewayError,
    Failover,
    InvalidRequestError,
    MissiveError,
    OverloadedError,
    RateLimitError,
    RemoteStream,
    RemoteTransport,
    ReplicaPool,
    RouteKey,
    json_loads,
    policy_for,
)

from .settings import OllamaSettings

__all__ = ["ContextOverflow", "OllamaClient", "ChatStream", "HEALTH_PATH"]

#: Ollama's wordings for a prompt over ``num_ctx`` with ``truncate: false``:
#: the runners' ``errorInputTooLong`` ("the input length exceeds the context
#: length") and llama-server's ``exceed_context_size_error`` ("the request
#: exceeds the available context size") in Ollama's native chat mode.
_OVERFLOW_MARKERS = (
    "exceeds the context length",
    "exceeds the available context size",
    "exceed_context_size",
)


class ContextOverflow(BadGatewayError):
    """Ollama refused the prompt as longer than ``num_ctx``; the driver turns
    it into :class:`~missive.protocol.errors.PromptTooLongError` with its own counts."""


#: Path probed on an unhealthy replica (``GET /api/version``, docs/api.md "Version").
HEALTH_PATH = "/api/version"


class OllamaClient:
    """HTTP to the Ollama replicas of one model tag.

    Raises (every method): :class:`~missive.protocol.errors.OverloadedError` (529,
    ``retry-after``) when no replica can be reached or every one is busy,
    :class:`~missive.protocol.errors.TimeoutError_` (504) after ``read_timeout`` of
    silence, :class:`~missive.protocol.errors.BadGatewayError` (502) for Ollama's
    failures, unknown models, malformed answers and a connection lost
    mid-answer, :class:`~missive.protocol.errors.InvalidRequestError` (400) when
    Ollama rejects the request body, :class:`ContextOverflow` for a prompt
    over ``num_ctx``.
    """

    def __init__(self, settings: OllamaSettings) -> None:
        self.settings = settings
        self.urls = settings.urls
        self.transport = RemoteTransport(
            self.urls,
            name=settings.tag,
            backend="Ollama",
            classify=self.classify,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            health_path=HEALTH_PATH,
            retry_after=settings.retry_after,
            policy=policy_for(settings),
        )

    @property
    def pool(self) -> ReplicaPool:
        """The replicas (for ``Driver.replica_pool``)."""
        return self.transport.pool

    @property
    def base_url(self) -> str:
        """The replica URLs, for messages (one URL when there is one replica)."""
        return ", ".join(self.urls)

    async def aclose(self) -> None:
        await self.transport.aclose()

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
            return RateLimitError(
                f"{where} is rate limiting: {message}", retry_after=self.settings.retry_after
            )
        if status == 503:
            return OverloadedError(f"{where} is busy: {message}", retry_after=self.settings.retry_after)
        if status == 400:
            return InvalidRequestError(f"{where} rejected the request: {message}")
        return BadGatewayError(f"{where} failed: {message}")

    @staticmethod
    def _message(status: int, raw: bytes) -> str:
        try:
            data = json.loads(raw)
            message = data["error"] if isinstance(data, dict) and isinstance(data.get("error"), str) else None
        except ValueError:
            message = None
        if message is None:
            message = raw.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
        return message

    def classify(
        self, status: int, raw: bytes, headers: Mapping[str, str], url: str
    ) -> Failover | MissiveError:
        """Ollama's error answer before the stream began
        (:data:`missive.remote.transport.Classify`): a 503 skips the replica for
        this call (busy, not down); anything else is :meth:`error`."""
        message = self._message(status, raw)
        if status == 503:
            return Failover(message, down=False)
        return self.error(status, message, url)

    # -- endpoints ---------------------------------------------------------

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.transport.request(method, path, body)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BadGatewayError(
                f"Ollama at {response.url} answered {path} with something other than a JSON object"
            )
        return data

    async def tags(self) -> dict[str, Any]:
        """``GET /api/tags``: ``{"models": [{"name", "model", "details", ...}]}``."""
        return await self._json("GET", "/api/tags")

    async def show(self, model: str) -> dict[str, Any]:
        """``POST /api/show``: ``model_info``, ``capabilities``, ``template``, ``details``..."""
        return await self._json("POST", "/api/show", {"model": model})

    def chat(self, body: dict[str, Any], route: RouteKey | None = None) -> ChatStream:
        """Start ``POST /api/chat`` (``body["stream"]`` must be true) in the
        background, on the replica the replica policy picks for ``route``."""
        return ChatStream(self, self.transport.stream("POST", "/api/chat", body, route=route))


def _done_line(line: str) -> bool:
    """Whether ``line`` is Ollama's last object (``"done": true`` at its top
    level; a tool call's arguments may hold a ``done`` key too):
    :meth:`RemoteStream.lines` then reads the body's end, and the connection
    serves the next request."""
    if '"done"' not in line:
        return False
    try:
        obj = json_loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("done") is True


class ChatStream:
    """One ``/api/chat`` request in flight: a
    :class:`~missive.remote.transport.RemoteStream` read as Ollama's NDJSON.

    The request starts at once, so the driver can start the message while
    Ollama loads the model and evaluates the prompt. :meth:`aclose` (also on
    cancellation) closes the connection: Ollama cancels the generation when
    its request context ends (``c.Request.Context()``).
    """

    def __init__(self, client: OllamaClient, stream: RemoteStream) -> None:
        self._client = client
        self._stream = stream

    @property
    def replica(self) -> Any:
        """The replica answering (None until one did)."""
        return self._stream.replica

    async def wait_open(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for Ollama's response
        headers. True if they came; raises the translated error if the request failed."""
        return await self._stream.wait_open(timeout)

    async def lines(self) -> AsyncIterator[dict[str, Any]]:
        """The stream's JSON objects, in order; ``{"error": ...}`` lines raised.

        Raises:
            BadGatewayError: a line that is not a JSON object; connection lost.
            TimeoutError_: ``read_timeout`` without a byte.
        """
        async with contextlib.aclosing(self._stream.lines(end=_done_line)) as lines:
            async for line in lines:
                if not line.strip():
                    continue
                where = self.replica.url if self.replica is not None else None
                try:
                    obj = json_loads(line)
                except ValueError:
                    obj = None
                if not isinstance(obj, dict):
                    raise BadGatewayError(f"Ollama at {where} sent a malformed stream line: {line[:200]!r}")
                if "error" in obj:
                    raise self._client.error(None, str(obj["error"]), where)
                yield obj

    async def aclose(self) -> None:
        """Abort the request (idempotent) and release the replica. Never
        swallows the caller's own cancellation."""
        await self._stream.aclose()
