"""The Message Batches API's shapes: ids, times, the batch object, result
lines, and the create body's own rules.

Source: the API reference ("Create a Message Batch", "Retrieve a Message
Batch", "Retrieve Message Batch results") and the official Python SDK's
``anthropic/types/messages/`` (``MessageBatch``, ``MessageBatchRequestCounts``,
``MessageBatchIndividualResponse``, ``DeletedMessageBatch``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..protocol.errors import InvalidRequestError

__all__ = [
    "BatchRow",
    "CUSTOM_ID",
    "RESULT_TYPES",
    "rfc3339",
    "batch_object",
    "deleted_object",
    "errored_result",
    "check_create_body",
]

#: The API's pattern for ``custom_id``.
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: Every ``result.type`` of a results line.
RESULT_TYPES = ("succeeded", "errored", "canceled", "expired")


def rfc3339(seconds: float | None) -> str | None:
    """Unix ``seconds`` as the API writes times (``2024-08-20T18:37:24.100435Z``); None stays None."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class BatchRow:
    """One batch as stored (times in Unix seconds; counts of requests with
    a result, by type; ``total`` requests in all; the ``owner`` key's name)."""

    id: str
    created_at: float
    expires_at: float
    ended_at: float | None
    cancel_initiated_at: float | None
    archived_at: float | None
    total: int
    succeeded: int
    errored: int
    canceled: int
    expired: int
    owner: str | None = None  # the name of the key that created it (None: created before owners were kept)

    @property
    def processing(self) -> int:
        """Requests without a result yet."""
        return self.total - self.succeeded - self.errored - self.canceled - self.expired

    @property
    def processing_status(self) -> str:
        """``in_progress``, ``canceling`` (cancel asked, requests still
        running) or ``ended``."""
        if self.ended_at is not None:
            return "ended"
        return "canceling" if self.cancel_initiated_at is not None else "in_progress"


def batch_object(row: BatchRow, base_url: str) -> dict[str, Any]:
    """The API's ``message_batch`` object for ``row``; ``results_url`` (under
    ``base_url``, the server's address as the client reached it) once it has
    ended and until it is archived.

    Missive's difference (docs/api-compatibility.md): ``request_counts`` move
    from ``processing`` to their result as each request ends, where the API
    moves them all when the batch ends; the sum is always ``total``.
    """
    ended = row.ended_at is not None and row.archived_at is None
    return {
        "id": row.id,
        "type": "message_batch",
        "processing_status": row.processing_status,
        "request_counts": {
            "processing": row.processing,
            "succeeded": row.succeeded,
            "errored": row.errored,
            "canceled": row.canceled,
            "expired": row.expired,
        },
        "ended_at": rfc3339(row.ended_at),
        "created_at": rfc3339(row.created_at),
        "expires_at": rfc3339(row.expires_at),
        "archived_at": rfc3339(row.archived_at),
        "cancel_initiated_at": rfc3339(row.cancel_initiated_at),
        "results_url": f"{base_url.rstrip('/')}/v1/messages/batches/{row.id}/results" if ended else None,
    }


def deleted_object(batch: str) -> dict[str, str]:
    """The answer to a delete: ``{"id": ..., "type": "message_batch_deleted"}``."""
    return {"id": batch, "type": "message_batch_deleted"}


def errored_result(error_type: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    """An ``errored`` result: the error envelope the same request would have
    been answered with on its own (``{"type": "error", "error": {...}}``)."""
    error: dict[str, Any] = {"type": "error", "error": {"type": error_type, "message": message}}
    if request_id is not None:
        error["request_id"] = request_id
    return {"type": "errored", "error": error}


def check_create_body(body: Any, max_requests: int) -> list[tuple[str, Any]]:
    """The ``(custom_id, params)`` pairs of a create body, in order.

    Only the batch's own shape is checked here (a bad one fails the whole
    create with a 400, as in the API): ``requests`` a list of 1 to
    ``max_requests`` objects, each with a ``custom_id`` matching
    :data:`CUSTOM_ID`, unique in the batch, and a ``params`` object. Each
    ``params`` is checked as a Messages request later; a bad one is that
    request's ``errored`` result, not a failed batch.

    Raises:
        InvalidRequestError: with the field path (``requests.3.custom_id: ...``).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("Input should be a valid dictionary or object")
    requests = body.get("requests")
    if requests is None:
        raise InvalidRequestError("requests: Field required")
    if not isinstance(requests, list):
        raise InvalidRequestError("requests: Input should be a valid list")
    if not requests:
        raise InvalidRequestError("requests: List should have at least 1 item after validation, not 0")
    if len(requests) > max_requests:
        raise InvalidRequestError(
            f"requests: List should have at most {max_requests} items after validation, not {len(requests)}"
        )
    seen: set[str] = set()
    pairs = []
    for i, item in enumerate(requests):
        if not isinstance(item, dict):
            raise InvalidRequestError(f"requests.{i}: Input should be a valid dictionary or object")
        custom_id = item.get("custom_id")
        if custom_id is None:
            raise InvalidRequestError(f"requests.{i}.custom_id: Field required")
        if not isinstance(custom_id, str):
            raise InvalidRequestError(f"requests.{i}.custom_id: Input should be a valid string")
        if not CUSTOM_ID.match(custom_id):
            raise InvalidRequestError(
                f"requests.{i}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'"
            )
        if custom_id in seen:
            raise InvalidRequestError(
                f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}: each custom_id must be unique "
                "within a Message Batch"
            )
        seen.add(custom_id)
        params = item.get("params")
        if params is None:
            raise InvalidRequestError(f"requests.{i}.params: Field required")
        if not isinstance(params, dict):
            raise InvalidRequestError(f"requests.{i}.params: Input should be a valid dictionary or object")
        pairs.append((custom_id, params))
    return pairs
