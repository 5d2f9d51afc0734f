"""The ``openai`` driver: any OpenAI-compatible ``/v1/chat/completions`` server.

One pooled ``httpx.AsyncClient`` per model and a :class:`missive.replicas.ReplicaPool`
over its base URLs. :meth:`OpenAIDriver.generate`:

1. converts the request (:mod:`.convert`); a prefill the server cannot
   continue, an Anthropic-defined tool or an unsupported source is a 400;
2. sizes the prompt with :meth:`OpenAIDriver.prompt_tokens`: here an
   estimate (about 4 characters a token: the server has no tokenize
   endpoint), exact in the vLLM subclass. An exact size over the context is
   the 400 ``prompt is too long`` before anything is sent, and clamps
   ``max_tokens`` to what the context leaves;
3. sends ``stream: true`` with ``stream_options.include_usage`` to the least
   busy healthy replica; a connection error or a 5xx answer marks it failed
   and the request goes to the next one (nothing has reached the client
   yet); when none is left: 529 ``overloaded_error`` with ``retry-after``.
   A 4xx answer is translated (:mod:`.upstream_errors`); a context error that
   is only about the output budget (``max_tokens is too large``) is retried
   once with the budget the server states is left (contract section 5:
   clamping preferred to a 400);
4. yields :class:`~missive.events.Started` once the server accepted the
   request (its status line arrived), so validation errors stay HTTP errors;
5. translates the chunks (:mod:`.chunks`) and ends with
   :class:`~missive.events.Finished` carrying the server's exact usage: the
   prompt size (correcting an estimate) and its cached part as
   ``cache_read_input_tokens``.

Closing the generator (client gone, stop sequence matched) closes the
streaming response, hence the connection: the server sees the disconnect and
aborts the generation. Stop sequences are never sent upstream (the core
matches them on the text and must know which one matched).

``max_tokens: 0`` sends nothing: ``Started``, then ``Finished("max_tokens")``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx

from missive.api import (
    BadGatewayError,
    Capabilities,
    CapabilityError,
    ConfigError,
    Driver,
    Finished,
    GenerationEvent,
    GenerationRequest,
    ModelEntry,
    PromptTooLongError,
    Replica,
    ReplicaPool,
    Started,
    TimeoutError_,
    clamp_max_tokens,
    conversation_image_tokens,
)

from .chunks import ChunkTranslator
from .convert import chat_messages, chat_tool_choice, chat_tools
from .settings import OpenAISettings, apply_capabilities, parse_settings
from .upstream_errors import context_overflow, parse_error_body, retry_after_header, translate

__all__ = ["OpenAIDriver", "estimate_tokens"]

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
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(body.get("messages", [])) + image_tokens


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

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        self.settings = parse_settings(model_id, entry.settings, self.settings_model, self.label)
        caps = apply_capabilities(model_id, self.refine_capabilities(capabilities), self.settings.capabilities,
                                  self.label)
        if caps.count_tokens == "exact" and not self.exact_prompt_tokens:
            raise ConfigError(
                f"model '{model_id}': settings.capabilities.count_tokens = 'exact' needs a tokenize endpoint, "
                f"which the {self.label} driver does not use; declare 'approximate' or 'none' "
                "(the vllm driver counts exactly)"
            )
        super().__init__(model_id, entry, caps)
        self.upstream_model = self.settings.model or model_id
        self._context: int | None = entry.context_window
        headers = {"authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        self.client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(self.settings.read_timeout, connect=self.settings.connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )
        self.pool = ReplicaPool(
            self.settings.urls, client=self.client, name=model_id, health_path=self.settings.health_path
        )

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
                log.warning("model %s: could not read the context length from the backend: %s",
                            self.model_id, exc)

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self.client.aclose()

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
        req = request.request
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
        schema = req.output_format_schema()
        if schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
        body.update(self.extra_fields(request))
        return body

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        body = self.body(request)
        prompt = await self.prompt_tokens(request, body)
        context = self.context_window
        max_tokens = request.max_tokens
        if self.exact_prompt_tokens and context is not None:
            if prompt >= context:
                raise PromptTooLongError(prompt, context - 1)  # one token must remain for the answer
            max_tokens = clamp_max_tokens(max_tokens, prompt, context)
        if max_tokens == 0:
            yield Started(input_tokens=prompt)
            yield Finished("max_tokens", output_tokens=0)
            return
        body["max_tokens"] = max_tokens
        # The core's tool_choice, not the request's: after a server tool's
        # result the core goes on in "auto" although the client forced a tool.
        choice = request.tool_choice if request.tools else None
        translator = ChunkTranslator(
            tool_choice=choice.mode if choice is not None else None,
            forced_name=choice.name if choice is not None and choice.mode == "tool" else None,
        )
        async with self._open_stream(body, prompt) as response:
            yield Started(input_tokens=prompt)
            async with contextlib.aclosing(self._events(response, translator)) as events:
                async for event in events:
                    yield event

    # -- HTTP ---------------------------------------------------------------------

    async def backend_json(self, method: str, path: str, body: dict[str, Any] | None = None,
                           *, prompt: int | None = None) -> Any:
        """A JSON request to the least busy healthy replica, with failover
        (connection error or 5xx: the next replica; none left: 529).

        Raises:
            OverloadedError: every replica failed.
            MissiveError: the backend's 4xx, translated.
            BadGatewayError: a 2xx answer that is not JSON.
        """
        tried: set[Replica] = set()
        while True:
            async with self.pool.acquire(exclude=tried) as replica:
                try:
                    response = await self.client.request(method, replica.url + path, json=body)
                except httpx.ReadTimeout:
                    raise TimeoutError_(
                        f"the backend of model '{self.model_id}' did not answer {path} within "
                        f"{self.settings.read_timeout:g} s"
                    ) from None
                except httpx.TransportError as exc:
                    self.pool.mark_failed(replica, f"{type(exc).__name__}: {exc}".rstrip(": "))
                    tried.add(replica)
                    continue
                if response.status_code >= 500:
                    error = parse_error_body(response.status_code, response.content)
                    self.pool.mark_failed(replica, f"HTTP {response.status_code}: {error.message[:200]}")
                    tried.add(replica)
                    continue
                if response.status_code >= 400:
                    raise translate(parse_error_body(response.status_code, response.content),
                                    model=self.model_id, prompt_estimate=prompt,
                                    retry_after=retry_after_header(response.headers.get("retry-after")))
                try:
                    return response.json()
                except ValueError:
                    raise BadGatewayError(
                        f"the backend of model '{self.model_id}' answered {path} with malformed JSON"
                    ) from None

    @contextlib.asynccontextmanager
    async def _open_stream(self, body: dict[str, Any], prompt: int) -> AsyncIterator[httpx.Response]:
        """The accepted streaming response, from the first replica that takes it.

        Raises:
            OverloadedError: every replica failed (529, from the pool).
            MissiveError: the backend's 4xx, translated.
        """
        tried: set[Replica] = set()
        budget_retried = False
        while True:
            async with self.pool.acquire(exclude=tried) as replica:
                url = replica.url + "/v1/chat/completions"
                try:
                    response = await self.client.send(self.client.build_request("POST", url, json=body),
                                                      stream=True)
                except httpx.ReadTimeout:
                    raise TimeoutError_(
                        f"the backend of model '{self.model_id}' did not answer within "
                        f"{self.settings.read_timeout:g} s"
                    ) from None
                except httpx.TransportError as exc:
                    self.pool.mark_failed(replica, f"{type(exc).__name__}: {exc}".rstrip(": "))
                    tried.add(replica)
                    continue
                try:
                    if response.status_code == 200:
                        yield response
                        return
                    error = parse_error_body(response.status_code, await response.aread())
                    if response.status_code >= 500:
                        self.pool.mark_failed(replica, f"HTTP {response.status_code}: {error.message[:200]}")
                        tried.add(replica)
                        continue
                    overflow = context_overflow(error)
                    if overflow is not None and overflow.output_only and not budget_retried:
                        assert overflow.context is not None and overflow.prompt_tokens is not None
                        body = {**body, "max_tokens": overflow.context - overflow.prompt_tokens}
                        budget_retried = True
                        continue
                    raise translate(error, model=self.model_id, prompt_estimate=prompt,
                                    retry_after=retry_after_header(response.headers.get("retry-after")))
                finally:
                    await response.aclose()

    async def _events(self, response: httpx.Response, translator: ChunkTranslator) -> AsyncIterator[GenerationEvent]:
        done = False
        try:
            async with contextlib.aclosing(response.aiter_lines()) as lines:
                async for line in lines:
                    if not line.startswith("data:"):
                        continue  # blank separators, ": keep-alive" comments, event:/id: fields
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise BadGatewayError(f"malformed chunk from the backend: {data[:200]!r}") from None
                    if isinstance(chunk, dict) and (chunk.get("object") == "error" or "error" in chunk):
                        error = parse_error_body(500, data.encode())
                        raise BadGatewayError(f"the backend of model '{self.model_id}' failed mid-answer: "
                                              f"{error.message}")
                    for event in translator.feed(chunk):
                        yield event
        except httpx.ReadTimeout:
            raise TimeoutError_(
                f"the backend of model '{self.model_id}' sent nothing for {self.settings.read_timeout:g} s"
            ) from None
        except httpx.TransportError as exc:
            raise BadGatewayError(
                f"lost the connection to the backend of model '{self.model_id}' mid-answer ({type(exc).__name__})"
            ) from None
        for event in translator.finish(ended_cleanly=done or translator.finish_reason is not None):
            yield event
