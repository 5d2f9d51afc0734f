"""Liveness endpoints (no auth): ``GET /health`` and Claude Code's ``HEAD /api/hello``.

``/health`` also reports the load, summed over the models:
``{"status": "ok", "generating": N, "waiting": M}`` (generations running, and
requests waiting in the per-model queues of :mod:`missive.serving.admission`). No model
ids: the endpoint needs no key. The log names the model of each queued request.
"""

from __future__ import annotations

from quart import Quart

from .common import admission


def register(app: Quart) -> None:
    @app.route("/health", methods=["GET"])
    async def health() -> dict[str, object]:
        return {"status": "ok", **admission().totals()}

    @app.route("/api/hello", methods=["GET", "HEAD"])
    async def hello() -> dict[str, str]:
        return {"status": "ok"}
