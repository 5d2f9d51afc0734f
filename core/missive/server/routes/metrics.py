"""``GET /metrics``: Prometheus' text format (:mod:`missive.server.metrics`).

Behind an admin key (Prometheus sends one with ``authorization:
{credentials: ...}``; a user key gets 403), unless ``server.metrics_public``.
"""

from __future__ import annotations

from quart import Quart, Response

from ..metrics import CONTENT_TYPE, Metrics
from ..services import services
from .common import authenticate_admin, config_kernel_models


def metrics() -> Metrics:
    """The app's :class:`~missive.server.metrics.Metrics`."""
    return services().metrics


def register(app: Quart) -> None:
    @app.route("/metrics", methods=["GET"])
    async def exposition() -> Response:
        config, _, _ = config_kernel_models()
        if not config.server.metrics_public:
            authenticate_admin("GET /metrics")
        await services().batches.refresh_summary()
        return Response(metrics().exposition(), content_type=CONTENT_TYPE)
