"""Liveness endpoints (no auth): ``GET /health`` and Claude Code's ``HEAD /api/hello``."""

from __future__ import annotations

from quart import Quart


def register(app: Quart) -> None:
    @app.route("/health", methods=["GET"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.route("/api/hello", methods=["GET", "HEAD"])
    async def hello() -> dict[str, str]:
        return {"status": "ok"}
