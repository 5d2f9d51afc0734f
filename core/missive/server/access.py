"""A request's key in the routes: who it is (401), what it may do (403 for
the admin scope, 404 for a model it may not use), and its limits (429).

* :func:`authenticate`: the request's :class:`~missive.keys.ring.Identity`,
  also kept in ``g.identity`` and named in its record (log line, metrics);
* :func:`require_admin`: 403 ``permission_error`` for a user key on
  ``/v1/status``, ``/metrics``, ``/v1/usage``;
* :func:`check_model`: 404 ``model: {id}`` for a model the key may not use,
  the answer an absent model gets (issue 32: "as if absent");
* :func:`admit`: a ``POST /v1/messages`` counted against the key's limits;
  its ``anthropic-ratelimit-*`` headers are added to the response by
  :func:`add_rate_limit_headers` (an ``after_request`` hook), 429s included.
"""

from __future__ import annotations

from quart import Response, g, request

from ..keys.limits import RateLimited
from ..keys.ring import Identity
from ..keys.service import KeyServices
from ..protocol.errors import ModelNotFoundError, PermissionDeniedError
from .services import services

__all__ = [
    "keys",
    "authenticate",
    "current_identity",
    "require_admin",
    "check_model",
    "admit",
    "add_rate_limit_headers",
]


def keys() -> KeyServices:
    """The app's :class:`~missive.keys.service.KeyServices`."""
    return services().keys


def authenticate() -> Identity:
    """The request's identity (see :meth:`~missive.keys.ring.KeyRing.identify`).

    Raises:
        AuthenticationError: 401, keys are configured and none matches.
    """
    identity = keys().ring.identify(request.headers)
    g.identity = identity
    record = getattr(g, "record", None)
    if record is not None:
        record.key = identity.name
    return identity


def current_identity() -> Identity:
    """The identity :func:`authenticate` found for this request (authenticating now if it has not run)."""
    found = getattr(g, "identity", None)
    return found if isinstance(found, Identity) else authenticate()


def require_admin(identity: Identity, what: str) -> None:
    """Refuse a user key ``what`` (``GET /v1/status``...).

    Raises:
        PermissionDeniedError: 403 ``permission_error``.
    """
    if not identity.admin:
        raise PermissionDeniedError(
            f"{what} needs an admin key; key '{identity.name}' has the user scope "
            "(an admin key has scope = \"admin\" in its [keys.NAME] table)"
        )


def check_model(identity: Identity, model_id: str, requested: str) -> None:
    """Refuse a configured model ``model_id`` (reached as ``requested``)
    the key may not use, as an absent model is refused.

    Raises:
        ModelNotFoundError: 404 ``model: {requested}``.
    """
    if not identity.may_use(model_id):
        raise ModelNotFoundError(requested)


def admit(identity: Identity) -> None:
    """Count this ``POST /v1/messages`` against ``identity``'s limits; its
    tokens are counted, and its running count ended, when its record finishes.

    Raises:
        RateLimited: 429 ``rate_limit_error`` with ``retry-after``.
    """
    try:
        ticket = keys().limiter.admit(identity)
    except RateLimited as exc:
        g.rate_limit_headers = exc.headers
        raise
    if ticket is None:
        return
    g.rate_limit_headers = ticket.headers
    record = g.record

    def finish() -> None:
        ticket.finish(
            (record.input_tokens or 0) + (record.cache_creation_input_tokens or 0), record.output_tokens or 0
        )

    record.at_finish(finish)


async def add_rate_limit_headers(response: Response) -> Response:
    """The ``after_request`` hook sending a limited key's ``anthropic-ratelimit-*`` headers."""
    headers = getattr(g, "rate_limit_headers", None)
    if headers:
        response.headers.update(headers)
    return response
