"""The configured keys and who a request is.

A request presents a key as ``x-api-key`` or ``Authorization: Bearer``
(contract section 1; clients may send both, and either matching is enough:
Claude Code may send the same key in both; with both matching different
configured keys the request is refused, :class:`ConflictingKeys`, as it
does not say whose it is). Only the
SHA-256 of each key is kept: the presented key is hashed once and its digest
compared with every configured digest by :func:`hmac.compare_digest`, with
no early exit, so the time taken depends neither on which key matched nor on
how much of one did.

A key's :class:`Identity` is its name (the ``[keys.NAME]`` table's, or for
the plain ``server.api_keys`` list :func:`~missive.config.keys.derived_name`):
the name owns the key's batches, threads and usage, and is what logs and
metrics say. With no key configured everyone is :data:`ANONYMOUS`, with the
admin scope (such a server stays on loopback unless told otherwise:
:meth:`missive.config.Config.check_bind`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..config.keys import derived_name
from ..protocol.errors import AuthenticationError

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "Identity",
    "KeyRing",
    "ANONYMOUS",
    "HeaderLookup",
    "presented_keys",
    "MissingKey",
    "UnknownKey",
    "ConflictingKeys",
]


class HeaderLookup(Protocol):
    """What is read of the request headers: a lookup by name, None when
    absent (a dict with lower-case names, or Werkzeug's case-insensitive
    ``Headers``)."""

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True)
class Identity:
    """Who a request is.

    Attributes:
        name: the key's name; ``""`` for :data:`ANONYMOUS`.
        scope: ``user`` or ``admin``.
        models: configured model ids or globs the key may use (None: all).
        limits: the key's limits by field name (:data:`~missive.config.keys.LIMIT_FIELDS`).
        row: the key's row in the shared limit table (:mod:`.limits`).
    """

    name: str
    scope: str = "user"
    models: tuple[str, ...] | None = None
    limits: dict[str, int] = field(default_factory=dict)
    row: int = -1

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    def may_use(self, model_id: str) -> bool:
        """Whether this key may use the configured model ``model_id``."""
        return self.models is None or any(fnmatch.fnmatchcase(model_id, pattern) for pattern in self.models)

    def owns(self, owner: str | None) -> bool:
        """Whether this key may see what ``owner`` owns (a batch): its own,
        or anything for an admin key. ``None`` (rows from before owners were
        kept) is an admin key's only."""
        return self.admin or (owner is not None and owner == self.name)


#: Everyone, on a server with no key configured.
ANONYMOUS = Identity("", "admin")


def presented_keys(headers: HeaderLookup) -> list[str]:
    """The keys a request presents: ``x-api-key``, then a Bearer token.

    Raises:
        ConflictingKeys: a header repeated with different values (Werkzeug's
            ``Headers`` keeps each occurrence): which key owns the request
            would depend on header order.
    """
    found = []
    for name in ("x-api-key", "authorization"):
        values = _occurrences(headers, name)
        if (different := len({value.strip() for value in values})) > 1:
            raise ConflictingKeys(f"the request sends {different} different {name} headers; send one key")
        value = values[0] if values else ""
        if name == "authorization":
            scheme, _, value = value.partition(" ")
            if scheme.lower() != "bearer":
                continue
        if value.strip():
            found.append(value.strip())
    return found


def _occurrences(headers: HeaderLookup, name: str) -> list[str]:
    """Every value of header ``name``: each occurrence where ``headers``
    keeps them (``getlist``), else the one value."""
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return [str(value) for value in getlist(name)]
    value = headers.get(name)
    return [] if value is None else [value]


class MissingKey(AuthenticationError):
    """401: keys are configured and the request presents none."""


class UnknownKey(AuthenticationError):
    """401: no configured key matches the one presented.

    Attributes:
        presented: the key presented (the ``x-api-key`` one when both are),
            for a door that quotes it masked, as OpenAI does.
    """

    def __init__(self, message: str, presented: str) -> None:
        super().__init__(message)
        self.presented = presented


class ConflictingKeys(AuthenticationError):
    """401: ``x-api-key`` and ``Authorization: Bearer`` match different keys."""


class KeyRing:
    """The configured keys: ``[keys.NAME]`` tables, then ``server.api_keys``
    (user keys, named by :func:`~missive.config.keys.derived_name`)."""

    def __init__(self, config: Config) -> None:
        entries: list[tuple[bytes, Identity, bool]] = []
        for name, entry in config.keys.items():
            identity = Identity(
                name,
                entry.scope,
                None if entry.models is None else tuple(entry.models),
                entry.limits(),
                len(entries),
            )
            entries.append((bytes.fromhex(entry.key_sha256), identity, entry.enabled))
        for key in config.server.api_keys:
            identity = Identity(derived_name(key), row=len(entries))
            entries.append((hashlib.sha256(key.encode("utf-8")).digest(), identity, True))
        self._entries = entries
        self.by_name = {identity.name: identity for _, identity, _ in entries}

    @property
    def required(self) -> bool:
        """Requests must present a key (some key is configured)."""
        return bool(self._entries)

    @property
    def identities(self) -> list[Identity]:
        """Every configured key's identity, in configuration order."""
        return [identity for _, identity, _ in self._entries]

    def identify(self, headers: HeaderLookup) -> Identity:
        """The identity of the key the request presents.

        Raises:
            AuthenticationError: keys are configured and none was presented,
                none matches, or the matching key is disabled.
        """
        if not self._entries:
            return ANONYMOUS
        presented = presented_keys(headers)
        if not presented:
            raise MissingKey("x-api-key header is required")
        found: Identity | None = None
        enabled = False
        matched: set[str] = set()
        for candidate in reversed(presented):  # the x-api-key one last: it wins
            digest = hashlib.sha256(candidate.encode("utf-8")).digest()
            for known, identity, on in self._entries:
                if hmac.compare_digest(digest, known):
                    found, enabled = identity, on
                    matched.add(identity.name)
        if len(matched) > 1:
            raise ConflictingKeys(
                "the x-api-key and Authorization: Bearer headers name different API keys; send one key"
            )
        if found is None:
            raise UnknownKey("invalid x-api-key", presented[0])
        if not enabled:
            raise AuthenticationError(f"API key '{found.name}' is disabled on this server")
        return found
