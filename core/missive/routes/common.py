"""Helpers shared by the API routes: auth, body reading, ignored-field policy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from quart import current_app, g, request

from ..admission import Admission
from ..auth import check_api_key
from ..config import Config
from ..errors import InvalidRequestError
from ..kernel import Kernel
from ..media.pipeline import MediaPipeline
from ..model_table import ModelTable
from ..record import RequestRecord
from ..schema.ignored import collect_ignored
from ..shutdown import Drain
from ..thinking.signing import Signer
from ..threads import HANDLED_BETAS
from ..validation import parse_json, validate_body

__all__ = [
    "state", "signer", "media_pipeline", "admission", "drain", "record", "authenticate", "read_request",
    "read_raw_body", "note_ignored", "page_limit",
]

log = logging.getLogger("missive.request")

M = TypeVar("M", bound=BaseModel)


def state() -> tuple[Config, Kernel, ModelTable]:
    ext = current_app.extensions["missive"]
    return ext["config"], ext["kernel"], ext["models"]


def signer() -> Signer:
    """The server's thinking-block :class:`~missive.thinking.signing.Signer`."""
    return cast(Signer, current_app.extensions["missive"]["signer"])


def media_pipeline() -> MediaPipeline:
    """The app's :class:`~missive.media.pipeline.MediaPipeline`."""
    return cast(MediaPipeline, current_app.extensions["missive"]["media"])


def drain() -> Drain:
    """The app's :class:`~missive.shutdown.Drain` (graceful shutdown)."""
    return cast(Drain, current_app.extensions["missive"]["drain"])


def admission() -> Admission:
    """The app's :class:`~missive.admission.Admission` (per-model slots and queues)."""
    return cast(Admission, current_app.extensions["missive"]["admission"])


def record() -> RequestRecord:
    """This request's :class:`~missive.record.RequestRecord` (log line, metrics)."""
    return cast(RequestRecord, g.record)


def authenticate() -> None:
    config, _, _ = state()
    check_api_key(request.headers, config.server.api_keys)


async def read_request(model: type[M], expand: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> M:
    """Read, validate and police one request body.

    ``expand``: applied to the parsed body before validation (a message
    thread's continue becomes the whole conversation: :mod:`missive.threads`).

    Unknown fields and block types, and every ``anthropic-beta`` value, are
    recorded in ``g.ignored`` (sent as the ``missive-ignored`` header and
    logged); in strict mode unknown fields and blocks are a 400 instead (betas
    never are).

    Raises:
        InvalidRequestError: bad JSON, failed validation, or (strict) ignored fields.
        RequestTooLargeError: via Quart, body over ``server.max_body_bytes``.
    """
    config, _, _ = state()
    raw = await read_raw_body()
    body: Any = parse_json(raw)
    if expand is not None:
        body = expand(body)
    validated = validate_body(model, body)
    ignored = collect_ignored(validated)
    if ignored and config.server.strict:
        raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(ignored))
    note_betas(ignored)
    return validated


async def read_raw_body() -> bytes:
    """The request's body as bytes (kept for ``server.capture_dir``).

    Raises:
        RequestTooLargeError: via Quart, over the route's body limit.
    """
    config, _, _ = state()
    raw = await request.get_data(cache=False)
    raw = raw if isinstance(raw, bytes) else raw.encode()
    if config.server.capture_dir:
        g.capture_body = raw
    return raw


def note_betas(ignored: list[str]) -> None:
    """Report ``ignored`` request parts and every ``anthropic-beta`` value
    (logged, and sent back in the ``missive-ignored`` header). Betas are
    reported but never rejected, even in strict mode: clients send new
    ones with every release (contract section 1). Betas of features Missive
    implements (:data:`missive.threads.HANDLED_BETAS`) are not reported."""
    betas = [b.strip() for b in request.headers.get("anthropic-beta", "").split(",")
             if b.strip() and b.strip() not in HANDLED_BETAS]
    ignored = [*ignored, *(f"anthropic-beta={b}" for b in betas)]
    if ignored:
        log.info("ignored: %s", ", ".join(ignored))
        g.ignored = ignored


def page_limit() -> int:
    """The ``limit`` query parameter of a listing: 1-1000, default 20 (the API's).

    Raises:
        InvalidRequestError: not an integer, or out of range.
    """
    raw = request.args.get("limit", "20")
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidRequestError(f"limit: Input should be a valid integer, got {raw!r}") from None
    if not 1 <= limit <= 1000:
        raise InvalidRequestError("limit: Input should be between 1 and 1000")
    return limit


def note_ignored(paths: list[str]) -> None:
    """Report more ignored request parts (found after validation, e.g. server
    tools); a 400 in strict mode.

    Raises:
        InvalidRequestError: strict mode.
    """
    if not paths:
        return
    config, _, _ = state()
    if config.server.strict:
        raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(paths))
    log.info("ignored: %s", ", ".join(paths))
    g.ignored = [*getattr(g, "ignored", []), *paths]
