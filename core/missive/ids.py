"""Identifiers in the API's shapes: ``req_``, ``msg_``, ``toolu_`` and ``srvtoolu_`` + base62."""

from __future__ import annotations

import secrets
import string

_BASE62 = string.digits + string.ascii_letters


def _base62(length: int) -> str:
    return "".join(secrets.choice(_BASE62) for _ in range(length))


def request_id() -> str:
    """A new ``request-id`` value, e.g. ``req_011CYb2x...`` (24 base62 chars)."""
    return "req_" + _base62(24)


def message_id() -> str:
    """A new message id, ``msg_`` + 24 base62 chars."""
    return "msg_" + _base62(24)


def tool_use_id() -> str:
    """A new tool_use id, ``toolu_`` + 24 base62 chars."""
    return "toolu_" + _base62(24)


def server_tool_use_id() -> str:
    """A new server_tool_use id, ``srvtoolu_`` + 24 base62 chars (the API's prefix
    for calls of tools it runs itself, Anthropic docs "Server tools")."""
    return "srvtoolu_" + _base62(24)
