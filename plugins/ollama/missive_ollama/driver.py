"""The ``ollama`` driver: a model served by an Ollama server, over ``/api/chat``.

Start-up (:meth:`OllamaDriver.start`): ``GET /api/tags`` (the server answers
and lists the tag), ``POST /api/show`` (``<arch>.context_length`` and
``capabilities``), which narrow the driver's capabilities for this model:
tool_choice ``auto``/``none`` only with ``"tools"``, images only with
``"vision"``, thinking only with ``"thinking"``. If Ollama cannot be reached
then, start-up goes on and the first request retries (a 529 until it answers);
an unknown tag or a model that cannot chat fails start-up.

Generation (:meth:`OllamaDriver.generate`):

1. build the ``/api/chat`` body (:mod:`missive_ollama.convert`) with
   ``think`` always explicit, ``options.num_ctx`` = the context window,
   ``truncate: false`` (Ollama would otherwise drop old messages silently,
   ``truncate := req.Truncate == nil || *req.Truncate``) and ``shift: false``
   (no silent context shifting mid-answer);
2. estimate the prompt (:mod:`missive_ollama.estimate`); an estimate filling
   the context is the 400 ``prompt is too long``, before anything is sent;
   ``num_predict`` = ``max_tokens`` clamped to the context left;
3. start the request; wait ``start_wait`` seconds for Ollama's answer, so
   that "unreachable" and "no such model" stay HTTP errors (529, 502), or
   without limit when the estimate is above ``overflow_check`` of the
   context, so that Ollama's own overflow refusal becomes the 400; then yield
   ``Started`` with the estimate;
4. stream the NDJSON: ``message.thinking`` → thinking deltas (dropped, though
   counted, when the client did not ask for thinking: gpt-oss reasons
   regardless), ``message.content`` → text, each ``message.tool_calls`` entry
   (Ollama sends calls whole, arguments as an object) → one tool call whose
   arguments are the object serialized in its key order, ids left to the core
   (``toolu_``); ``disable_parallel_tool_use`` keeps the first call only;
5. the ``done`` line: ``done_reason`` ``stop`` → ``end_turn``, ``length`` →
   ``max_tokens`` (or ``model_context_window_exceeded`` when the context,
   not ``num_predict``, ran out), ``load``/``unload`` → 502 (no answer);
   ``eval_count`` → output tokens; ``prompt_eval_count`` (the full prompt) and
   ``prompt_eval_cached_count`` (its KV-cache hit, Ollama ≥ PR #17943) →
   exact ``input_tokens`` / ``cache_read_input_tokens`` in the final usage.

``max_tokens: 0`` (cache warm-up) asks for one token and shows nothing.
Closing the generator (client gone, stop sequence) closes the HTTP request;
Ollama stops generating when its request context ends.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio

from missive.api import (
    BadGatewayError,
    Capabilities,
    ConfigError,
    Driver,
    Finished,
    GenerationEvent,
    GenerationRequest,
    MissiveError,
    ModelEntry,
    PromptTooLongError,
    ReplicaPool,
    Started,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    check_request,
    fit_prompt,
)

from .client import ContextOverflow, OllamaClient
from .convert import chat_messages, chat_tools, options, think_value, thinking_requested
from .estimate import TokenEstimator
from .plugin import CAPABILITIES, IMAGE_TYPES
from .settings import OllamaSettings, parse_settings

__all__ = ["OllamaDriver", "model_capabilities", "context_length"]

log = logging.getLogger("missive.ollama")


def model_capabilities(base: Capabilities, show: dict[str, Any]) -> Capabilities:
    """``base`` narrowed to what ``/api/show``'s ``capabilities`` list allows.

    An Ollama too old to list capabilities gets text only.
    """
    caps = set(show.get("capabilities") or [])
    tools = "tools" in caps
    return base.model_copy(
        update={
            "tool_choice": base.tool_choice if tools else frozenset(),
            "parallel_tool_calls": base.parallel_tool_calls and tools,
            "input_media": base.input_media & IMAGE_TYPES if "vision" in caps else frozenset(),
            "thinking": base.thinking and "thinking" in caps,
        }
    )


def context_length(show: dict[str, Any]) -> int | None:
    """``model_info["<general.architecture>.context_length"]`` of ``/api/show``, if any."""
    info = show.get("model_info") or {}
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.context_length") if arch else None
    if value is None:  # some architectures name it differently; take any *.context_length
        value = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


class OllamaDriver(Driver):
    """Serves one Ollama model tag. Built as ``OllamaDriver(model_id, entry, capabilities)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "ollama"

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        super().__init__(model_id, entry, capabilities or CAPABILITIES)
        self._declared = self.capabilities
        self.settings: OllamaSettings = parse_settings(model_id, entry.settings)
        self._client: OllamaClient | None = None
        self._show: dict[str, Any] | None = None
        self._model_context: int | None = None
        self._estimator = TokenEstimator(self.settings.chars_per_token)

    # -- lifecycle and model info ----------------------------------------

    @property
    def context_window(self) -> int | None:
        """``num_ctx`` sent to Ollama: the entry's ``context_window``, capped at
        the model's trained context once known; unset, the trained context."""
        configured = self.entry.context_window
        if configured is not None and self._model_context is not None:
            return min(configured, self._model_context)
        return configured if configured is not None else self._model_context

    @property
    def client(self) -> OllamaClient:
        if self._client is None:
            self._client = OllamaClient(self.settings)
        return self._client

    async def start(self) -> None:
        """Check the server and the tag, read the model's info, optionally preload it.

        Raises:
            ConfigError: Ollama answers but lacks the tag, or the model cannot chat.
        """
        tag = self.settings.tag
        try:
            tags = await self.client.tags()
        except MissiveError as exc:
            log.warning("model %s: %s; will retry on the first request", self.model_id, exc.message)
            return
        names = {m.get("name") for m in tags.get("models") or []} | {
            m.get("model") for m in tags.get("models") or []
        }
        if tag not in names:
            listed = ", ".join(sorted(n for n in names if n)) or "none"
            raise ConfigError(
                f"model '{self.model_id}': Ollama at {self.client.base_url} has no model '{tag}' "
                f"(settings.model; it has: {listed}); run `ollama pull {tag}`"
            )
        try:
            await self._load_info()
        except MissiveError as exc:
            raise ConfigError(f"model '{self.model_id}': {exc.message}") from exc
        if self.settings.preload:
            await self._preload()

    async def _load_info(self) -> None:
        show = await self.client.show(self.settings.tag)
        caps = show.get("capabilities")
        if caps is not None and "completion" not in caps:
            raise BadGatewayError(
                f"Ollama model '{self.settings.tag}' cannot chat (capabilities: {', '.join(caps) or 'none'})"
            )
        self._model_context = context_length(show)
        self.capabilities = model_capabilities(self._declared, show)
        self._show = show
        log.info(
            "model %s: Ollama %s, context %s (trained %s), capabilities %s",
            self.model_id,
            self.settings.tag,
            self.context_window,
            self._model_context,
            ", ".join(caps or ["unlisted"]),
        )

    async def _ensure_info(self) -> None:
        if self._show is None:
            await self._load_info()

    async def _preload(self) -> None:
        """``/api/chat`` with no messages: Ollama loads the model and answers
        one ``done_reason: "load"`` object (``ChatHandler``)."""
        body = self._base_body([], think=False)
        stream = self.client.chat(body)
        try:
            await stream.wait_open(None)
            async with aclosing(stream.lines()) as lines:
                async for obj in lines:
                    if obj.get("done"):
                        log.info(
                            "model %s: Ollama loaded %s (%s)",
                            self.model_id,
                            self.settings.tag,
                            obj.get("done_reason"),
                        )
        except MissiveError as exc:
            raise ConfigError(f"model '{self.model_id}': preloading failed: {exc.message}") from exc
        finally:
            await stream.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def replica_pool(self) -> ReplicaPool | None:
        # The client (and its pool) exists from start() to aclose().
        return self._client.pool if self._client is not None else None

    # -- request body ------------------------------------------------------

    def _base_body(self, messages: list[dict[str, Any]], *, think: bool | str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.tag,
            "messages": messages,
            "stream": True,
            "think": think,
            "truncate": False,
            "shift": False,
        }
        if self.settings.keep_alive is not None:
            body["keep_alive"] = self.settings.keep_alive
        return body

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        think = think_value(request, model_thinks=self.capabilities.thinking, settings=self.settings)
        body = self._base_body(chat_messages(request.conversation), think=think)
        tools = chat_tools(request)
        if tools is not None:
            body["tools"] = tools
        return body

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The estimate ``Started`` would carry for ``request`` (approximate:
        see :mod:`missive_ollama.estimate`). Needs only ``/api/show`` (once)."""
        await self._ensure_info()
        return self._estimator.estimate(self._body(request))

    # -- generation ----------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        await self._ensure_info()
        # The core checked the declared capabilities; if the model's own were
        # unknown then (Ollama unreachable at start-up), check them now.
        check_request(request.request, self.capabilities, model=request.model, driver=self.name)  # type: ignore[arg-type]
        body = self._body(request)
        prompt = self._estimator.estimate(body)
        ctx = self.context_window
        budget = fit_prompt(request.max_tokens, prompt, ctx)
        warm_up = budget == 0  # max_tokens 0: evaluate the prompt, show nothing
        num_predict = max(1, budget)
        body["options"] = options(request, self.settings, num_ctx=ctx, num_predict=num_predict)

        stream = self.client.chat(body, self.client.transport.route_key(body, request.session))
        try:
            near_limit = ctx is not None and prompt >= self.settings.overflow_check * ctx
            try:
                await stream.wait_open(None if near_limit else self.settings.start_wait)
            except ContextOverflow:
                raise PromptTooLongError(max(prompt, ctx or prompt), (ctx or prompt) - 1) from None
            yield Started(input_tokens=prompt)
            async with aclosing(self._events(request, stream, body, prompt, num_predict, warm_up)) as events:
                async for event in events:
                    yield event
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _events(
        self,
        request: GenerationRequest,
        stream: Any,
        body: dict[str, Any],
        prompt: int,
        num_predict: int,
        warm_up: bool,
    ) -> AsyncIterator[GenerationEvent]:
        show_thinking = thinking_requested(request) and not warm_up
        one_call = not request.tool_choice.parallel
        calls = 0
        ctx = self.context_window
        done: dict[str, Any] | None = None
        try:
            async with aclosing(stream.lines()) as lines:
                async for obj in lines:
                    if done is not None:
                        # after the done line (the client reads the body's end: the connection is reused)
                        continue
                    message = obj.get("message") or {}
                    if not isinstance(message, dict):
                        raise BadGatewayError(
                            f"Ollama sent a 'message' that is not an object: {str(message)[:200]}"
                        )
                    thinking = message.get("thinking") or ""
                    content = message.get("content") or ""
                    if thinking and show_thinking:
                        yield ThinkingDelta(thinking)
                    if content and not warm_up:
                        yield TextDelta(content)
                    for call in message.get("tool_calls") or []:
                        name, arguments = _tool_call(call)
                        calls += 1
                        if warm_up or (one_call and calls > 1):
                            continue  # disable_parallel_tool_use: at most one call
                        yield ToolCallStart(name=name)
                        yield ToolCallDelta(arguments, tokens=0)
                        yield ToolCallEnd()
                    if obj.get("done"):
                        done = obj
        except ContextOverflow:
            raise PromptTooLongError(max(prompt, ctx or prompt), (ctx or prompt) - 1) from None
        if done is not None:
            yield self._finished(done, body, prompt, num_predict, warm_up)
            return
        where = stream.replica.url if stream.replica is not None else self.client.base_url
        raise BadGatewayError(f"Ollama at {where} ended the stream without its final (done) line")

    def _finished(
        self, obj: dict[str, Any], body: dict[str, Any], prompt: int, num_predict: int, warm_up: bool
    ) -> Finished:
        reason = obj.get("done_reason") or "stop"
        output = _count(obj, "eval_count")
        stop: StopReason
        if reason == "stop":
            stop = "end_turn"
        elif reason == "length":
            context_ran_out = output is not None and output < num_predict
            stop = "model_context_window_exceeded" if context_ran_out else "max_tokens"
        elif reason in ("load", "unload"):
            raise BadGatewayError(f"Ollama answered done_reason '{reason}' without generating")
        else:
            log.warning(
                "model %s: unknown Ollama done_reason %r, reported as end_turn", self.model_id, reason
            )
            stop = "end_turn"
        if warm_up:
            stop, output = "max_tokens", 0
        total = _count(obj, "prompt_eval_count")
        cached = _count(obj, "prompt_eval_cached_count") or 0
        if total is None:
            return Finished(stop, output_tokens=output)
        self._estimator.observe(body, total)
        if total != prompt:
            log.debug("model %s: prompt estimate %d, Ollama counted %d", self.model_id, prompt, total)
        cached = min(cached, total)
        return Finished(
            stop, output_tokens=output, input_tokens=total - cached, cache_read_input_tokens=cached
        )


def _count(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadGatewayError(f"Ollama sent {key}={value!r}, not a token count")
    return value


def _tool_call(call: Any) -> tuple[str, str]:
    """``(name, arguments JSON)`` of one Ollama tool call.

    Ollama sends ``{"id"?, "function": {"index"?, "name", "arguments": {...}}}``,
    arguments as an object (``ToolCallFunctionArguments``, insertion-ordered);
    a JSON string holding an object is accepted too. Key order is kept.

    Raises:
        BadGatewayError: no name, or arguments that are not a JSON object.
    """
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise BadGatewayError(f"Ollama sent a tool call without a name: {json.dumps(call)[:200]}")
    arguments = function.get("arguments")
    if arguments is None:  # Go marshals empty arguments as {}; accept null the same way
        arguments = {}
    elif isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = None  # not JSON: refused below, never guessed
    if not isinstance(arguments, dict):
        raise BadGatewayError(f"Ollama sent tool call '{name}' with arguments that are not a JSON object")
    return name, json.dumps(arguments, ensure_ascii=False)
