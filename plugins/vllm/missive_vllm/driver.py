"""The ``vllm`` driver: the ``openai`` driver plus vLLM's extras.

Source of each rule: vLLM's ``vllm/entrypoints/openai/protocol.py``
(``ChatCompletionRequest``, ``TokenizeChatRequest``, ``TokenizeResponse``,
``ModelCard``) and ``serving_chat.py``.

* **Exact prompt size**: ``POST /tokenize`` with the same ``messages``,
  ``tools``, ``add_generation_prompt`` / ``continue_final_message`` and
  ``chat_template_kwargs`` as the generation renders the same chat template
  with the same tokenizer; its ``count`` is the prompt size of ``Started``
  and of ``count_tokens``, and its ``max_model_len`` the context. A prompt
  of ``max_model_len`` tokens or more is the 400 ``prompt is too long``
  before anything is generated, and ``max_tokens`` is clamped to what the
  context leaves (vLLM itself would answer 400 ``'max_tokens' ... is too large``).
* **Context window**: ``max_model_len`` of the served model in ``GET /v1/models``
  at start-up (the model entry's ``context_window`` wins when set).
* **Prefill**: a final assistant message is continued with
  ``continue_final_message: true, add_generation_prompt: false``.
* **Thinking switch**: with ``settings.thinking`` (a reasoning model served
  with ``--reasoning-parser``), ``chat_template_kwargs.enable_thinking`` and
  ``thinking`` are true for ``thinking: enabled`` or ``adaptive`` and false
  otherwise (Qwen3, GLM and DeepSeek-R1 distills read ``enable_thinking``,
  DeepSeek-V3.1 ``thinking``), ``thinking_budget`` is the budget, -1 or 0
  (Seed-OSS), and ``reasoning_effort`` carries the effort
  (gpt-oss; :mod:`missive.thinking.plan`); ``delta.reasoning_content``
  becomes the thinking block; replayed thinking whose signature verified is
  sent back as the assistant message's ``reasoning_content``. The budget is
  not enforced by vLLM's chat API: ``budget_tokens`` is advisory on this
  driver, as the API documents it ("a target, not a strict limit").
* **Structured output**: ``output_config.format`` as ``response_format:
  {type: json_schema, json_schema: {name, schema}}`` (guided decoding).
* **Images**: with ``settings.vision``, images (checked, fitted and, for url
  sources, fetched by the core) are ``image_url`` parts with ``data:`` URLs;
  ``/tokenize`` gets the same parts, so image tokens are counted exactly.
* **top_k** is sent as vLLM's extra ``top_k`` field.
* **Cache isolation**: on a server with API keys, each request carries
  ``cache_salt``, a digest of its key's cache scope
  (:meth:`~missive.api.GenerationRequest.cache_salt`): vLLM (0.9 and later)
  mixes it into the hash of the request's first prefix-cache block, so only
  requests with the same salt share cached blocks (vLLM docs, "Automatic
  Prefix Caching", cache isolation; ``ChatCompletionRequest.cache_salt``).
  No key, no salt: one scope, as before.
* **Start-up probe** (``settings.startup_probe``, on by default): when the
  model's capabilities include ``tool_choice: "auto"``, :meth:`VLLMDriver.start`
  sends one streamed chat completion with a dummy tool, ``tool_choice:
  "auto"`` and ``max_tokens: 1`` (closed as soon as vLLM accepts it). A vLLM
  started without ``--enable-auto-tool-choice`` answers 400; the model then
  loses ``auto`` from its effective capabilities, with a warning in the
  start-up log naming the flag, so a request relying on it (every Claude
  Code request: tools without ``tool_choice`` mean ``auto``) gets the core's
  400 naming the capability instead of the backend's error. An unreachable
  backend or any other answer only logs a warning; nothing is narrowed.
  Reasoning cannot be probed this way: vLLM does not say whether it runs a
  ``--reasoning-parser`` (without one, reasoning arrives as answer text), so
  ``settings.thinking`` stays the operator's statement.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field

from missive.api import BadGatewayError, Capabilities, GenerationRequest, MissiveError
from missive_openai.driver import OpenAIDriver
from missive_openai.settings import OpenAISettings

__all__ = ["VLLMDriver", "VLLMSettings", "IMAGE_MEDIA_TYPES"]

log = logging.getLogger("missive.vllm")

#: The start-up probe's tool (never called: at most one token is generated).
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "missive_probe",
        "description": "Start-up check; never called.",
        "parameters": {"type": "object", "properties": {}},
    },
}
#: Words of vLLM's 400 for ``auto`` without ``--enable-auto-tool-choice``.
AUTO_REFUSED = "enable-auto-tool-choice"

#: Image types vLLM's multimodal loader decodes (PIL).
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class VLLMSettings(OpenAISettings):
    """The openai settings, with vLLM's defaults and extras.

    Attributes:
        vision: the model takes images (declares ``input_media``).
        thinking: the model reasons and the server runs a ``--reasoning-parser``;
            sends ``chat_template_kwargs.enable_thinking`` per request.
        chat_template_kwargs: passed to the chat template on every request
            (and to ``/tokenize``, so counts match).
        startup_probe: check at start-up that the server accepts
            ``tool_choice: "auto"`` (see the module doc).
    """

    health_path: str = "/health"
    prefill: Literal["refuse", "continue_final_message", "trailing_message"] = "continue_final_message"
    vision: bool = False
    thinking: bool = False
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    startup_probe: bool = True


class VLLMDriver(OpenAIDriver):
    settings_model = VLLMSettings
    exact_prompt_tokens = True
    label = "vllm"
    settings: VLLMSettings

    def refine_capabilities(self, capabilities: Capabilities) -> Capabilities:
        update: dict[str, Any] = {}
        if self.settings.vision:
            update["input_media"] = capabilities.input_media | IMAGE_MEDIA_TYPES
        if self.settings.thinking:
            update["thinking"] = True
        return capabilities.model_copy(update=update)

    def _template_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        kwargs = dict(self.settings.chat_template_kwargs)
        if self.settings.thinking:
            switches = request.thinking.template_kwargs()
            kwargs.update((k, v) for k, v in switches.items() if k != "reasoning_effort")  # a top-level field
        return kwargs

    def extra_fields(self, request: GenerationRequest) -> dict[str, Any]:
        kwargs = self._template_kwargs(request)
        fields: dict[str, Any] = {"chat_template_kwargs": kwargs} if kwargs else {}
        if self.settings.thinking:
            fields["reasoning_effort"] = request.thinking.template_kwargs()["reasoning_effort"]
        salt = request.cache_salt()
        if salt is not None:
            fields["cache_salt"] = salt  # the key's cache scope (module doc: Cache isolation)
        return fields

    async def prompt_tokens(self, request: GenerationRequest, body: dict[str, Any]) -> int:
        """``count`` of ``POST /tokenize`` for ``body``'s chat (exact); also
        learns ``max_model_len`` when no context window is configured.

        Raises:
            OverloadedError: no replica answered.
            BadGatewayError: an answer without an integer ``count``.
        """
        tokenize: dict[str, Any] = {
            "model": body["model"],
            "messages": body["messages"],
            "add_generation_prompt": body.get("add_generation_prompt", True),
            "continue_final_message": body.get("continue_final_message", False),
        }
        for key in ("tools", "chat_template_kwargs"):
            if key in body:
                tokenize[key] = body[key]
        answer = await self.backend_json("POST", "/tokenize", tokenize)
        count = answer.get("count") if isinstance(answer, dict) else None
        if not isinstance(count, int) or count < 0:
            raise BadGatewayError(
                f"the backend of model '{self.model_id}' answered /tokenize without a count"
            )
        limit = answer.get("max_model_len")
        if self.entry.context_window is None and isinstance(limit, int) and limit > 0:
            self._context = limit
        return count

    async def start(self) -> None:
        await super().start()
        if self.settings.startup_probe and "auto" in self.capabilities.tool_choice:
            await self.probe_auto_tool_choice()

    async def probe_auto_tool_choice(self) -> bool | None:
        """Whether the backend accepts ``tool_choice: "auto"`` (see the module
        doc); on a refusal ``auto`` is removed from the model's capabilities.
        None: the probe could not tell (backend unreachable, other error)."""
        body: dict[str, Any] = {
            **self.settings.extra_body,
            "model": self.upstream_model,
            "messages": [{"role": "user", "content": "ping"}],
            "tools": [PROBE_TOOL],
            "tool_choice": "auto",
            "max_tokens": 1,
            "stream": True,
        }
        try:
            async with self._open_stream(body, 0):
                pass  # accepted: closing the stream aborts the generation
        except MissiveError as exc:
            if AUTO_REFUSED in exc.message:
                self.capabilities = self.capabilities.model_copy(
                    update={"tool_choice": self.capabilities.tool_choice - {"auto"}}
                )
                log.warning(
                    "model %s: the vLLM server refuses tool_choice \"auto\" (%s): start it with "
                    "--enable-auto-tool-choice --tool-call-parser <parser>. Until then requests with tools "
                    "and tool_choice auto (Claude Code's) are answered 400; tool_choice now: %s",
                    self.model_id,
                    exc.message,
                    ", ".join(sorted(self.capabilities.tool_choice)) or "none",
                )
                return False
            log.warning(
                "model %s: could not check whether the vLLM server accepts tool_choice \"auto\": %s",
                self.model_id,
                exc.message,
            )
            return None
        except Exception as exc:  # the backend may come up later: not fatal
            log.warning(
                "model %s: could not check whether the vLLM server accepts tool_choice \"auto\": %s",
                self.model_id,
                exc,
            )
            return None
        log.info("model %s: the vLLM server accepts tool_choice \"auto\"", self.model_id)
        return True

    async def discover_context(self) -> int | None:
        """``max_model_len`` of the served model in ``GET /v1/models``."""
        answer = await self.backend_json("GET", "/v1/models")
        for card in answer.get("data", []) if isinstance(answer, dict) else []:
            if isinstance(card, dict) and card.get("id") == self.upstream_model:
                limit = card.get("max_model_len")
                return limit if isinstance(limit, int) and limit > 0 else None
        log.warning(
            "model %s: the backend does not list '%s' in /v1/models", self.model_id, self.upstream_model
        )
        return None
