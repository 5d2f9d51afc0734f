"""``GET /metrics``: Prometheus' text format (:mod:`missive.metrics`).

Behind an admin key (Prometheus sends one with ``authorization:
{credentials: ...}``; a user key gets 403), unless ``server.metrics_public``.
"""

from __future__ import annotations

from typing import cast

from quart import Quart, Response, current_app

from ..metrics import CONTENT_TYPE, Metrics
from .common import authenticate_admin, state


def metrics() -> Metrics:
    """The app's :class:`~missive.metrics.Metrics`."""
    return cast(Metrics, current_app.extensions["missive"]["metrics"])


def register(app: Quart) -> None:
    @app.route("/metrics", methods=["GET"])
    async def exposition() -> Response:
        config, _, _ = state()
        if not config.server.metrics_public:
            authenticate_admin("GET /metrics")
        await current_app.extensions["missive"]["batches"].refresh_summary()
        return Response(metrics().exposition(), content_type=CONTENT_TYPE)
