"""``GET /v1/status`` (admin keys): every model's state and load,
what ``missive ps`` shows (:func:`missive.server.model_status.model_status`)."""

from __future__ import annotations

import time
from typing import Any

from quart import Quart

from ... import __version__
from ..model_status import model_status
from ..services import services
from .common import admission, authenticate_admin, config_kernel_models


async def get_status() -> dict[str, Any]:
    authenticate_admin("GET /v1/status")
    return await status_document()


async def status_document() -> dict[str, Any]:
    """The status of the server and of every model (also the web console's, :mod:`missive.console`)."""
    _, _, models = config_kernel_models()
    started = services().started_at
    return {
        "version": __version__,  # the running code's, also when run from a source tree
        "uptime_s": round(time.monotonic() - started, 1),
        "models": await model_status(models, admission()),
        # several workers: this answer is the one worker's (missive.server.workers)
        "worker": services().worker.summary(),
    }


def register(app: Quart, prefix: str) -> None:
    app.add_url_rule(f"{prefix}/status", f"{prefix}-status", get_status, methods=["GET"])
