"""Admission of generations to a model: ``Capabilities.max_concurrency`` permits, FIFO.

A generation holds a permit from the moment it is admitted until its model
thread has stopped; the others wait in arrival order (``anyio.Semaphore`` is
fair). A semaphore rather than ``anyio.Lock``: a lock must be released by the
task that took it, but an async generator left unclosed is finalized by
asyncio in another task; the lock would then stay held and the model hang.

The core's admission already holds requests beyond ``max_concurrency`` in
its bounded queue before the driver is called; this is the engine's own gate
after ``Started``, never contended under the core's limit except while a
stopped generation winds down. There is one permit per slot
(``ModelInfo.slots``, which the engine also sets as ``max_concurrency``), so a
sequence handed to the :class:`~missive.engine.batcher.Batcher` always finds
a free slot (llama-server's task queue likewise defers a task until a slot is
free).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

__all__ = ["Scheduler"]


class Scheduler:
    """``permits`` generations at a time, served in arrival order.

    Build it inside the event loop that will use it (in ``Driver.start``).

    Args:
        permits: ``Capabilities.max_concurrency`` (>= 1; None counts as 1).
    """

    def __init__(self, permits: int | None) -> None:
        self.permits = max(1, permits or 1)
        self._semaphore = anyio.Semaphore(self.permits)

    @property
    def available(self) -> int:
        """Permits free now (== :attr:`permits` when the model is idle)."""
        return self._semaphore.value

    @asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        """Hold one permit for the body (waits, FIFO, while none is free)."""
        async with self._semaphore:
            yield

    async def drain(self, timeout: float) -> bool:
        """Take every permit (at shutdown: running generations finish first);
        False, with none held, if that took over ``timeout`` seconds."""
        taken = 0
        with anyio.move_on_after(timeout):
            while taken < self.permits:
                await self._semaphore.acquire()
                taken += 1
        if taken < self.permits:
            for _ in range(taken):
                self._semaphore.release()
            return False
        return True

    def release_all(self) -> None:
        """Give back the permits :meth:`drain` took."""
        for _ in range(self.permits):
            self._semaphore.release()
