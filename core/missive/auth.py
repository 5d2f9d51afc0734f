"""API key check: ``x-api-key`` or ``Authorization: Bearer`` (contract section 1).

Keys are compared with :func:`hmac.compare_digest` against every configured
key (no early exit), so timing does not reveal a key's prefix. With no keys
configured every request is accepted (the server then binds to loopback
only, see :meth:`missive.config.Config.check_bind`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Protocol

from .errors import AuthenticationError

__all__ = ["check_api_key", "key_identity", "HeaderLookup"]


class HeaderLookup(Protocol):
    """What is read of the request headers: a lookup by name, None when
    absent (a dict with lower-case names, or Werkzeug's case-insensitive
    ``Headers``)."""

    def get(self, key: str, /) -> str | None: ...


def _presented(headers: HeaderLookup) -> list[str]:
    found = []
    key = headers.get("x-api-key")
    if key:
        found.append(key.strip())
    auth = headers.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        found.append(token.strip())
    return found


def check_api_key(headers: HeaderLookup, keys: Sequence[str]) -> None:
    """Raise :class:`AuthenticationError` unless a presented key matches.

    Clients may send both headers; either matching is enough.
    """
    if not keys:
        return
    presented = _presented(headers)
    if not presented:
        raise AuthenticationError("x-api-key header is required")
    ok = False
    for candidate in presented:
        for key in keys:
            ok |= hmac.compare_digest(candidate.encode(), key.encode())
    if not ok:
        raise AuthenticationError("invalid x-api-key")


def key_identity(headers: HeaderLookup, keys: Sequence[str]) -> str:
    """Who a request is, for data kept per API key (message threads, cache
    diagnostics: :mod:`missive.threads`): a SHA-256 digest of the configured
    key it presented, never the key itself; ``""`` with no keys configured
    (everyone is one identity). Call after :func:`check_api_key`.

    Every presented key is compared with every configured one, as there, so
    the time taken does not depend on which matched. With both headers
    matching different keys, the ``x-api-key`` one counts.
    """
    found = ""
    for candidate in reversed(_presented(headers)):
        for key in keys:
            if hmac.compare_digest(candidate.encode(), key.encode()):
                found = hashlib.sha256(key.encode()).hexdigest()
    return found
