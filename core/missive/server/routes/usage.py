"""``GET /v1/usage`` (admin keys): usage per key and model over a time
range (:mod:`.usage`), and the hook sending the rate-limit headers.

Query parameters: ``starting_at`` and ``ending_at`` (RFC 3339, a date, or a
duration before now such as ``7d``; default the last 7 days, or 24 hours
with ``bucket_width=1h``, up to now), ``bucket_width`` (``1d``, the
default, or ``1h``), ``key_name`` and ``model`` (only that key, that
configured model), ``group_by=subagent`` (each result split into the
requests of Claude Code subagents and the others, :mod:`missive.keys.usage`).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from quart import Quart, request

from ...keys.usage import parse_time
from ...protocol.errors import NotFoundError
from ..access import add_rate_limit_headers, authenticate, keys, require_admin

__all__ = ["register", "get_usage"]

#: The default range of each ``bucket_width``.
DEFAULT_SPAN = {"1h": timedelta(hours=24), "1d": timedelta(days=7)}


async def get_usage() -> dict[str, Any]:
    require_admin(authenticate(), "GET /v1/usage")
    usage = keys().usage
    if usage is None:
        raise NotFoundError("usage is not recorded on this server (usage.enabled = false)")
    width = request.args.get("bucket_width", "1d")
    now = datetime.now(timezone.utc)
    ending_at = parse_time("ending_at", request.args.get("ending_at"), now)
    starting_at = parse_time(
        "starting_at",
        request.args.get("starting_at"),
        ending_at - DEFAULT_SPAN.get(width, DEFAULT_SPAN["1d"]),
    )
    return await usage.report(
        starting_at,
        ending_at,
        width,
        request.args.get("key_name"),
        request.args.get("model"),
        request.args.get("group_by"),
    )


def register(app: Quart, prefix: str) -> None:
    """The usage route under ``prefix``."""
    app.add_url_rule(f"{prefix}/usage", f"{prefix}-usage", get_usage, methods=["GET"])


def install(app: Quart) -> None:
    """The ``after_request`` hook of the rate-limit headers (once per app)."""
    app.after_request(add_rate_limit_headers)
