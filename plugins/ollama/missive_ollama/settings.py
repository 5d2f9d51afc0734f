"""The ``[models.<id>.settings]`` table of a ``driver = "ollama"`` model.

Example::

    [models.qwen3]
    driver = "ollama"
    context_window = 32768            # sent as options.num_ctx on every request
    [models.qwen3.settings]
    model = "qwen3:8b"                # the Ollama model tag
    base_url = "http://127.0.0.1:11434"   # or base_urls = ["http://gpu1:11434", "http://gpu2:11434"]
    keep_alive = "30m"

Unknown keys are rejected (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from missive.api import ConfigError, ReplicaRouting

__all__ = ["OllamaSettings", "parse_settings", "DEFAULT_BASE_URL"]

#: Where Ollama listens by default (``OLLAMA_HOST``).
DEFAULT_BASE_URL = "http://127.0.0.1:11434"


class OllamaSettings(ReplicaRouting):
    """Validated driver settings.

    Attributes:
        model: the Ollama model tag (``qwen3:8b``); ``name`` without a tag
            means ``name:latest``, as Ollama resolves it.
        base_url: the Ollama server.
        base_urls: several Ollama servers serving the same tags, replicas of one
            deployment (see :mod:`missive.remote.replicas`); exclusive with ``base_url``.
        keep_alive: Ollama's ``keep_alive`` (``"30m"``, seconds, ``-1`` forever);
            None: the server's default.
        connect_timeout: seconds to connect; a failure is a 529 with ``retry-after``.
        read_timeout: seconds without a byte from Ollama (model loading and
            prefill included) before the request fails with a 504.
        retry_after: seconds put in ``retry-after`` when Ollama is unreachable or busy.
        think_level: what ``think`` is set to when thinking is on: None sends
            ``true``; ``"low"``/``"medium"``/``"high"`` sends that level (gpt-oss
            takes levels, other models answer 400); ``"effort"`` maps
            ``output_config.effort`` (low/medium/high; max and xhigh → high; unset →
            from ``budget_tokens``, else medium: the thinking plan's level).
        sampling_defaults: ``"api"`` sends the Messages API defaults for unset
            sampling parameters (temperature 1.0, top_p 1.0, top_k 0 = off,
            repeat_penalty 1.0), so a request means the same on every driver;
            ``"model"`` leaves them to the model's Modelfile parameters.
        chars_per_token: starting ratio of the token estimate (see
            :mod:`missive_ollama.estimate`); refined from Ollama's exact counts.
        overflow_check: above this fraction of the context window, the driver
            waits for Ollama to accept the prompt before starting the message,
            so an over-long prompt is a 400 ``prompt is too long`` and not a
            mid-stream error.
        start_wait: seconds to wait for Ollama's first answer before sending
            ``message_start`` anyway (connection refused and unknown models
            answer at once and stay HTTP errors; loading and prefill do not hold
            the client up).
        preload: load the model in Ollama at start-up (``/api/chat`` with no
            messages, answered with ``done_reason: "load"``).
        replica_policy, load_bound, prefix_cache_tokens: how a replica is
            chosen among ``base_urls`` (:class:`missive.routing.policy.ReplicaRouting`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    base_url: str | None = Field(default=None, min_length=1)
    base_urls: list[str] | None = Field(default=None, min_length=1)
    keep_alive: str | int | None = None
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    retry_after: int = Field(default=5, ge=0, le=60)
    think_level: Literal["low", "medium", "high", "effort"] | None = None
    sampling_defaults: Literal["api", "model"] = "api"
    chars_per_token: float = Field(default=3.5, gt=0)
    overflow_check: float = Field(default=0.9, gt=0, le=1)
    start_wait: float = Field(default=0.25, ge=0)
    preload: bool = False

    @model_validator(mode="after")
    def _one_url_form(self) -> OllamaSettings:
        if self.base_url is not None and self.base_urls is not None:
            raise ValueError("set base_url or base_urls, not both")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URL {url!r} must start with http:// or https://")
        return self

    @property
    def urls(self) -> list[str]:
        """The replica base URLs without a trailing ``/`` (default: ``http://127.0.0.1:11434``)."""
        raw = self.base_urls if self.base_urls is not None else [self.base_url or DEFAULT_BASE_URL]
        return [url.rstrip("/") for url in raw]

    @property
    def tag(self) -> str:
        """The model tag as Ollama lists it (``name:latest`` when untagged)."""
        last = self.model.rsplit("/", 1)[-1]
        return self.model if ":" in last else f"{self.model}:latest"


def parse_settings(model_id: str, settings: dict[str, Any]) -> OllamaSettings:
    """Validate a model entry's ``settings``.

    Raises:
        ConfigError: naming the model and each bad key, e.g.
            ``model 'q': invalid ollama setting settings.model: Field required``.
    """
    try:
        return OllamaSettings.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"settings.{'.'.join(str(p) for p in err['loc']) or '?'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"model '{model_id}': invalid ollama setting {problems}") from exc
