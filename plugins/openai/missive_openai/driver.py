"""The ``openai`` driver: any OpenAI-compatible ``/v1/chat/completions`` server.

One :class:`missive.remote.transport.RemoteTransport` per model (a pooled
``aiohttp.ClientSession`` and a replica pool over its base URLs, with the
failover and timeout policy every remote driver shares). :meth:`OpenAIDriver.generate`:

1. converts the request (:mod:`.convert`); a prefill the server cannot
   continue, an Anthropic-defined tool or an unsupported source is a 400;
2. sizes the prompt with :meth:`OpenAIDriver.prompt_tokens`: here an
   estimate (about 4 characters a token: the server has no tokenize
   endpoint), exact in the vLLM subclass. An exact size over the context is
   the 400 ``prompt is too long`` before anything is sent, and clamps
   ``max_tokens`` to what the context leaves;
3. sends ``stream: true`` with ``stream_options.include_usage`` to the
   healthy replica the model's ``replica_policy`` picks (least busy, or the
   one holding the conversation's prefix: :mod:`missive.routing.policy`);
   a connection error or a 5xx answer marks it failed
   and the request goes to the next one (nothing has reached the client
   yet); when none is left: 529 ``overloaded_error`` with ``retry-after``;
   no status line within ``read_timeout``: 504 ``timeout_error``.
   A 4xx answer is translated (:mod:`.upstream_errors`); a context error that
   is only about the output budget (``max_tokens is too large``) is retried
   once with the budget the server states is left (contract section 5:
   clamping preferred to a 400);
4. yields :class:`~missive.driver.events.Started` once the server accepted the
   request (its status line arrived), so validation errors stay HTTP errors;
5. translates the chunks (:mod:`.chunks`) and ends with
   :class:`~missive.driver.events.Finished` carrying the server's exact usage: the
   prompt size (correcting an estimate) and its cached part as
   ``cache_read_input_tokens``.

Closing the generator (client gone, stop sequence matched) closes the
streaming response, hence the connection: the server sees the disconnect and
aborts the generation. Stop sequences are never sent upstream (the core
matches them on the text and must know which one matched).

``max_tokens: 0`` (the API's cache warm-up) asks the server for one token,
so it evaluates the prompt into its prefix cache (vLLM's automatic prefix
caching, llama.cpp's slots); the token is read and dropped, and the answer is
the API's empty message: ``Started``, then ``Finished("max_tokens")`` with 0
output tokens and the server's prompt usage (:meth:`OpenAIDriver.warm_up`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Mapping
from typing import Any

from missive.api import (
    BadGatewayError,
    Capabilities,
    CapabilityError,
    ConfigError,
    Driver,
    Failover,
    Finished,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    MissiveError,
    ModelEntry,
    RemoteStream,
    RemoteTransport,
    ReplicaPool,
    RouteKey,
    Started,
    conversation_image_tokens,
    fit_prompt,
    json_loads,
    policy_for,
)

from .chunks import ChunkTranslator
from .convert import chat_messages, chat_tool_choice, chat_tools
from .settings import OpenAISettings, apply_capabilities, parse_settings
from .upstream_errors import context_overflow, parse_error_body, retry_after_header, translate

__all__ = ["OpenAIDriver", "OutputBudgetTooLarge", "estimate_tokens"]

log = logging.getLogger("missive.openai")

#: Characters per token of the estimate (English prose and code with BPE
#: vocabularies average 3.5-4.5; the exact count comes back in the usage).
CHARS_PER_TOKEN = 4
#: Template overhead per message (role markers, separators), in tokens.
TOKENS_PER_MESSAGE = 4


def estimate_tokens(body: dict[str, Any], *, image_tokens: int = 0) -> int:
    """Approximate prompt tokens of a chat completions body: the characters of
    the messages and tools over :data:`CHARS_PER_TOKEN`, plus
    :data:`TOKENS_PER_MESSAGE` per message, plus ``image_tokens`` (the
    images' pixel estimate, :func:`missive.media.tokens.conversation_image_tokens`;
    ``image_url`` parts add no characters). The server's usage corrects it
    at the end."""
    chars = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(json.dumps(part)) for part in content if part.get("type") != "image_url")
        if message.get("tool_calls"):
            chars += len(json.dumps(message["tool_calls"]))
    if body.get("tools"):
        chars += len(json.dumps(body["tools"]))
    return (
        math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(body.get("messages", [])) + image_tokens
    )


class OpenAIDriver(Driver):
    """Driver of an OpenAI-compatible chat completions server (see the module doc).

    Subclasses (vLLM) override :attr:`settings_model`, :meth:`extra_fields`,
    :meth:`prompt_tokens` and :meth:`discover_context`.
    """

    settings_model: type[OpenAISettings] = OpenAISettings
    #: True when :meth:`prompt_tokens` is exact (the prompt is refused and
    #: ``max_tokens`` clamped locally).
    exact_prompt_tokens = False
    label = "openai"
    #: How messages name the server (``"llama-server of model 'x' ..."``).
    backend_name = "the backend"

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        self.settings = parse_settings(model_id, entry.settings, self.settings_model, self.label)
        caps = apply_capabilities(
            model_id, self.refine_capabilities(capabilities), self.settings.capabilities, self.label
        )
        if caps.count_tokens == "exact" and not self.exact_prompt_tokens:
            raise ConfigError(
                f"model '{model_id}': settings.capabilities.count_tokens = 'exact' needs a tokenize "
                f"endpoint, which the {self.label} driver does not use; declare 'approximate' or 'none' "
                "(the vllm driver counts exactly)"
            )
        super().__init__(model_id, entry, caps)
        self.upstream_model = self.settings.model or model_id
        self._context: int | None = entry.context_window
        headers = {"authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        self.transport = RemoteTransport(
            self.settings.urls,
            name=model_id,
            backend=self.backend_name,
            classify=self.classify,
            connect_timeout=self.settings.connect_timeout,
            read_timeout=self.settings.read_timeout,
            health_path=self.settings.health_path,
            headers=headers,
            policy=policy_for(self.settings),
        )
        self.pool = self.transport.pool

    # -- hooks for subclasses -------------------------------------------------

    def refine_capabilities(self, capabilities: Capabilities) -> Capabilities:
        """The spec's capabilities adjusted by typed settings, before the
        operator's ``settings.capabilities`` overrides."""
        return capabilities

    def extra_fields(self, request: GenerationRequest) -> dict[str, Any]:
        """Backend-specific body fields for ``request`` (none here)."""
        return {}

    async def prompt_tokens(self, request: GenerationRequest, body: dict[str, Any]) -> int:
        """Prompt size of ``body``: an estimate here (:func:`estimate_tokens`)."""
        return estimate_tokens(body, image_tokens=conversation_image_tokens(request.conversation))

    async def discover_context(self) -> int | None:
        """The server's context length, if it says (not in the OpenAI API)."""
        return None

    # -- driver interface -------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        return self._context

    async def start(self) -> None:
        if self._context is None:
            try:
                self._context = await self.discover_context()
            except Exception as exc:  # the backend may come up later: not fatal
                log.warning(
                    "model %s: could not read the context length from the backend: %s", self.model_id, exc
                )

    async def aclose(self) -> None:
        await self.transport.aclose()

    def replica_pool(self) -> ReplicaPool:
        return self.pool

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await self.prompt_tokens(request, self.body(request))

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The chat completions body (without ``max_tokens``).

        Raises:
            CapabilityError: a prefill while ``settings.prefill = "refuse"``.
            InvalidRequestError: from :mod:`.convert`.
        """
        conv = request.conversation
        prefill = bool(conv.prefill)
        if prefill and self.settings.prefill == "refuse":
            raise CapabilityError(
                capability="assistant prefill (a final assistant message)",
                model=self.model_id,
                driver=self.name,
                supported="answers that start a new assistant turn (set settings.prefill if the server "
                "can continue a final assistant message)",
            )
        body: dict[str, Any] = {
            **self.settings.extra_body,
            "model": self.upstream_model,
            "messages": chat_messages(conv, prefill=prefill),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        tools = chat_tools(request)
        if tools:
            body["tools"] = tools
            body.update(chat_tool_choice(request))
        if prefill and self.settings.prefill == "continue_final_message":
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        for name in ("temperature", "top_p", "top_k"):
            value = getattr(request, name)
            if value is not None:
                body[name] = value
        schema = request.output_schema
        if schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema},
            }
        body.update(self.extra_fields(request))
        return body

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        body = self.body(request)
        prompt = await self.prompt_tokens(request, body)
        context = self.context_window
        max_tokens = request.max_tokens
        if self.exact_prompt_tokens and context is not None:
            max_tokens = fit_prompt(max_tokens, prompt, context)
        route = self.transport.route_key(body, request.session)
        if max_tokens == 0:
            async for event in self.warm_up(body, prompt, route):
                yield event
            return
        body["max_tokens"] = max_tokens
        # The core's tool_choice, not the request's: after a server tool's
        # result the core goes on in "auto" although the client forced a tool.
        choice = request.tool_choice if request.tools else None
        translator = ChunkTranslator(
            tool_choice=choice.mode if choice is not None else None,
            forced_name=choice.name if choice is not None and choice.mode == "tool" else None,
        )
        async with self._open_stream(body, prompt, route) as stream:
            yield Started(input_tokens=prompt)
            async with contextlib.aclosing(self._events(stream, translator)) as events:
                async for event in events:
                    yield event

    async def warm_up(
        self, body: dict[str, Any], prompt: int, route: RouteKey | None = None
    ) -> AsyncIterator[GenerationEvent]:
        """A ``max_tokens: 0`` request: the prompt sent with ``max_tokens: 1``
        (no server generates nothing; one token is the least that makes it
        evaluate, and cache, the prompt), its output dropped, the server's
        prompt usage kept. A forced tool choice is sent as ``auto``: what it
        constrains is the output, not the prompt, and a constrained call
        cut at one token is no call."""
        body = {**body, "max_tokens": 1}
        if body.get("tool_choice") not in (None, "auto", "none"):
            body["tool_choice"] = "auto"
        translator = ChunkTranslator(tool_choice=None, forced_name=None)
        async with self._open_stream(body, prompt, route) as stream:
            yield Started(input_tokens=prompt)
            async with contextlib.aclosing(stream.sse_data()) as payloads:
                async for data in payloads:
                    try:
                        chunk = json_loads(data)
                    except ValueError:
                        continue  # the answer is dropped: only the usage is wanted
                    if isinstance(chunk, dict):
                        translator.feed(chunk)
        usage = translator.usage
        if usage is None:
            yield Finished("max_tokens", output_tokens=0)
        else:
            yield Finished(
                "max_tokens",
                output_tokens=0,
                input_tokens=usage.prompt_tokens - usage.cached_tokens,
                cache_read_input_tokens=usage.cached_tokens,
            )

    # -- HTTP (policy: missive.remote.transport) ------------------------------------------

    def classify(
        self,
        status: int,
        raw: bytes,
        headers: Mapping[str, str],
        url: str,
        *,
        prompt: int | None = None,
        budget_retry: bool = False,
    ) -> Failover | MissiveError:
        """The reading of an error answer (:data:`missive.remote.transport.Classify`):
        a 5xx means the replica is not serving (out of rotation, next
        replica); a 4xx is translated (:func:`.upstream_errors.translate`,
        ``prompt`` standing in for a context error that states no size);
        with ``budget_retry``, a context error that is only about the output
        budget is :class:`OutputBudgetTooLarge` (the caller retries clamped)."""
        error = parse_error_body(status, raw)
        if status >= 500:
            return Failover(f"HTTP {status}: {error.message[:200]}")
        overflow = context_overflow(error)
        translated = translate(
            error,
            model=self.model_id,
            prompt_estimate=prompt,
            retry_after=retry_after_header(headers.get("retry-after")),
        )
        if budget_retry and overflow is not None and overflow.output_only:
            assert overflow.context is not None and overflow.prompt_tokens is not None
            return OutputBudgetTooLarge(translated.message, left=overflow.context - overflow.prompt_tokens)
        return translated

    async def backend_json(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, prompt: int | None = None
    ) -> Any:
        """A JSON request to the least busy healthy replica, by the transport's
        failover policy (:mod:`missive.remote.transport`).

        Raises:
            OverloadedError: no replica could take it (529).
            TimeoutError_: no answer within ``read_timeout`` (504).
            MissiveError: the backend's 4xx, translated.
            BadGatewayError: a 2xx answer that is not JSON.
        """
        return await self.transport.json(
            method, path, body, classify=lambda *a: self.classify(*a, prompt=prompt)
        )

    async def open_chat(
        self, body: dict[str, Any], prompt: int, route: RouteKey | None = None
    ) -> RemoteStream:
        """``POST /v1/chat/completions`` of ``body``, accepted (status line
        received), on the replica the replica policy picks for ``route``
        (:meth:`RouteKey.of_chat <missive.routing.prefix.RouteKey.of_chat>`);
        the caller closes the stream. A context error about the
        output budget only (``max_tokens is too large``) is retried once with
        the budget the server says is left (contract section 5: clamping
        preferred to a 400).

        Raises:
            OverloadedError: every replica failed (529).
            TimeoutError_: no answer within ``read_timeout`` (504).
            MissiveError: the backend's 4xx, translated.
        """
        path = "/v1/chat/completions"
        stream = self.transport.stream(
            "POST",
            path,
            body,
            classify=lambda *a: self.classify(*a, prompt=prompt, budget_retry=True),
            route=route,
        )
        try:
            await stream.wait_open(None)
            return stream
        except OutputBudgetTooLarge as exc:
            await stream.aclose()
            stream = self.transport.stream(
                "POST",
                path,
                {**body, "max_tokens": exc.left},
                classify=lambda *a: self.classify(*a, prompt=prompt),
                route=route,
            )
        except BaseException:
            await stream.aclose()
            raise
        try:
            await stream.wait_open(None)
        except BaseException:
            await stream.aclose()
            raise
        return stream

    @contextlib.asynccontextmanager
    async def _open_stream(
        self, body: dict[str, Any], prompt: int, route: RouteKey | None = None
    ) -> AsyncIterator[RemoteStream]:
        """:meth:`open_chat` as a context manager that closes the stream."""
        stream = await self.open_chat(body, prompt, route)
        try:
            yield stream
        finally:
            await stream.aclose()

    async def _events(
        self, stream: RemoteStream, translator: ChunkTranslator
    ) -> AsyncIterator[GenerationEvent]:
        """The stream's ``data:`` chunks as events, then the translator's end.

        Raises:
            BadGatewayError: a malformed chunk, an error chunk, a lost connection.
            TimeoutError_: ``read_timeout`` of silence.
        """
        async with contextlib.aclosing(stream.sse_data()) as payloads:
            async for data in payloads:
                try:
                    chunk = json_loads(data)
                except ValueError:
                    raise BadGatewayError(f"malformed chunk from the backend: {data[:200]!r}") from None
                if isinstance(chunk, dict) and (chunk.get("object") == "error" or "error" in chunk):
                    error = parse_error_body(500, data.encode())
                    raise BadGatewayError(
                        f"the backend of model '{self.model_id}' failed mid-answer: {error.message}"
                    )
                for event in translator.feed(chunk):
                    yield event
        for event in translator.finish(
            ended_cleanly=stream.sse_ended or translator.finish_reason is not None
        ):
            yield event


class OutputBudgetTooLarge(InvalidRequestError):
    """The server refused ``max_tokens`` as over what its context leaves for
    the answer (the prompt fits); ``left`` is what it leaves, in tokens."""

    def __init__(self, message: str, *, left: int) -> None:
        super().__init__(message)
        self.left = left
