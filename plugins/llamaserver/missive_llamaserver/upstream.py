"""HTTP to the llama-server replicas of one model: JSON calls and the streaming chat request.

Both go to the least busy healthy replica of a :class:`missive.replicas.ReplicaPool`
and fail over (before any answer byte) when the replica is not serving
(:func:`.errors.is_replica_failure`: connection refused or reset, a 503
``Loading model``, a proxy's 502/504); with no replica left the pool raises
the 529 ``overloaded_error`` with ``retry-after``. llama-server's other error
answers are translated by :func:`.errors.translate_error`.

:class:`ChatStream` starts ``POST /v1/chat/completions`` in a background task
at once, because llama-server sends its response headers only with the
first result of the generation (``handle_completions_impl``: "in streaming
mode, the first error must be treated as non-stream response", so it waits
for the first token, or the first ``prompt_progress`` event), that is after
queueing for a slot and the whole prefill. The driver waits a little
(``start_wait``) for an early refusal, then starts the message while the
server works. Closing the stream closes the connection; llama-server's
``should_stop`` sees it and cancels the task, freeing the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from missive.api import BadGatewayError, Replica, ReplicaPool, TimeoutError_
from missive_openai.upstream_errors import parse_error_body, retry_after_header

from .errors import is_replica_failure, translate_error

__all__ = ["LlamaServerHTTP", "ChatStream"]


def _describe(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


class LlamaServerHTTP:
    """HTTP to one model's llama-server replicas.

    Args:
        pool: the replicas (the driver's :class:`ReplicaPool`).
        client: the driver's pooled ``httpx.AsyncClient`` (timeouts from the
            model's ``connect_timeout`` / ``read_timeout``).
        model_id: the Missive model id, for messages.
        read_timeout: seconds, for the 504 message.
    """

    def __init__(self, pool: ReplicaPool, client: httpx.AsyncClient, model_id: str, read_timeout: float) -> None:
        self.pool = pool
        self.client = client
        self.model_id = model_id
        self.read_timeout = read_timeout

    def timeout_error(self, what: str) -> TimeoutError_:
        return TimeoutError_(
            f"llama-server of model '{self.model_id}' sent nothing for {self.read_timeout:g} s ({what})"
        )

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                      prompt: int | None = None) -> httpx.Response:
        """``method path`` with a JSON ``body``: the first successful (2xx) answer.

        Args:
            prompt: the prompt size, for a context error that states none.

        Raises:
            OverloadedError: no replica answered (529, ``retry-after``).
            TimeoutError_: ``read_timeout`` without an answer (504).
            MissiveError: llama-server's error, translated (:func:`.errors.translate_error`).
        """
        tried: set[Replica] = set()
        while True:
            async with self.pool.acquire(exclude=tried) as replica:
                try:
                    response = await self.client.request(method, replica.url + path, json=body)
                except httpx.TimeoutException as exc:
                    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
                        self.pool.mark_failed(replica, _describe(exc))
                        tried.add(replica)
                        continue
                    raise self.timeout_error(path) from None
                except httpx.TransportError as exc:
                    self.pool.mark_failed(replica, _describe(exc))
                    tried.add(replica)
                    continue
                if response.status_code < 400:
                    return response
                error = parse_error_body(response.status_code, response.content)
                if is_replica_failure(error):
                    self.pool.mark_failed(replica, f"HTTP {error.status}: {error.message[:200]}")
                    tried.add(replica)
                    continue
                raise translate_error(error, model=self.model_id, endpoint=path, prompt_estimate=prompt,
                                      retry_after=retry_after_header(response.headers.get("retry-after")))

    def decode(self, response: httpx.Response, path: str) -> Any:
        """The JSON of a successful answer to ``path``.

        Raises:
            BadGatewayError: the body is not JSON.
        """
        try:
            return response.json()
        except ValueError:
            raise BadGatewayError(
                f"llama-server of model '{self.model_id}' answered {path} with malformed JSON"
            ) from None

    async def json(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                   prompt: int | None = None) -> Any:
        """:meth:`request`, then :meth:`decode` (same errors)."""
        return self.decode(await self.request(method, path, body, prompt=prompt), path)

    def chat(self, body: dict[str, Any], *, prompt: int) -> ChatStream:
        """Start the streaming ``POST /v1/chat/completions`` of ``body`` now."""
        return ChatStream(self, body, prompt)


class ChatStream:
    """One streaming chat request in flight (see the module doc).

    :meth:`wait_open` waits for the headers for a while, :meth:`lines` reads
    the body; :meth:`aclose` (idempotent, also when the request is still
    being sent) aborts it and releases the replica.
    """

    def __init__(self, http: LlamaServerHTTP, body: dict[str, Any], prompt: int) -> None:
        self._http = http
        self._body = body
        self._prompt = prompt
        self._hold: contextlib.AbstractAsyncContextManager[Replica] | None = None
        self._task: asyncio.Task[httpx.Response] = asyncio.ensure_future(self._open())

    async def _release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            await hold.__aexit__(None, None, None)

    async def _open(self) -> httpx.Response:
        http = self._http
        tried: set[Replica] = set()
        while True:
            hold = http.pool.acquire(exclude=tried)
            replica = await hold.__aenter__()  # raises the 529 when no replica is left
            self._hold = hold
            request = http.client.build_request("POST", replica.url + "/v1/chat/completions", json=self._body)
            try:
                response = await http.client.send(request, stream=True)
            except httpx.TimeoutException as exc:
                await self._release()
                if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
                    http.pool.mark_failed(replica, _describe(exc))
                    tried.add(replica)
                    continue
                raise http.timeout_error("waiting for the first token") from None
            except httpx.TransportError as exc:
                await self._release()
                http.pool.mark_failed(replica, _describe(exc))
                tried.add(replica)
                continue
            except BaseException:
                await self._release()
                raise
            if response.status_code == 200:
                return response
            try:
                raw = await response.aread()
            except httpx.HTTPError:
                raw = b""
            finally:
                await response.aclose()
                await self._release()
            error = parse_error_body(response.status_code, raw)
            if is_replica_failure(error):
                http.pool.mark_failed(replica, f"HTTP {error.status}: {error.message[:200]}")
                tried.add(replica)
                continue
            raise translate_error(error, model=http.model_id, endpoint="/v1/chat/completions",
                                  prompt_estimate=self._prompt,
                                  retry_after=retry_after_header(response.headers.get("retry-after")))

    async def wait_open(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the response headers.

        Returns:
            True if they came (a 200), False if the time ran out first.

        Raises:
            MissiveError: the request was refused or no replica answered.
        """
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        if not done:
            return False
        self._task.result()
        return True

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines once the headers came.

        Raises:
            TimeoutError_: ``read_timeout`` of silence.
            BadGatewayError: the connection was lost mid-answer.
            MissiveError: as :meth:`wait_open`.
        """
        response = await self._task
        try:
            async with contextlib.aclosing(response.aiter_lines()) as lines:
                async for line in lines:
                    yield line
        except httpx.ReadTimeout:
            raise self._http.timeout_error("mid-answer") from None
        except httpx.TransportError as exc:
            raise BadGatewayError(
                f"lost the connection to llama-server of model '{self._http.model_id}' mid-answer "
                f"({type(exc).__name__})"
            ) from None

    async def aclose(self) -> None:
        """Abort the request: cancel it while it is being sent, or close the
        response (and its connection); release the replica."""
        task = self._task
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        elif not task.cancelled() and task.exception() is None:
            await task.result().aclose()
        await self._release()
