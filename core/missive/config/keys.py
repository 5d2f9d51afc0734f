"""``[keys.NAME]``: a named API key, stored as a hash, with its scope, the
models it may use and its limits (docs/configuration.md#keysname).

Only pydantic here: :mod:`missive.config` builds on it, and everything else
of :mod:`missive.keys` builds on the configuration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

__all__ = [
    "KeyEntry",
    "UsageConfig",
    "LIMIT_FIELDS",
    "KEY_NAME",
    "DERIVED_NAME",
    "hash_key",
    "derived_name",
    "check_key_name",
    "cache_scope_of",
]

#: A key's name: what owns its batches, threads and usage, and what logs and
#: metric labels say. Letters, digits, ``_``, ``-`` and ``.``, 1 to 64.
KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The names given to the keys of the plain ``server.api_keys`` list
#: (:func:`derived_name`); no ``[keys.NAME]`` table may take one.
DERIVED_NAME = re.compile(r"^key-[0-9a-f]{12}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: Domain separation of :func:`derived_name` from :func:`hash_key`: the name
#: of a plain key is not the ``key_sha256`` of the key, nor a prefix of it.
_NAME_SALT = b"missive key name\x00"

#: The limit fields of a key, in the order the docs list them.
LIMIT_FIELDS = (
    "requests_per_minute",
    "input_tokens_per_minute",
    "output_tokens_per_minute",
    "input_tokens_per_day",
    "output_tokens_per_day",
    "concurrent_requests",
)


def hash_key(key: str) -> str:
    """The ``key_sha256`` of ``key``: the hex SHA-256 of its UTF-8 bytes
    (what ``missive keys new`` prints, and ``printf %s KEY | sha256sum``)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def derived_name(key: str) -> str:
    """The name of a key of the plain ``server.api_keys`` list: ``key-`` and
    12 hex digits of a salted SHA-256 of it. Stable across restarts and list
    reorders (it owns the key's batches), and neither the key nor its hash."""
    return "key-" + hashlib.sha256(_NAME_SALT + key.encode("utf-8")).hexdigest()[:12]


def check_key_name(name: str) -> str:
    """``name`` when it can name a ``[keys.NAME]`` table.

    Raises:
        ValueError: bad characters or length, or the form of a derived name.
    """
    if not KEY_NAME.match(name):
        raise ValueError(
            f"key name {name!r}: use 1 to 64 letters, digits, '_', '-' or '.', starting "
            "with a letter or digit"
        )
    if DERIVED_NAME.match(name):
        raise ValueError(
            f"key name {name!r}: names of the form key-<12 hex digits> are those Missive "
            "gives the keys of server.api_keys; choose another"
        )
    return name


def cache_scope_of(keys: Mapping[str, KeyEntry], name: str | None) -> str | None:
    """The prompt-cache scope of the key named ``name`` (``[keys.NAME]``'s
    or a ``server.api_keys`` key's derived name): ``scope:<cache_scope>``
    when its table names one, else ``key:<name>``, a scope of its own; None
    for an open server (``name`` empty or None: one scope for everyone).

    No cached state computed for one scope serves a request of another
    (docs/operations.md#prompt-cache-scopes), as the Anthropic and OpenAI
    APIs keep prompt caches apart between organizations (Anthropic,
    "Prompt caching": "Cache isolation"; OpenAI, "Prompt caching":
    "Prompt caches are not shared between organizations"). The two
    prefixes keep a key's own scope apart from a named one (a key name has
    no ``:``)."""
    if not name:
        return None
    entry = keys.get(name)
    if entry is not None and entry.cache_scope is not None:
        return f"scope:{entry.cache_scope}"
    return f"key:{name}"


class KeyEntry(BaseModel):
    """One ``[keys.NAME]`` table.

    Attributes:
        key_sha256: the hex SHA-256 of the key (``missive keys new NAME``
            makes a key and prints it): the file holds no secret.
        scope: ``user`` (its own batches, the models it may use) or
            ``admin`` (also every batch, ``/v1/status``, ``/metrics`` and
            ``/v1/usage``).
        models: configured model ids or ``fnmatch`` globs of them this key
            may use; others answer 404 as if absent (None: every model).
        mcp_servers: ``fnmatch`` globs of the MCP server URLs this key's
            requests may name in ``mcp_servers`` (None: the server-wide
            ``server_tools.mcp_servers``; :mod:`missive.tools.mcp`).
        cache_scope: the prompt-cache scope the key shares with the keys
            naming the same one (None: a scope of its own;
            :func:`cache_scope_of`).
        enabled: false refuses the key (401) without removing its table.
        requests_per_minute, input_tokens_per_minute, output_tokens_per_minute,
            input_tokens_per_day, output_tokens_per_day, concurrent_requests:
            the key's limits on ``POST /v1/messages`` (None: no limit;
            :mod:`missive.keys.limits`).
    """

    model_config = ConfigDict(extra="forbid")

    key_sha256: str
    scope: Literal["user", "admin"] = "user"
    models: list[str] | None = None
    mcp_servers: list[str] | None = None
    cache_scope: str | None = None
    enabled: StrictBool = True
    requests_per_minute: int | None = Field(default=None, ge=1)
    input_tokens_per_minute: int | None = Field(default=None, ge=1)
    output_tokens_per_minute: int | None = Field(default=None, ge=1)
    input_tokens_per_day: int | None = Field(default=None, ge=1)
    output_tokens_per_day: int | None = Field(default=None, ge=1)
    concurrent_requests: int | None = Field(default=None, ge=1)

    @field_validator("key_sha256", mode="before")
    @classmethod
    def _hex_digest(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip().lower()
            if not _SHA256.match(value):
                raise ValueError(
                    "must be the 64 hex digits of the key's SHA-256 (missive keys new NAME "
                    "prints the line; or printf %s KEY | sha256sum)"
                )
        return value

    @field_validator("cache_scope")
    @classmethod
    def _scope_name(cls, value: str | None) -> str | None:
        if value is not None and not KEY_NAME.match(value):
            raise ValueError("use 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit")
        return value

    @field_validator("models")
    @classmethod
    def _no_blank_model(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not pattern.strip() for pattern in value):
            raise ValueError("a model id or glob is empty")
        return value

    def limits(self) -> dict[str, int]:
        """The limits set, by field name."""
        return {name: getattr(self, name) for name in LIMIT_FIELDS if getattr(self, name) is not None}


class UsageConfig(BaseModel):
    """``[usage]``: what ``GET /v1/usage`` and ``missive usage`` report
    (:mod:`missive.keys.usage`).

    Attributes:
        enabled: record usage per key and model in the state directory;
            false: nothing is written and ``/v1/usage`` answers 404.
        retention: seconds of usage kept (hourly rows older than this are deleted).
        database: the SQLite file (default ``usage.sqlite3`` in the state directory).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool = True
    retention: float = Field(default=90 * 86400.0, gt=0, allow_inf_nan=False)
    database: str | None = None
