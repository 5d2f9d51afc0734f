"""The ``[models.<id>.settings]`` table of a ``driver = "markov"`` model::

    [models.markov]
    driver = "markov"
    context_window = 256                    # optional: at most the backend's
    [models.markov.settings]
    base_url = "http://127.0.0.1:8700"      # where markov-backend listens
    seed = 7                                # optional: reproducible sampling

Unknown keys are rejected, so a typo is an error, not a silent default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from missive.api import ConfigError

__all__ = ["MarkovSettings", "parse_settings"]


class MarkovSettings(BaseModel):
    """Validated driver settings.

    Attributes:
        base_url: the backend, ``http://`` or ``https://``.
        seed: sampling seed sent with every request (equal requests then
            answer equally at any temperature); None: random.
        connect_timeout: seconds to connect; failing is a 529 with ``retry-after``.
        read_timeout: seconds without a byte from the backend: a 504.
        retry_after: seconds put in ``retry-after`` when the backend is
            unreachable or busy.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)
    seed: int | None = Field(default=None, ge=0)
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=60.0, gt=0)
    retry_after: int = Field(default=5, ge=0, le=60)

    @field_validator("base_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url.rstrip("/")


def parse_settings(model_id: str, settings: dict[str, Any]) -> MarkovSettings:
    """Validate a model entry's ``settings``.

    Raises:
        ConfigError: naming the model and each bad key, e.g. ``model 'm':
            invalid markov setting settings.base_url: Field required``.
    """
    try:
        return MarkovSettings.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"settings.{'.'.join(str(p) for p in err['loc']) or '?'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"model '{model_id}': invalid markov setting {problems}") from exc
