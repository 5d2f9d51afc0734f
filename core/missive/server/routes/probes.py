"""Kubernetes-style probes (no auth): ``GET /livez`` and ``GET /readyz``.

* ``/livez``: 200 ``{"status": "ok"}`` while the process serves HTTP. It
  checks nothing else: a liveness failure restarts the container, which a
  backend being down must not cause.
* ``/readyz``: 200 when every model is ready, else 503; the body names each
  model's state (:func:`missive.server.model_status.readiness`): ``starting`` until its
  driver has started, ``unavailable`` while a remote model has no healthy
  replica, ``failed`` (``"reason": "load_failed"``) while a model loaded on
  demand is not loaded because its last load failed. Model ids, replica
  counts and that reason only: no URLs, no errors (those are in
  ``GET /v1/status``, behind the keys, and the log). 503 ``shutting_down`` once
  the server drains (:mod:`missive.server.shutdown`).

``/health`` (:mod:`.health`) stays as it was: liveness plus the load.
"""

from __future__ import annotations

from quart import Quart

from ..model_status import readiness
from .common import config_kernel_models, drain


def register(app: Quart) -> None:
    @app.route("/livez", methods=["GET"])
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.route("/readyz", methods=["GET"])
    async def readyz() -> tuple[dict[str, object], int]:
        _, _, models = config_kernel_models()
        report = await readiness(models)
        if drain().begun:
            return {"status": "shutting_down", "models": report}, 503
        ready = all(m["status"] == "ready" for m in report.values())
        return {"status": "ready" if ready else "not_ready", "models": report}, 200 if ready else 503
