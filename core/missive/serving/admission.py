"""Admission: per model, at most ``max_concurrency`` generations at once and
a bounded, fair wait queue in front of them.

Every ``POST /v1/messages`` takes a :class:`Permit` (the right to run one
generation; not the engine's KV "slot", one sequence of a model's context)
from its model's :class:`Gate` before the driver is called, and gives it back
when the answer ends, however it ends. The rules (docs/configuration.md, docs/api-compatibility.md):

* a driver's ``Capabilities.max_concurrency`` is the number of permits
  (None: unbounded; requests are counted, never queued);
* when every permit is taken, up to ``queue_depth`` requests wait, served in
  arrival order (a freed permit is handed to the first waiter, never taken by
  a newcomer);
* a request arriving with the queue full, or one that has waited
  ``queue_timeout`` seconds, gets 529 ``overloaded_error`` with a
  ``retry-after`` estimate: never an unbounded wait;
* a waiter whose task is cancelled (Quart cancels the handler when its client
  disconnects) leaves the queue without taking a permit;
* once the server shuts down (:mod:`missive.server.shutdown`), :meth:`Admission.close`
  answers every waiter 529 at once and refuses every later request, free
  permit or not: running generations finish, no new one starts;
* ``count_tokens`` never comes here;
* background work (message batches, :mod:`missive.batches`) takes a permit only
  through :meth:`Gate.admit_background`: when a permit is free, no request
  waits, and fewer than its cap of permits already run background work. A
  request that has to wait while background work holds permits *preempts* one
  (the newest): the background holder is told to stop
  (:meth:`Permit.preempt`), stops within one decode step of its model, and
  its permit goes to the waiting request, so an interactive request never
  waits behind background work by more than that; one arriving with the
  queue full is still admitted to wait when there is background work to
  preempt.

A permit is a counter, not a lock: releasing it needs no owner task, so a
response generator finalized by the garbage collector in another task (or
never started at all) still frees it (see :meth:`Permit.release`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.errors import OverloadedError

if TYPE_CHECKING:
    from ..config import Config
    from ..driver.interface import Driver

__all__ = ["Admission", "Gate", "Permit", "DEFAULT_RETRY_AFTER", "share"]

log = logging.getLogger("missive.admission")

#: ``retry-after`` seconds for a model none of whose generations has ended yet.
DEFAULT_RETRY_AFTER = 10
#: Weight of the newest service time in the running average.
_EWMA = 0.3
#: Bounds of ``retry-after``: the SDKs honour it only up to 60 s (beyond, they
#: use their own backoff), and :func:`missive.server.app.error_response` caps it there.
_RETRY_MIN, _RETRY_MAX = 1, 60


class Permit:
    """The right to run one generation on one model, until :meth:`release`.

    Server-tool continuations inside one message run under the same permit.

    Attributes:
        background: taken by :meth:`Gate.admit_background` (batch work).
        preempted: a waiting request asked for this background permit.
    """

    def __init__(
        self, gate: Gate, *, background: bool = False, on_preempt: Callable[[], None] | None = None
    ) -> None:
        self._gate: Gate | None = gate
        self._since = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self.background = background
        self.preempted = False
        self._on_preempt = on_preempt

    def preempt(self) -> None:
        """Ask the background holder to stop and give the permit back (its
        ``on_preempt`` callback); idempotent. Called by the gate."""
        if self.preempted or self._gate is None:
            return
        self.preempted = True
        if self._on_preempt is not None:
            self._on_preempt()

    def release(self) -> None:
        """Give the permit back (to the first waiter, if any). Idempotent, and
        callable from any task of the server's event loop; no await."""
        gate, self._gate = self._gate, None
        if gate is None:
            return
        if self.background:
            gate._release_background(self)
        else:
            gate._release(time.monotonic() - self._since)

    def __del__(self) -> None:
        # A permit dropped unreleased: a streaming body that was never iterated
        # (the client left between the handler's return and the first byte).
        gate, self._gate = self._gate, None
        if gate is None:
            return
        held = time.monotonic() - self._since
        try:
            if self.background:
                self._loop.call_soon_threadsafe(gate._release_background, self)
            else:
                self._loop.call_soon_threadsafe(gate._release, held)
        except RuntimeError:  # the loop is closed: nothing waits any more
            pass


