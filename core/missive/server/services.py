"""The app's services: one typed object, built without an app by :func:`build_services`.

Everything a route, the batch runner or the CLI needs from the running
server (the configuration, the model table, admission, the signer...) is an
attribute of :class:`Services`, read through :func:`services`. It is kept in
``app.extensions["missive"]`` (Quart's place for an extension's state); no
plugin reads it: plugins see only :mod:`missive.api`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from quart import Quart, current_app

from ..batches.service import Batches
from ..config import Config
from ..console.history import History
from ..kernel.plugins import Kernel
from ..keys.service import KeyServices
from ..media.pipeline import MediaPipeline
from ..models.table import ModelTable
from ..routing.rules import RoutingRules
from ..serving.admission import Admission
from ..serving.choice import ModelChoice
from ..serving.drain import Drain
from ..serving.logs import log_request
from ..serving.record import RequestRecord
from ..serving.service import Messages
from ..serving.tracing import Tracing, build_tracing
from ..thinking.signing import Signer, load_signer
from ..threads.store import ResponseStore
from ..tools.mcp import McpConnector
from ..tools.server_runner import ServerToolRunner, build_search_provider
from ..tools.warm import warm_up
from .metrics import Metrics
from .workers import PUBLISH_INTERVAL, WorkerInfo

__all__ = ["Services", "services", "build_services", "EXTENSION"]

log = logging.getLogger("missive.app")

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
        choice: which model answers (:class:`~missive.serving.choice.ModelChoice`).
        messages: serves one answer (:class:`~missive.serving.service.Messages`).
        started_at: ``time.monotonic()`` when the app was built (uptime).
        worker: this process's place among the server's workers (set after
            the fork, :mod:`missive.server.workers`).
        tracing: the OpenTelemetry spans of the API's requests, None when off
            (:mod:`missive.serving.tracing`, ``server.tracing``).
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
    choice: ModelChoice
    started_at: float = field(default_factory=time.monotonic)
    worker: WorkerInfo = field(default_factory=WorkerInfo)
    tracing: Tracing | None = None
    _publishing: list[asyncio.Task[None]] = field(default_factory=list)

    def observe(self, record: RequestRecord) -> None:
        """Take in an HTTP request's finished record: metrics, key usage, the
        console's history, the request log, its span when traced."""
        self.metrics.observe(record)
        self.keys.observe(record)
        self.history.observe(record)
        log_request(record)
        if self.tracing is not None:
            self.tracing.observe(record)

    async def start(self) -> None:
        """Start serving, in order: the models (loaded, or ready to load on
        demand), the tool parsers warmed (not in the first request's time),
        the batch runner, the key services, and with several workers the
        publishing of this worker's load."""
        await self.models.start()
        await asyncio.to_thread(warm_up, self.kernel.tool_parsers)
        await self.batches.start()
        await self.keys.start()
        if self.metrics.shared_dir is not None:
            self._publishing.append(asyncio.ensure_future(_publish_load(self.metrics)))

    async def stop(self) -> None:
        """Stop in the reverse order: the publishing, the key services, the
        batch runner, then the models and the search provider, then the
        tracing's last spans sent, each even when one before failed."""
        for task in self._publishing:
            task.cancel()
        try:
            await self.keys.aclose()
            await self.batches.aclose()
        finally:
            try:
                await self.models.aclose()
            finally:
                try:
                    if self.server_tools.provider is not None:
                        await self.server_tools.provider.aclose()
                finally:
                    if self.tracing is not None:
                        await asyncio.to_thread(self.tracing.shutdown)


def services(app: Quart | None = None) -> Services:
    """The :class:`Services` of ``app`` (the current app when None).

    Raises:
        RuntimeError: the app was not built by ``create_app``.
    """
    found = (app if app is not None else current_app).extensions.get(EXTENSION)
    if not isinstance(found, Services):
        raise RuntimeError("this app has no Missive services (build it with missive.server.app.create_app)")
    return found


def build_services(
    config: Config, *, kernel: Kernel | None = None, metrics_dir: str | None = None
) -> Services:
    """Build everything the server serves with, without an app: plugins
    loaded, the model table, admission, the Messages service, batches, keys.

    ``metrics_dir``: the directory the workers of one server share their
    metrics in (:mod:`missive.server.workers`, ``server.workers`` > 1).

    Raises:
        ConfigError: a configured model cannot be served (unknown driver,
            missing dependency), ``media.image_fallback`` names no processor,
            or ``server.tracing`` cannot be served (:func:`~missive.serving.tracing.build_tracing`).
    """
    tracing = build_tracing(config.server)
    kernel = kernel or Kernel(block=config.plugins.block)
    models = ModelTable(config, kernel)
    routing = RoutingRules(
        config.routing,
        list(models.drivers),
        {model_id: entry.fallbacks for model_id, entry in models.entries.items()},
    )
    signer = load_signer(config.thinking.signing_key, config.thinking.key_file)
    media = MediaPipeline(config.media, kernel.image_processors, kernel.document_processors)
    server_tools = ServerToolRunner(
        config.server_tools,
        media.policy,
        build_search_provider(config.server_tools, kernel.search_providers),
        McpConnector(
            config.server_tools,
            media.policy,
            {name: entry.mcp_servers for name, entry in config.keys.items()},
        ),
    )
    admission = Admission(config)
    metrics = Metrics(models, admission, shared_dir=metrics_dir)
    drain = Drain(config.server.shutdown_grace, admission)
    # Built before any worker is forked: the limits' table is shared (missive.keys.buckets).
    keys = KeyServices(config, metrics.registry)

    def observe_batch(record: RequestRecord) -> None:
        metrics.batches.observe(record)
        keys.observe(record)
        log_request(record)

    messages = Messages(
        models=models, admission=admission, signer=signer, media=media, server_tools=server_tools
    )
    batches = Batches(messages, config, models, admission, drain, observe_batch, metrics.batches.count)
    metrics.batches.attach(batches)
    return Services(
        config=config,
        kernel=kernel,
        models=models,
        signer=signer,
        media=media,
        server_tools=server_tools,
        routing=routing,
        admission=admission,
        metrics=metrics,
        drain=drain,
        batches=batches,
        keys=keys,
        responses=ResponseStore(config.threads.max_count, config.threads.max_bytes),
        history=History(),  # what the web console shows of the past (missive.console)
        messages=messages,
        choice=ModelChoice(models, routing),
        tracing=tracing,
    )


async def _publish_load(metrics: Metrics) -> None:
    """Publish this worker's load gauges every :data:`~missive.server.workers.PUBLISH_INTERVAL` seconds."""
    while True:
        try:
            metrics.publish_load()
        except Exception:  # metrics must never take the server down
            log.exception("could not publish the load metrics")
        await asyncio.sleep(PUBLISH_INTERVAL)
