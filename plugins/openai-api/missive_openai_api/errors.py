"""OpenAI's error envelope for the core's errors.

The wire format (OpenAI API reference, "Error codes"; the ``openai`` Python
SDK's ``APIStatusError``, which reads ``body["error"]``) is::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "n", "code": null}}

The SDKs choose the exception class from the HTTP status alone (400
``BadRequestError``, 401, 403, 404, 409, 422, 429, >= 500
``InternalServerError``), so the status is the part that matters; ``type``
follows OpenAI's own values (``invalid_request_error`` for the 4xx it
answers, ``server_error`` for 5xx) and ``code`` the ones its clients test
(``invalid_api_key``, ``model_not_found``, ``rate_limit_exceeded``,
``context_length_exceeded``).

Missive's ``529 overloaded_error`` (a full admission queue) is sent as
``503``, the status OpenAI uses for an overloaded engine: OpenAI clients
retry a 503 with its ``retry-after`` and know no 529.
"""

from __future__ import annotations

from typing import Any

from missive.api import InvalidRequestError, MissiveError

__all__ = ["OpenAIRequestError", "envelope", "status_of"]

#: Missive's ``error.type`` -> OpenAI's ``(type, code)``.
_TYPES: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("invalid_request_error", "permission_denied"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("rate_limit_exceeded", "rate_limit_exceeded"),
    "overloaded_error": ("server_error", "overloaded"),
    "timeout_error": ("server_error", "timeout"),
}


class OpenAIRequestError(InvalidRequestError):
    """A 400 about the OpenAI request itself, naming its ``param``
    (``messages[2].tool_calls[0].function.arguments``) and, when OpenAI
    has one, its ``code``."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def status_of(error: MissiveError) -> int:
    """The HTTP status OpenAI clients get for ``error`` (529 as 503)."""
    return 503 if error.status == 529 else error.status


def envelope(error: MissiveError) -> dict[str, Any]:
    """OpenAI's error body for ``error``."""
    kind, code = _TYPES.get(error.error_type, ("server_error", None))
    param = getattr(error, "param", None)
    if isinstance(error, OpenAIRequestError):
        code = error.code
    elif error.error_type == "not_found_error" and error.message.startswith("model:"):
        code, param = "model_not_found", "model"
    elif "prompt is too long" in error.message:
        code = "context_length_exceeded"
    if status_of(error) >= 500:
        kind = "server_error"
    return {"error": {"message": error.message, "type": kind, "param": param, "code": code}}
