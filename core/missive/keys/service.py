"""The keys of one app: the ring, the limits, the usage, the metrics.

Built by :func:`missive.server.services.build_services` (``services().keys``)
before the workers are forked, so the limits' shared table is every
worker's (:mod:`.buckets`); :meth:`KeyServices.start` runs in each worker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from .limits import Limiter
from .metrics import KeyMetrics
from .ring import KeyRing
from .usage import UsageRecorder

if TYPE_CHECKING:
    from ..config import Config
    from ..serving.record import RequestRecord

__all__ = ["KeyServices"]


class KeyServices:
    """See the module doc.

    Args:
        config: the whole configuration (``[keys]``, ``server.api_keys``, ``[usage]``).
        registry: the app's metrics registry.
    """

    def __init__(self, config: Config, registry: CollectorRegistry) -> None:
        self.ring = KeyRing(config)
        self.metrics = KeyMetrics(registry)
        self.limiter = Limiter(self.ring.identities, on_refused=self.metrics.refused)
        self.usage = UsageRecorder(config.usage) if config.usage.enabled else None
        self._task: asyncio.Task[None] | None = None

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request (its key's metrics and usage)."""
        self.metrics.observe(record)
        if self.usage is not None:
            self.usage.observe(record)

    async def start(self) -> None:
        """Start writing usage (in this worker)."""
        if self.usage is not None and self._task is None:
            self._task = asyncio.ensure_future(self.usage.run())

    async def aclose(self) -> None:
        """Write the pending usage and stop."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
