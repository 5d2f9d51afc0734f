"""``missive batches``: a running server's message batches, through its HTTP API.

* ``missive batches list``: one row per batch, newest first (``GET
  /v1/messages/batches``, every page up to ``--limit`` batches);
* ``missive batches show ID``: one batch's fields (``GET /v1/messages/batches/{id}``);
* ``missive batches results ID``: its results as JSON Lines on stdout,
  as the server sends them (``GET .../results``).

The server and its key are found as ``missive ps`` finds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from .claude_env import ServerUnavailable

__all__ = ["list_batches", "get_batch", "stream_results", "render_list", "render_batch"]

COLUMNS = ("ID", "STATUS", "CREATED", "PROCESSING", "SUCCEEDED", "ERRORED", "CANCELED", "EXPIRED")
_COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"x-api-key": api_key} if api_key else {}


def _check(response: httpx.Response) -> None:
    if response.status_code == 200:
        return
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.reason_phrase
    raise ServerUnavailable(
        f"{response.url} answered {response.status_code}: {message}", response.status_code
    )


def _get(base_url: str, path: str, api_key: str | None, params: dict[str, Any] | None = None) -> Any:
    url = f"{base_url.rstrip('/')}{path}"
    try:
        response = httpx.get(url, headers=_headers(api_key), params=params, timeout=30)
    except httpx.HTTPError as exc:
        raise ServerUnavailable(
            f"no Missive server answers at {base_url} ({type(exc).__name__}); start one with `missive serve`"
        ) from None
    _check(response)
    return response.json()


def list_batches(base_url: str, api_key: str | None, *, limit: int = 20) -> list[dict[str, Any]]:
    """Up to ``limit`` batches, newest first, following the pages (``after_id``).

    Raises:
        ServerUnavailable: nothing answers, or the server refused (``status`` set).
    """
    batches: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": min(limit, 1000)}
    while len(batches) < limit:
        page = _get(base_url, "/v1/messages/batches", api_key, params)
        batches += page["data"]
        if not page["has_more"] or not page["data"]:
            break
        params["after_id"] = page["last_id"]
    return batches[:limit]


def get_batch(base_url: str, api_key: str | None, batch_id: str) -> dict[str, Any]:
    """One batch object.

    Raises:
        ServerUnavailable: nothing answers, or the server refused (404: no such batch).
    """
    batch: dict[str, Any] = _get(base_url, f"/v1/messages/batches/{batch_id}", api_key)
    return batch


def stream_results(base_url: str, api_key: str | None, batch_id: str) -> Iterator[bytes]:
    """The results' bytes as they arrive (JSON Lines).

    Raises:
        ServerUnavailable: nothing answers, or the server refused (400: not
            ended yet; 404: no such batch, or archived).
    """
    url = f"{base_url.rstrip('/')}/v1/messages/batches/{batch_id}/results"
    try:
        with httpx.stream("GET", url, headers=_headers(api_key), timeout=30) as response:
            if response.status_code != 200:
                response.read()
                _check(response)
            yield from response.iter_bytes()
    except httpx.HTTPError as exc:
        raise ServerUnavailable(f"no Missive server answers at {base_url} ({type(exc).__name__})") from None


def render_list(batches: list[dict[str, Any]]) -> str:
    """The table ``missive batches list`` prints (columns aligned)."""
    rows = [COLUMNS]
    for batch in batches:
        counts = batch["request_counts"]
        rows.append(
            (
                batch["id"],
                batch["processing_status"],
                (batch["created_at"] or "")[:19].replace("T", " "),
                *(str(counts[key]) for key in _COUNTS),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def render_batch(batch: dict[str, Any]) -> str:
    """``missive batches show``: one ``field: value`` line each, counts as ``requests.<type>``."""
    lines = []
    for key, value in batch.items():
        if key == "request_counts":
            lines += [f"requests.{name}: {value[name]}" for name in _COUNTS]
        else:
            lines.append(f"{key}: {'-' if value is None else value}")
    return "\n".join(lines)
