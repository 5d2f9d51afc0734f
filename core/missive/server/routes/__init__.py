"""HTTP routes. Paths are served under ``/v1`` and, for clients whose base URL
already ends in ``/v1``, under ``/v1/v1`` (contract section 1); the probes
and ``/metrics`` at the root, the web console under ``/console``
(:mod:`missive.console`)."""

from __future__ import annotations

from quart import Quart

from . import batches, console, health, messages, metrics, models, probes, status, usage

PREFIXES = ("/v1", "/v1/v1")


def register_routes(app: Quart) -> None:
    for prefix in PREFIXES:
        messages.register(app, prefix)
        batches.register(app, prefix)
        models.register(app, prefix)
        status.register(app, prefix)
        usage.register(app, prefix)
    health.register(app)
    probes.register(app)
    metrics.register(app)
    usage.install(app)
    console.register(app)
