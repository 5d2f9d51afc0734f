"""``missive ps``: the models of a running server, from ``GET /v1/status``.

One row per model: driver, state (``ready``, ``starting``, ``unavailable``, ``failed``),
context window, generations running (of ``max_concurrency``), requests
waiting (of ``queue_depth``), then what the driver reports
(:meth:`missive.driver.interface.Driver.status`: slots, cache use) and the health of
a remote model's replicas.
"""

from __future__ import annotations

from typing import Any

import httpx

from .claude_env import ServerUnavailable

__all__ = ["fetch_status", "render_status"]

COLUMNS = ("MODEL", "DRIVER", "STATE", "CONTEXT", "RUNNING", "WAITING", "DETAILS")


def fetch_status(base_url: str, api_key: str | None, *, timeout: float = 10.0) -> dict[str, Any]:
    """``GET {base_url}/v1/status``.

    Raises:
        ServerUnavailable: nothing answers, or the server refused (``status`` set).
    """
    url = f"{base_url.rstrip('/')}/v1/status"
    try:
        response = httpx.get(url, headers={"x-api-key": api_key} if api_key else {}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ServerUnavailable(
            f"no Missive server answers at {base_url} ({type(exc).__name__}); start one with `missive serve`"
        ) from None
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.reason_phrase
        raise ServerUnavailable(f"{url} answered {response.status_code}: {message}", response.status_code)
    try:
        status = response.json()
    except ValueError:
        status = None
    if not isinstance(status, dict) or not isinstance(status.get("models"), (list, dict)):
        raise ServerUnavailable(
            f"{url} answered 200 but not with Missive's status (is {base_url} a Missive server?)",
            response.status_code,
        )
    return status


def _of(value: Any, limit: Any) -> str:
    return f"{value}/{limit}" if limit is not None else str(value)


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return str(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _details(info: dict[str, Any]) -> str:
    parts = []
    if info.get("idle_unload") is not None:
        parts.append(f"idle {info.get('idle_s', 0)}/{info['idle_unload']:g} s")
    if info.get("memory_bytes"):
        parts.append(f"memory={_size(info['memory_bytes'])}")
    for key, value in (info.get("driver_status") or {}).items():
        if isinstance(value, (list, dict)):
            continue  # per-slot detail (slot_states): the web console shows it
        parts.append(f"{key}={_size(value) if key.endswith('_bytes') else value}")
    replicas = info.get("replicas")
    if replicas:
        healthy = sum(1 for r in replicas if r.get("healthy"))
        parts.append(f"replicas={healthy}/{len(replicas)} healthy")
        parts += [
            f"down: {r['url']} ({r.get('last_error') or 'unknown'})" for r in replicas if not r.get("healthy")
        ]
    return ", ".join(parts) or "-"


def render_status(status: dict[str, Any]) -> str:
    """The table ``missive ps`` prints (columns aligned, one row per model)."""
    rows = [COLUMNS]
    for model_id, info in status.get("models", {}).items():
        rows.append(
            (
                model_id,
                str(info.get("driver") or "-"),
                str(info.get("status") or "-") + (" (unloaded)" if info.get("loaded") is False else ""),
                str(info.get("context_window") or "-"),
                _of(info.get("running", 0), info.get("max_concurrency")),
                _of(info.get("waiting", 0), info.get("queue_depth")),
                _details(info),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    table = "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )
    worker = status.get("worker") or {}
    if worker.get("count", 1) > 1:
        # Several workers (missive.server.workers): one of them answered.
        table += (
            f"\nworker {worker.get('index', 0) + 1} of {worker['count']} (pid {worker.get('pid')}) answered: "
            "RUNNING and WAITING are its own, each worker admits its share"
        )
    return table
