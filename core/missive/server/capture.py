"""Request capture for debugging and client tests (``server.capture_dir``).

When ``server.capture_dir`` is set, every request is written to that folder
as one JSON file, so what a client such as Claude Code really sends can be
read and asserted on (tests/clients/). Files are named
``<time_ns>-<request_id>.json``: sorted by name they are in arrival order.
Shape::

    {"request_id": "req_...", "method": "POST", "path": "/v1/messages",
     "query": "beta=true", "headers": {"anthropic-version": "...", ...},
     "body": {...} | "<text that is not JSON>" | null,
     "status": 200, "ignored": ["context_management", ...],
     "dropped_thinking": ["messages.1.content.0 (no signature)", ...]}

Credentials never reach the file: the values of the headers in
:data:`REDACTED_HEADERS` are replaced by ``"[redacted]"``. Bodies are kept
whole (they hold the conversation): a debugging and test aid, not for
production logs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["REDACTED_HEADERS", "redact_headers", "write_capture"]

log = logging.getLogger("missive.capture")

#: Header names (lower case) whose values are never written.
REDACTED_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie"})


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers as a dict with lower-case names, credentials replaced.

    Repeated headers are joined with ``", "`` (RFC 9110 section 5.3).
    """
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        value = "[redacted]" if key in REDACTED_HEADERS else value
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _body(raw: bytes | None) -> Any:
    if raw is None or raw == b"":
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def write_capture(
    directory: str | Path,
    *,
    request_id: str,
    method: str,
    path: str,
    query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes | None,
    status: int,
    ignored: list[str] | None = None,
    dropped_thinking: list[str] | None = None,
) -> Path | None:
    """Write one request as ``<directory>/<time_ns>-<request_id>.json``.

    Returns the file's path, or None when it could not be written (logged as
    a warning: capturing never fails a request).
    """
    record = {
        "request_id": request_id,
        "method": method,
        "path": path,
        "query": query,
        "headers": redact_headers(headers),
        "body": _body(body),
        "status": status,
        "ignored": list(ignored or []),
        "dropped_thinking": list(dropped_thinking or []),
    }
    target = Path(directory) / f"{time.time_ns()}-{request_id}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")
    except OSError as exc:
        log.warning("cannot write capture %s: %s", target, exc)
        return None
    return target
