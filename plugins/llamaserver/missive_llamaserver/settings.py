"""The ``[models.<id>.settings]`` table of a ``driver = "llamaserver"`` model.

Example::

    [models.qwen3]
    driver = "llamaserver"
    [models.qwen3.settings]
    base_urls = ["http://gpu1:8080", "http://gpu2:8080"]   # or base_url = "http://127.0.0.1:8080"
    thinking = true            # the model reasons (Qwen3, DeepSeek-R1 distills...)
    connect_timeout = 5.0
    read_timeout = 600.0

Everything the ``openai`` driver takes (``base_url(s)``, ``model``,
``api_key``, timeouts, ``health_path``, ``prefill``, ``extra_body``,
``capabilities``) plus the keys of :class:`LlamaServerSettings`. Unknown keys
are rejected.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from missive_openai.settings import OpenAISettings

__all__ = ["LlamaServerSettings"]


class LlamaServerSettings(OpenAISettings):
    """The openai settings with llama-server's defaults and extras.

    Attributes:
        health_path: ``/health`` (llama-server answers 200 once the model is
            loaded, 503 ``Loading model`` before).
        prefill: ``trailing_message``: llama-server continues a final
            assistant message by itself (``--prefill-assistant``, on by
            default; ``oaicompat_chat_params_parse`` in
            ``tools/server/server-common.cpp``).
        thinking: the model reasons; declares ``thinking`` and sends, per
            request, the reasoning switches (``chat_template_kwargs``
            ``enable_thinking``/``thinking``, ``reasoning_effort``: true and
            the effort for ``thinking`` ``enabled``/``adaptive``) and
            ``reasoning_budget_tokens`` for a budget. The reasoning arrives as
            ``delta.reasoning_content`` (``reasoning_format: "deepseek"``).
        chat_template_kwargs: passed to the chat template on every request
            (and to ``/apply-template``, so counts match).
        sampling_defaults: ``"model"`` (the default) leaves unset sampling
            parameters to llama-server, which applies the model's
            recommended values (the GGUF's ``general.sampling.*`` keys,
            read by llama.cpp's ``common`` where its command line sets none),
            then its command line (``--temp``, ``--top-k``...), then its own
            defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05);
            ``"server"`` is the same. ``"api"`` sends the Messages API's
            defaults for them (temperature 1.0, ``top_p`` 1.0, ``top_k`` 0
            = off, ``min_p`` 0 = off), so a request samples the same on every
            driver, but Claude Code, which sends no ``temperature``, then
            runs every model at 1.0 with no cut, whatever its authors
            recommend.
        cache_prompt: send ``cache_prompt`` (llama-server reuses the KV cache of
            the longest matching prefix; reported as ``cache_read_input_tokens``).
        start_wait: seconds to wait for llama-server's response headers before
            sending ``message_start`` anyway. llama-server sends its headers
            only with the first token (after queueing and the whole prefill),
            but refuses a bad request at once; the wait keeps such refusals
            HTTP errors without holding the client up during a long prefill.
    """

    health_path: str = "/health"
    prefill: Literal["refuse", "continue_final_message", "trailing_message"] = "trailing_message"
    thinking: bool = False
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    sampling_defaults: Literal["model", "server", "api"] = "model"
    cache_prompt: bool = True
    start_wait: float = Field(default=0.25, ge=0)
