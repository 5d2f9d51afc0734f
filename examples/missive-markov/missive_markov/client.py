"""HTTP to ``markov-backend`` (:mod:`missive_markov.backend`), its failures
turned into Missive's errors, which the core sends as the Anthropic error
envelope:

* unreachable (connection refused, connect timeout): 529 ``overloaded_error``
  with ``retry-after``; busy (its 503): the same;
* silent for ``read_timeout`` seconds: 504 ``timeout_error``;
* its 400 ``context_overflow``: the 400 ``prompt is too long: N tokens > M
  maximum``; any other 400: 400 ``invalid_request_error``;
* any other failure, a malformed line, a connection lost mid-answer: 502
  ``api_error`` naming the backend.
"""

from __future__ import annotations

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
    PromptTooLongError,
    TimeoutError_,
)

from .settings import MarkovSettings

__all__ = ["MarkovClient"]


class MarkovClient:
    """One pooled connection to the backend of a model (``settings.base_url``).

    Every method raises the :mod:`missive.protocol.errors` listed in this module's
    docstring.
    """

    def __init__(self, settings: MarkovSettings) -> None:
        self.settings = settings
        timeout = httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)
        self._http = httpx.AsyncClient(base_url=settings.base_url, timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status", "context_window", "vocabulary"}``."""
        return await self._json("GET", "/health")

    async def tokenize(self, text: str) -> int:
        """Tokens of ``text`` as the backend counts them."""
        return int((await self._json("POST", "/tokenize", {"text": text}))["tokens"])

    @contextlib.asynccontextmanager
    async def generate(self, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """``POST /generate``, open once the backend has accepted it (its
        refusals raised here); yields the stream's JSON lines. Leaving the
        context closes the connection, which stops the backend."""
        try:
            async with self._http.stream("POST", "/generate", json=body) as response:
                if response.status_code != 200:
                    raise self._refusal(response.status_code, await response.aread())
                yield self._lines(response)
        except httpx.HTTPError as exc:  # only before the stream: _lines maps its own
            raise self._transport(exc) from exc

    async def _lines(self, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        try:
            async with contextlib.aclosing(response.aiter_lines()) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        obj = None
                    if not isinstance(obj, dict):
                        raise BadGatewayError(f"{self._where} sent a malformed line: {line[:200]!r}")
                    yield obj
        except httpx.HTTPError as exc:
            raise self._transport(exc, streaming=True) from exc

    @property
    def _where(self) -> str:
        return f"markov backend at {self.settings.base_url}"

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self._transport(exc) from exc
        if response.status_code != 200:
            raise self._refusal(response.status_code, response.content)
        try:
            return dict(response.json())
        except (ValueError, TypeError):
            raise BadGatewayError(
                f"{self._where} answered {path} with something other than a JSON object"
            ) from None

    def _refusal(self, status: int, raw: bytes) -> MissiveError:
        try:
            error = json.loads(raw)["error"]
            kind, message = str(error["type"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            error, kind, message = {}, "", raw.decode("utf-8", "replace")[:300] or f"HTTP {status}"
        if status == 400 and kind == "context_overflow":
            return PromptTooLongError(int(error["prompt_tokens"]), int(error["context_window"]) - 1)
        if status == 400:
            return InvalidRequestError(f"{self._where} rejected the request: {message}")
        if status == 503:
            return OverloadedError(f"{self._where} is busy: {message}", retry_after=self.settings.retry_after)
        return BadGatewayError(f"{self._where} answered {status}: {message}")

    def _transport(self, exc: httpx.HTTPError, *, streaming: bool = False) -> MissiveError:
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return OverloadedError(
                f"{self._where} is unreachable ({type(exc).__name__}); retry later",
                retry_after=self.settings.retry_after,
            )
        if isinstance(exc, httpx.TimeoutException):
            return TimeoutError_(f"{self._where} sent nothing for {self.settings.read_timeout:g} s")
        what = "the connection was lost mid-answer" if streaming else "the request failed"
        return BadGatewayError(f"{self._where}: {what} ({type(exc).__name__})")