class Gate:
    """One model's permits and wait queue.

    Args:
        model: the configured model id (for messages and logs).
        limit: permits (``max_concurrency``), or None for unbounded.
        depth: requests allowed to wait beyond the running ones (``queue_depth``, >= 0).
        timeout: seconds a request may wait for a permit (``queue_timeout``, > 0).

    Attributes:
        running: permits held now (generations running, background ones included).
        background: permits held now by background work (:meth:`admit_background`).
        preemptions: background permits preempted so far (for ``/metrics``).
    """

    def __init__(self, model: str, *, limit: int | None, depth: int, timeout: float) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"max_concurrency of model '{model}' must be at least 1 or None, got {limit}")
        self.model = model
        self.limit = limit
        self.depth = depth
        self.timeout = timeout
        self.running = 0
        self._waiters: deque[asyncio.Future[bool]] = deque()
        self._service: float | None = None  # running average of permit hold times, seconds
        self._closed: tuple[str, int] | None = None  # set by close(): the 529's message and retry-after
        self.background = 0
        self.preemptions = 0
        self._holders: list[Permit] = []  # background permits, oldest first
        self._preempting = 0  # preempted background permits not given back yet
        self._idle: list[asyncio.Future[None]] = []  # admit_background() callers waiting for room

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the server is shutting down)."""
        return self._closed is not None

    @property
    def waiting(self) -> int:
        """Requests in the queue now."""
        return len(self._waiters)

    def retry_after(self) -> int:
        """Seconds a refused client should wait before trying again.

        The running average of recent permit hold times (an exponentially
        weighted mean, newest weight 0.3) times the queue positions ahead of a
        newcomer (``waiting + 1``) per permit, rounded up and kept within
        1..60 s; :data:`DEFAULT_RETRY_AFTER` before any generation of the
        model has ended.
        """
        if self._service is None:
            estimate = float(DEFAULT_RETRY_AFTER)
        else:
            estimate = self._service * (self.waiting + 1) / (self.limit or 1)
        return max(_RETRY_MIN, min(_RETRY_MAX, math.ceil(estimate)))

    def _overloaded(self, why: str, setting: str) -> OverloadedError:
        message = (
            f"model '{self.model}' is overloaded: {why} ({self.running} generating, max_concurrency "
            f"{self.limit}; {self.waiting} waiting, queue_depth {self.depth}); retry later, "
            f"or raise models.{self.model}.{setting} (default: server.{setting})"
        )
        return OverloadedError(message, retry_after=self.retry_after())

    async def admit(self) -> Permit:
        """Take a permit, waiting in line for one if every permit is taken.

        Returns:
            the :class:`Permit`; the caller must :meth:`~Permit.release` it.

        Raises:
            OverloadedError: 529, with ``retry_after`` set, when the queue
                already holds ``depth`` waiters, or after ``timeout`` seconds
                without a permit.
            asyncio.CancelledError: the waiting task was cancelled (client
                gone); it has left the queue and holds no permit.
        """
        if self._closed is not None:
            raise self._closing_error()
        if self.limit is None or (self.running < self.limit and not self._waiters):
            self.running += 1
            return Permit(self)
        if len(self._waiters) >= self.depth and not self._preemptable():
            error = self._overloaded("every slot is busy and the wait queue is full", "queue_depth")
            log.warning("refused: %s", error.message)
            raise error
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        log.info(
            "queued for model %s: position %d, %d generating (max_concurrency %s)",
            self.model,
            len(self._waiters),
            self.running,
            self.limit,
        )
        self._preempt_for_waiters()
        queued_at = time.monotonic()
        timer = loop.call_later(self.timeout, self._expire, waiter)
        try:
            admitted = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                # Handed a permit just as the task was cancelled: pass it on.
                self._release(None)
            else:
                self._discard(waiter)
                log.info(
                    "left the queue of model %s (client gone) after %.1f s",
                    self.model,
                    time.monotonic() - queued_at,
                )
            raise
        finally:
            timer.cancel()
        if not admitted:
            if self._closed is not None:
                raise self._closing_error()
            error = self._overloaded(f"no slot became free within {self.timeout:g} s", "queue_timeout")
            log.warning("refused: %s", error.message)
            raise error
        log.info("admitted to model %s after %.1f s in the queue", self.model, time.monotonic() - queued_at)
        return Permit(self)

    def close(self, message: str, retry_after: int) -> int:
        """Refuse every request from now on with 529 ``overloaded_error``
        (``message``, ``retry_after`` seconds), and wake every waiter with it
        at once. Permits already held are untouched. Idempotent.

        Returns:
            how many waiting requests were refused.
        """
        if self._closed is None:
            self._closed = (message, retry_after)
        refused = 0
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)
                refused += 1
        self._wake_background()  # background waiters see the gate closed
        return refused

    def _closing_error(self) -> OverloadedError:
        assert self._closed is not None
        message, retry_after = self._closed
        return OverloadedError(message, retry_after=retry_after)

    def _expire(self, waiter: asyncio.Future[bool]) -> None:
        if not waiter.done():
            waiter.set_result(False)
            self._discard(waiter)

    def _discard(self, waiter: asyncio.Future[bool]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
        self._wake_background()

    def _release(self, held: float | None) -> None:
        """One permit freed (``held``: seconds it was held, None when it was
        never used): hand it to the first live waiter, else count it free."""
        if held is not None:
            self._service = held if self._service is None else _EWMA * held + (1 - _EWMA) * self._service
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)  # the permit changes hands: running is unchanged
                return
        self.running -= 1
        self._wake_background()

    # -- background work (message batches) ----------------------------------

    def background_room(self, cap: int) -> bool:
        """Whether :meth:`admit_background` with ``cap`` would take a permit now:
        the gate is open, a permit is free, no request waits, and fewer than
        ``cap`` permits run background work."""
        if self._closed is not None or self._waiters or self.background >= cap:
            return False
        return self.limit is None or self.running < self.limit

    async def wait_background_room(self, cap: int) -> None:
        """Return once :meth:`background_room` is true (at once if it is).

        Raises:
            OverloadedError: the gate is closed (the server is shutting down).
        """
        while not self.background_room(cap):
            if self._closed is not None:
                raise self._closing_error()
            idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle.append(idle)
            try:
                await idle
            finally:
                if idle in self._idle:
                    self._idle.remove(idle)

    async def admit_background(self, cap: int, on_preempt: Callable[[], None] | None = None) -> Permit:
        """Take a permit for background work, waiting until there is room
        (:meth:`background_room`): never ahead of a waiting request.

        Args:
            cap: most permits background work may hold at once (>= 1).
            on_preempt: called (once, in the event loop) when a waiting
                request needs the permit back; the holder must then stop
                and :meth:`~Permit.release` it promptly.

        Raises:
            OverloadedError: the gate is closed (the server is shutting down).
        """
        await self.wait_background_room(cap)
        self.running += 1
        self.background += 1
        permit = Permit(self, background=True, on_preempt=on_preempt)
        self._holders.append(permit)
        return permit

    def _preemptable(self) -> int:
        """Background permits not yet asked to stop."""
        return len(self._holders) - self._preempting

    def _preempt_for_waiters(self) -> None:
        """Ask background permits to stop (newest first: least work lost) until
        every waiting request has one coming, or none is left."""
        needed = len(self._waiters) - self._preempting
        for permit in reversed(self._holders):
            if needed <= 0:
                break
            if not permit.preempted:
                self._preempting += 1
                self.preemptions += 1
                needed -= 1
                log.info("model %s: a request waits; preempting a batch request", self.model)
                permit.preempt()

    def _release_background(self, permit: Permit) -> None:
        try:
            self._holders.remove(permit)
        except ValueError:
            return
        self.background -= 1
        if permit.preempted:
            self._preempting -= 1
        self._release(None)

    def _wake_background(self) -> None:
        """Let every :meth:`wait_background_room` caller check again."""
        idle, self._idle = self._idle, []
        for future in idle:
            if not future.done():
                future.set_result(None)


class Admission:
    """The gates of every served model, built on first use (after the drivers
    have started, so a capability a driver settles in ``start()`` counts).

    Args:
        config: ``server.queue_depth`` / ``queue_timeout`` are the defaults;
            a model entry's own keys override them.

    Attributes:
        worker: ``(index, count)``: this process is worker ``index`` of
            ``count`` (:mod:`missive.server.workers`); its gates get that worker's
            share of each model's permits and queue (:func:`share`).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.gates: dict[str, Gate] = {}
        self._closed: tuple[str, int] | None = None
        self.worker = (0, 1)

    def gate(self, model_id: str, driver: Driver) -> Gate:
        """The gate of ``model_id`` (served by ``driver``)."""
        gate = self.gates.get(model_id)
        if gate is None:
            entry, server = driver.entry, self.config.server
            limit = driver.capabilities.max_concurrency
            depth = server.queue_depth if entry.queue_depth is None else entry.queue_depth
            index, count = self.worker
            if count > 1:
                limit = None if limit is None else max(1, share(limit, index, count))
                depth = share(depth, index, count)
            gate = Gate(
                model_id,
                limit=limit,
                depth=depth,
                timeout=server.queue_timeout if entry.queue_timeout is None else entry.queue_timeout,
            )
            if self._closed is not None:
                gate.close(*self._closed)
            self.gates[model_id] = gate
        return gate

    def close(self, message: str, retry_after: int) -> int:
        """Close every gate, those not built yet included (:meth:`Gate.close`):
        waiting requests are answered 529 with ``message`` at once, later ones
        too. Returns how many waiting requests were refused."""
        self._closed = (message, retry_after)
        return sum(gate.close(message, retry_after) for gate in self.gates.values())

    def totals(self) -> dict[str, int]:
        """``{"generating": N, "waiting": M}`` over every model (``/health``)."""
        return {
            "generating": sum(g.running for g in self.gates.values()),
            "waiting": sum(g.waiting for g in self.gates.values()),
        }


def share(total: int, index: int, count: int) -> int:
    """Worker ``index``'s part of ``total`` over ``count`` workers: the parts
    differ by at most one and add up to ``total`` (10 over 4: 3, 3, 2, 2)."""
    return total // count + (1 if index < total % count else 0)
