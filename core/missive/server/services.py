"""The app's services: one typed object built by :func:`missive.server.app.create_app`.

Everything a route, the batch runner or the CLI needs from the running
server (the configuration, the model table, admission, the signer...) is an
attribute of :class:`Services`, read through :func:`services`. It is kept in
``app.extensions["missive"]`` (Quart's place for an extension's state); no
plugin reads it: plugins see only :mod:`missive.api`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quart import Quart, current_app

from .workers import WorkerInfo

if TYPE_CHECKING:
    from ..batches.service import Batches
    from ..config import Config
    from ..console.history import History
    from ..kernel.plugins import Kernel
    from ..keys.service import KeyServices
    from ..media.pipeline import MediaPipeline
    from ..messages.service import Messages
    from ..models.table import ModelTable
    from ..routing.rules import RoutingRules
    from ..thinking.signing import Signer
    from ..threads.store import ResponseStore
    from ..tools.server_runner import ServerToolRunner
    from .admission import Admission
    from .metrics import Metrics
    from .shutdown import Drain

__all__ = ["Services", "services", "EXTENSION"]

#: The key of :class:`Services` in ``app.extensions``.
EXTENSION = "missive"


@dataclass
class Services:
    """What one app serves with.

    Attributes:
        config: the server's configuration.
        kernel: the plugin kernel (hooks, specs).
        models: the served models and their drivers.
        signer: signs and checks thinking and compaction blocks.
        media: the image and document pipeline.
        server_tools: runs ``web_search``/``web_fetch`` calls.
        routing: ``[[routing.rules]]`` and the default fallbacks.
        admission: per-model slots and queues.
        metrics: the Prometheus registry.
        drain: graceful shutdown.
        batches: the Message Batches store and runner.
        keys: API keys, their limits and usage.
        responses: kept responses of message threads.
        history: what the web console shows of the past.
        messages: serves one answer (:class:`~missive.messages.service.Messages`).
        started_at: ``time.monotonic()`` when the app was built (uptime).
        worker: this process's place among the server's workers (set after
            the fork, :mod:`missive.server.workers`).
    """

    config: Config
    kernel: Kernel
    models: ModelTable
    signer: Signer
    media: MediaPipeline
    server_tools: ServerToolRunner
    routing: RoutingRules
    admission: Admission
    metrics: Metrics
    drain: Drain
    batches: Batches
    keys: KeyServices
    responses: ResponseStore
    history: History
    messages: Messages
    started_at: float = field(default_factory=time.monotonic)
    worker: WorkerInfo = field(default_factory=WorkerInfo)


def services(app: Quart | None = None) -> Services:
    """The :class:`Services` of ``app`` (the current app when None).

    Raises:
        RuntimeError: the app was not built by ``create_app``.
    """
    found = (app if app is not None else current_app).extensions.get(EXTENSION)
    if not isinstance(found, Services):
        raise RuntimeError("this app has no Missive services (build it with missive.server.app.create_app)")
    return found
