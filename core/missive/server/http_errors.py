"""The Anthropic error envelope on the answers Hypercorn gives before the app sees a request.

Hypercorn's HTTP/1.1 protocol (0.17, 0.18: ``hypercorn/protocol/h11.py``,
``H11Protocol._send_error_response``) answers a request h11 cannot parse
with an empty body: 431 when the request line and headers exceed
``h11_max_incomplete_size`` (16 KiB by default), 400 for a malformed request,
505 for an HTTP version it does not speak. The app never runs for these, so
the client gets no ``{"type": "error", ...}`` body and no ``request-id``:
the SDKs then report a bare status with nothing to act on.

:func:`install` replaces that method with one sending the same status and
``connection: close``, and the envelope (``invalid_request_error``, or
``api_error`` for a 5xx) saying what was wrong, with a ``request-id``.
``missive serve`` and :mod:`missive.asgi` call it. Other protocols
(HTTP/2, whose errors are stream resets) are left as they are.
"""

from __future__ import annotations

import json
import logging
from itertools import chain

__all__ = ["install", "error_body"]

log = logging.getLogger("missive.connections")

#: What each status Hypercorn sends means for the client (h11's
#: ``error_status_hint``s).
_MESSAGES = {
    400: "Malformed HTTP request: the request line or a header could not be parsed",
    431: (
        "Request headers too large: the request line and headers exceed the server's limit "
        "(Hypercorn's h11_max_incomplete_size, 16 KiB by default); send large values in the body"
    ),
    505: "HTTP version not supported: send HTTP/1.1 (or HTTP/2)",
}


def error_body(status: int, request_id: str) -> bytes:
    """The envelope of a Hypercorn-level answer with ``status``."""
    message = _MESSAGES.get(status, f"The HTTP request could not be read (status {status})")
    kind = "api_error" if status >= 500 and status != 505 else "invalid_request_error"
    envelope = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    return json.dumps(envelope).encode()


def install() -> bool:
    """Make Hypercorn's HTTP/1.1 errors carry the envelope (idempotent).
    Returns whether it is in place: False, with a warning, when this
    Hypercorn's protocol is not of the expected shape."""
    import h11
    from hypercorn.protocol.h11 import H11Protocol

    from ..protocol.ids import request_id

    original = getattr(H11Protocol, "_send_error_response", None)
    if getattr(original, "missive_envelope", False):
        return True
    if original is None or not hasattr(H11Protocol, "_send_h11_event"):
        log.warning("Hypercorn's HTTP/1.1 protocol is not the expected one: its own errors stay bodiless")
        return False

    async def send_error_response(self: H11Protocol, status_code: int) -> None:
        rid = request_id()
        body = error_body(status_code, rid)
        headers = chain(
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"request-id", rid.encode()),
                (b"x-should-retry", b"false"),
                (b"connection", b"close"),
            ],
            self.config.response_headers("h11"),
        )
        await self._send_h11_event(h11.Response(status_code=status_code, headers=list(headers)))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    send_error_response.missive_envelope = True  # type: ignore[attr-defined]
    H11Protocol._send_error_response = send_error_response  # type: ignore[method-assign]
    return True
