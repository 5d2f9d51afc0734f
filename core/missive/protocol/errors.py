"""One typed error hierarchy, rendered in one place as the Anthropic error envelope.

Every error a client can see is a :class:`MissiveError` subclass whose class
attributes carry the HTTP status and the envelope's ``error.type``.  Drivers and
plugins raise these; :mod:`missive.server.app` renders them as

    {"type": "error", "error": {"type": ..., "message": ...}, "request_id": "req_..."}

Source: Anthropic API "Errors" page (statuses and types), and
``../shared/reference/messages-contract.md`` section 5 for exact wordings that
clients pattern-match (``prompt is too long``, ``model: {id}``).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "MissiveError",
    "InvalidRequestError",
    "CapabilityError",
    "MediaError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RequestTooLargeError",
    "RateLimitError",
    "ApiError",
    "BadGatewayError",
    "TimeoutError_",
    "OverloadedError",
    "PromptTooLongError",
    "ModelNotFoundError",
]


class MissiveError(Exception):
    """Base of every error that reaches a client.

    Attributes:
        status: HTTP status code of the response.
        error_type: the envelope's ``error.type`` string.
        retry_after: seconds for a ``retry-after`` header (429/529), or None.
        should_retry: False adds ``x-should-retry: false`` (deterministic failures).
        error_code: the envelope's ``error.details.error_code``, or None for
            no ``details``. The SDKs map ``(status, error_code)`` to typed
            exceptions (``anthropic/_error_classes.py``: thread and
            compaction errors) and branch on it, not on the message.
    """

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "api_error"
    should_retry: ClassVar[bool | None] = None
    error_code: str | None = None

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def envelope(self, request_id: str | None) -> dict[str, object]:
        """The Anthropic error body for this error."""
        error: dict[str, object] = {"type": self.error_type, "message": self.message}
        if self.error_code is not None:
            error["details"] = {"error_code": self.error_code}
        body: dict[str, object] = {"type": "error", "error": error}
        if request_id is not None:
            body["request_id"] = request_id
        return body


class InvalidRequestError(MissiveError):
    status = 400
    error_type = "invalid_request_error"
    should_retry = False


class CapabilityError(InvalidRequestError):
    """The request needs something the chosen model's driver does not declare.

    The message names the capability, the model and the driver, and what the
    driver does support, so the user can pick another model or drop the field.
    """

    def __init__(
        self, *, capability: str, model: str, driver: str, supported: str, where: str | None = None
    ) -> None:
        """``where``: the path of the part of the request that needs it
        (``messages.0.content.1``), put first as in the API's messages."""
        message = f"{capability} is not supported by model '{model}' (driver '{driver}')"
        message += f"; supported: {supported}"
        super().__init__(f"{where}: {message}" if where else message)
        self.capability = capability


class MediaError(InvalidRequestError):
    """An image or document block that cannot be used: a bad source, a
    mislabeled or corrupt file, a limit exceeded, a refused URL.

    The message starts with the block's field path
    (``messages.0.content.1.source: ...``) so the client knows which block.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class PromptTooLongError(InvalidRequestError):
    """Rendered prompt exceeds the context window.

    Wording is the API's exactly (Claude Code compacts on it):
    ``prompt is too long: {N} tokens > {M} maximum``.
    """

    def __init__(self, prompt_tokens: int, maximum: int) -> None:
        super().__init__(f"prompt is too long: {prompt_tokens} tokens > {maximum} maximum")
        self.prompt_tokens = prompt_tokens
        self.maximum = maximum


class AuthenticationError(MissiveError):
    status = 401
    error_type = "authentication_error"
    should_retry = False


class PermissionDeniedError(MissiveError):
    status = 403
    error_type = "permission_error"
    should_retry = False


class NotFoundError(MissiveError):
    status = 404
    error_type = "not_found_error"
    should_retry = False


class ModelNotFoundError(NotFoundError):
    """Unknown model id; the API's wording is ``model: {id}``."""

    def __init__(self, model: str) -> None:
        super().__init__(f"model: {model}")
        self.model = model


class RequestTooLargeError(MissiveError):
    status = 413
    error_type = "request_too_large"
    should_retry = False


class RateLimitError(MissiveError):
    status = 429
    error_type = "rate_limit_error"


class ApiError(MissiveError):
    status = 500
    error_type = "api_error"


class ModelLoadError(ApiError):
    """A model loaded on demand could not be loaded: its configuration or
    file is wrong, so a retry fails the same way (``x-should-retry: false``)."""

    should_retry = False


class BadGatewayError(MissiveError):
    """The backend answered with something Missive cannot turn into a reply."""

    status = 502
    error_type = "api_error"


class TimeoutError_(MissiveError):
    status = 504
    error_type = "timeout_error"


class OverloadedError(MissiveError):
    """529: no capacity now; the client should retry (the SDKs do, honouring
    ``retry_after`` up to 60 s). Raised by the core when a model's wait queue
    is full or a request waited ``queue_timeout`` (:mod:`missive.serving.admission`),
    and by drivers whose backend is unreachable or busy."""

    status = 529
    error_type = "overloaded_error"
