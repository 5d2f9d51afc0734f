"""Identifiers in the API's shapes: ``req_``, ``msg_``, ``msgbatch_``, ``toolu_`` and
``srvtoolu_`` + base62."""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import string

_BASE62 = string.digits + string.ascii_letters


def _base62(length: int) -> str:
    """``length`` random base62 characters from one read of the system's
    random source: a random integer of 64 bits more than ``62 ** length``
    needs, written in base 62 (the lowest ``length`` digits are uniform to
    within 2**-64). One ``secrets.choice`` per character read the source once
    per character (a system call each: 5 % of a gateway request's CPU)."""
    value = int.from_bytes(secrets.token_bytes((length * 6 + 64 + 7) // 8), "big")
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 62)
        chars.append(_BASE62[digit])
    return "".join(chars)


def request_id() -> str:
    """A new ``request-id`` value, e.g. ``req_011CYb2x...`` (24 base62 chars)."""
    return "req_" + _base62(24)


def message_id() -> str:
    """A new message id, ``msg_`` + 24 base62 chars."""
    return "msg_" + _base62(24)


def message_batch_id() -> str:
    """A new Message Batch id, ``msgbatch_`` + 24 base62 chars (the API's prefix)."""
    return "msgbatch_" + _base62(24)


def tool_use_id() -> str:
    """A new tool_use id, ``toolu_`` + 24 base62 chars."""
    return "toolu_" + _base62(24)


def server_tool_use_id() -> str:
    """A new server_tool_use id, ``srvtoolu_`` + 24 base62 chars (the API's prefix
    for calls of tools it runs itself, Anthropic docs "Server tools")."""
    return "srvtoolu_" + _base62(24)


#: The API's pattern for ``tool_use.id`` (a replayed id outside it is refused
#: by the API, and by other Anthropic-compatible servers).
TOOL_ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
#: Prefix of a client id that carries a backend's own call id, base64url-encoded.
_WRAPPED = "toolu_b64_"


def client_tool_id(backend_id: str | None) -> str:
    """The ``tool_use.id`` a client gets for a call the backend named ``backend_id``.

    A missing id is a new :func:`tool_use_id`. An id already matching
    :data:`TOOL_ID_PATTERN` is kept (vLLM's ``chatcmpl-tool-...``, llama.cpp's
    random ids). Any other (Kimi-K2's ``functions.get_weather:0``, ids with
    dots or spaces) is carried inside a pattern-valid id,
    ``toolu_b64_`` + its UTF-8 in unpadded base64url, which
    :func:`backend_tool_id` turns back, so a chat template that depends on its
    own id format gets it in the history, with no state kept on the server.
    """
    if not backend_id:
        return tool_use_id()
    if TOOL_ID_PATTERN.match(backend_id) and not backend_id.startswith(_WRAPPED):
        return backend_id
    return _WRAPPED + base64.urlsafe_b64encode(backend_id.encode("utf-8", "surrogatepass")).decode().rstrip(
        "="
    )


def backend_tool_id(client_id: str) -> str:
    """The backend's own id for a client's ``tool_use.id`` (the inverse of
    :func:`client_tool_id`); ids Missive did not wrap are returned as they are."""
    if not client_id.startswith(_WRAPPED):
        return client_id
    encoded = client_id[len(_WRAPPED) :]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        return client_id
