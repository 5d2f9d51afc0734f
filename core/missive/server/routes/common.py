"""Helpers shared by the API routes: auth, body reading, ignored-field policy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from quart import g, request

from ...config import Config
from ...context_management import HANDLED_BETAS as CONTEXT_BETAS
from ...kernel.plugins import Kernel
from ...keys.ring import Identity
from ...messages.prepare import Notes
from ...models.table import ModelTable
from ...protocol.api_version import check_api_version
from ...protocol.errors import InvalidRequestError
from ...protocol.schema.ignored import collect_ignored
from ...protocol.validation import parse_json, validate_body
from ...serving.admission import Admission
from ...serving.drain import Drain
from ...serving.prepared import Caller
from ...serving.record import RequestRecord
from ...threads import HANDLED_BETAS as THREAD_BETAS
from .. import access
from ..services import services

__all__ = [
    "config_kernel_models",
    "admission",
    "drain",
    "record",
    "authenticate",
    "authenticate_admin",
    "resolve_for",
    "read_request",
    "api_version",
    "read_raw_body",
    "page_limit",
    "caller_of",
    "report_notes",
]

log = logging.getLogger("missive.request")

M = TypeVar("M", bound=BaseModel)


def config_kernel_models() -> tuple[Config, Kernel, ModelTable]:
    """The app's configuration, plugin kernel and model table."""
    found = services()
    return found.config, found.kernel, found.models


def drain() -> Drain:
    """The app's :class:`~missive.server.shutdown.Drain` (graceful shutdown)."""
    return services().drain


def admission() -> Admission:
    """The app's :class:`~missive.serving.admission.Admission` (per-model permits and queues)."""
    return services().admission


def record() -> RequestRecord:
    """This request's :class:`~missive.serving.record.RequestRecord` (log line, metrics)."""
    return cast(RequestRecord, g.record)


def authenticate() -> Identity:
    """The request's key (:func:`missive.server.access.authenticate`).

    Raises:
        AuthenticationError: 401, keys are configured and none matches.
    """
    return access.authenticate()


def resolve_for(identity: Identity, requested: str) -> str:
    """The configured model serving ``requested`` for the key ``identity``
    (:meth:`missive.serving.choice.ModelChoice.resolve`).

    Raises:
        ModelNotFoundError: 404, no served model matches, or the key may not use it.
    """
    return services().choice.resolve(requested, identity.may_use)


def authenticate_admin(what: str) -> Identity:
    """The request's key, which must have the admin scope.

    Raises:
        AuthenticationError: 401.
        PermissionDeniedError: 403, a user key.
    """
    identity = access.authenticate()
    access.require_admin(identity, what)
    return identity


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
    config, _, _ = config_kernel_models()
    raw = await read_raw_body()
    version = api_version()  # the header first, as the API
    body: Any = parse_json(raw)
    if expand is not None:
        body = expand(body)
    validated = validate_body(model, body)
    ignored = [*collect_ignored(validated), *version]
    if ignored and config.server.strict:
        raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(ignored))
    note_betas(ignored)
    return validated


async def read_raw_body() -> bytes:
    """The request's body as bytes (kept for ``server.capture_dir``).

    Raises:
        RequestTooLargeError: via Quart, over the route's body limit.
        InvalidRequestError: a compressed body (``Content-Encoding`` other
            than ``identity``): said so, not read as JSON that is not valid.
    """
    config, _, _ = config_kernel_models()
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise InvalidRequestError(
            f"Content-Encoding: {encoding} is not supported for request bodies; send the body uncompressed"
        )
    raw = await request.get_data(cache=False)
    raw = raw if isinstance(raw, bytes) else raw.encode()
    if config.server.capture_dir:
        g.capture_body = raw
    return raw


def api_version() -> list[str]:
    """The ``anthropic-version`` header checked
    (:func:`missive.protocol.api_version.check_api_version`; a repeated
    header joined with ``", "``): ``missive-ignored`` entries.

    Raises:
        InvalidRequestError: not a version of the API.
    """
    values = request.headers.getlist("anthropic-version")
    return check_api_version(", ".join(values) if values else None)


def note_betas(ignored: list[str]) -> None:
    """Report ``ignored`` request parts and every ``anthropic-beta`` value
    (logged, and sent back in the ``missive-ignored`` header). Betas are
    reported but never rejected, even in strict mode: clients send new
    ones with every release (contract section 1). Betas of features Missive
    implements (:data:`missive.threads.HANDLED_BETAS`,
    :data:`missive.context_management.HANDLED_BETAS`) are not reported."""
    handled = THREAD_BETAS | CONTEXT_BETAS
    # Every occurrence of the header, each read as UTF-8 (ASGI gives the bytes,
    # Werkzeug decodes them as Latin-1: "föö" would come back as "fÃ¶Ã¶").
    values = [_utf8(value) for value in request.headers.getlist("anthropic-beta")]
    betas = [b.strip() for b in ",".join(values).split(",") if b.strip() and b.strip() not in handled]
    ignored = [*ignored, *(f"anthropic-beta={b}" for b in betas)]
    if ignored:
        log.info("ignored: %s", ", ".join(ignored))
        g.ignored = ignored


def _utf8(value: str) -> str:
    """A header value Werkzeug decoded as Latin-1, read as the UTF-8 it was
    sent in (unchanged when it is not UTF-8)."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


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


def caller_of(facts: RequestRecord) -> Caller:
    """The service's view of this HTTP request (:class:`~missive.serving.prepared.Caller`)."""
    config, _, _ = config_kernel_models()
    return Caller(
        request_id=g.request_id,
        record=facts,
        notes=Notes(strict=config.server.strict),
        headers={name.lower(): value for name, value in request.headers.items()},
    )


def report_notes(notes: Notes) -> None:
    """Put what the preparation noted into the response's headers
    (``missive-ignored``, ``missive-dropped-thinking``: :mod:`missive.server.app`)."""
    if notes.ignored:
        g.ignored = [*getattr(g, "ignored", []), *notes.ignored]
    if notes.dropped_thinking:
        g.dropped_thinking = list(notes.dropped_thinking)
