"""The ``[models.<id>.settings]`` table of a ``driver = "openai"`` model.

Example::

    [models.qwen]
    driver = "openai"
    context_window = 32768              # the server's context; used to clamp and refuse early
    [models.qwen.settings]
    base_urls = ["http://gpu1:8000", "http://gpu2:8000"]   # or base_url = "..."
    model = "Qwen/Qwen3-8B"             # the upstream model name (default: the Missive model id)
    api_key = "sk-..."                  # sent as Authorization: Bearer
    connect_timeout = 5.0               # seconds
    read_timeout = 600.0                # seconds of silence tolerated while streaming
    health_path = "/v1/models"          # probed on a failed replica
    replica_policy = "prefix"           # or "least_outstanding" (default): docs/deployment.md#scaling-out
    prefill = "refuse"                  # or "continue_final_message", "trailing_message"
    capabilities = { tool_choice = ["auto", "any", "tool", "none"], input_media = ["image/png"] }

Unknown keys are rejected (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from missive.api import Capabilities, ConfigError, ReplicaRouting

__all__ = ["OpenAISettings", "parse_settings", "apply_capabilities"]


class OpenAISettings(ReplicaRouting):
    """Validated settings of a model served by an OpenAI-compatible server.

    Attributes:
        base_url: the server's base URL, without ``/v1`` (``http://host:8000``).
        base_urls: several base URLs, replicas of one deployment (see
            :mod:`missive.remote.replicas`); exclusive with ``base_url``.
        model: the ``model`` field sent upstream; None: the Missive model id.
        api_key: sent as ``Authorization: Bearer``; None sends none.
        connect_timeout: seconds to open a connection.
        read_timeout: seconds without a byte from the server before giving up
            (covers a long prefill before the first token).
        health_path: ``GET`` path probing a failed replica.
        prefill: how a final assistant message is continued: ``refuse`` (400),
            ``continue_final_message`` (vLLM/SGLang extra fields
            ``continue_final_message: true, add_generation_prompt: false``), or
            ``trailing_message`` (the server continues a final assistant
            message by itself, as llama-server does).
        extra_body: fields merged into every chat completions request (e.g.
            ``{min_p = 0.05}``); Missive's own fields win.
        capabilities: overrides of the driver's declared capabilities (what
            this server can do: ``tool_choice`` modes, ``input_media``,
            ``sampling``, ``count_tokens``...).
        replica_policy, load_bound, prefix_cache_tokens: how a replica is
            chosen among ``base_urls`` (:class:`missive.routing.policy.ReplicaRouting`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str | None = Field(default=None, min_length=1)
    base_urls: list[str] | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    api_key: str | None = None
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    health_path: str = "/v1/models"
    prefill: Literal["refuse", "continue_final_message", "trailing_message"] = "refuse"
    extra_body: dict[str, Any] = Field(default_factory=dict)
    capabilities: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_url_form(self) -> OpenAISettings:
        if (self.base_url is None) == (self.base_urls is None):
            raise ValueError("set exactly one of base_url or base_urls")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URL {url!r} must start with http:// or https://")
        return self

    @property
    def urls(self) -> list[str]:
        """The replica base URLs, trailing ``/`` and ``/v1`` removed."""
        raw = self.base_urls if self.base_urls is not None else [self.base_url or ""]
        cleaned = []
        for url in raw:
            url = url.rstrip("/")
            if url.endswith("/v1"):
                url = url[: -len("/v1")]
            cleaned.append(url)
        return cleaned


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"settings.{'.'.join(str(p) for p in err['loc']) or '?'}: {err['msg']}" for err in exc.errors()
    )


def parse_settings(
    model_id: str,
    settings: dict[str, Any],
    model: type[OpenAISettings] = OpenAISettings,
    driver: str = "openai",
) -> OpenAISettings:
    """Validate a model entry's ``settings`` with ``model`` (a subclass for vLLM).

    Raises:
        ConfigError: naming the model and each bad key.
    """
    try:
        return model.model_validate(settings)
    except ValidationError as exc:
        raise ConfigError(f"model '{model_id}': invalid {driver} setting {_problems(exc)}") from exc


def apply_capabilities(
    model_id: str, base: Capabilities, overrides: dict[str, Any], driver: str
) -> Capabilities:
    """``base`` with the operator's ``settings.capabilities`` applied and validated.

    Raises:
        ConfigError: an unknown capability or a bad value.
    """
    try:
        return Capabilities.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        problems = "; ".join(
            f"settings.capabilities.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"model '{model_id}': invalid {driver} setting {problems}") from exc
