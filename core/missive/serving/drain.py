"""The drain of a server shutting down: what the app and admission refuse, and
when running answers end (the steps are in :mod:`missive.server.shutdown`,
which begins the drain on SIGTERM or SIGINT).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import anyio

from ..protocol.errors import OverloadedError

if TYPE_CHECKING:
    from .admission import Admission

__all__ = ["Drain", "RETRY_AFTER", "SHUTTING_DOWN"]

log = logging.getLogger("missive.shutdown")

#: ``retry-after`` of the 529s of a server shutting down: the retry goes to a
#: new connection, i.e. another replica behind a load balancer.
RETRY_AFTER = 1
#: How every message of a server shutting down begins.
SHUTTING_DOWN = "the server is shutting down"
_RETRY = "retry on another replica, or on this server once it is back"


class Drain:
    """The shutdown state of one app: draining or not, and the end of the grace.

    Built by :func:`missive.server.app.create_app`; ``missive serve`` begins it on
    the first SIGTERM or SIGINT. Its methods must be called from the
    server's event loop.

    Args:
        grace: ``server.shutdown_grace``, seconds.
        admission: the app's admission gates, closed when the drain begins.
    """

    def __init__(self, grace: float, admission: Admission) -> None:
        self.grace = grace
        self.admission = admission
        #: Event-loop time at which the grace ends (None before the drain).
        self.expires_at: float | None = None
        #: the grace was ended by a second signal rather than by running out
        self.ended_early = False
        self._begun = asyncio.Event()
        self._expired: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def begun(self) -> bool:
        """Whether the server is shutting down."""
        return self._begun.is_set()

    @property
    def expired(self) -> asyncio.Future[None]:
        """Done once the grace is over: what still runs must end now."""
        if self._expired is None:
            self._expired = asyncio.get_running_loop().create_future()
        return self._expired

    def begin(self) -> None:
        """Start draining (idempotent): refuse the waiting and the new
        requests with 529, and end the grace ``grace`` seconds from now."""
        if self.begun:
            return
        loop = asyncio.get_running_loop()
        self._begun.set()
        message = f"{SHUTTING_DOWN} and starts no new generation; {_RETRY}"
        refused = self.admission.close(message, RETRY_AFTER)
        running = self.admission.totals()["generating"]
        log.info(
            "shutting down: new connections refused, %d waiting requests answered 529, %d generations "
            "running may finish within %g s (server.shutdown_grace); signal again to end them now",
            refused,
            running,
            self.grace,
        )
        self.expires_at = loop.time() + self.grace
        self._timer = loop.call_later(self.grace, self.expire)

    def expire(self, *, early: bool = False) -> None:
        """End the grace now (idempotent): every generation still running is
        ended (:meth:`cut`, :func:`missive.protocol.sse.paced`). ``early``: by a second
        signal, before the grace ran out (the error message says which)."""
        if self.expired.done():
            return
        self.ended_early = early
        if self._timer is not None:
            self._timer.cancel()
        self.expires_at = asyncio.get_running_loop().time()
        running = self.admission.totals()["generating"]
        if running:
            log.warning("shutdown grace over: ending %d running generations (overloaded_error)", running)
        self.expired.set_result(None)

    async def wait_begun(self) -> None:
        """Return once the drain has begun (Hypercorn's ``shutdown_trigger``)."""
        await self._begun.wait()

    def refusal(self) -> OverloadedError:
        """The 529 for a request that reaches the API while draining."""
        message = f"{SHUTTING_DOWN} and accepts no new requests; {_RETRY}"
        return OverloadedError(message, retry_after=RETRY_AFTER)

    def ended_error(self) -> OverloadedError:
        """The ``overloaded_error`` ending a generation still running after the grace."""
        when = (
            f"by a second shutdown signal, before the grace period (server.shutdown_grace = "
            f"{self.grace:g} s) ran out"
            if self.ended_early
            else f"when the shutdown grace period (server.shutdown_grace = {self.grace:g} s) ran out"
        )
        return OverloadedError(
            f"{SHUTTING_DOWN}: this answer was ended {when}; {_RETRY}", retry_after=RETRY_AFTER
        )

    @contextlib.contextmanager
    def cut(self) -> Iterator[None]:
        """Run the block until it ends or the grace runs out; then cancel it
        and raise :meth:`ended_error` (a 529 before anything was sent).

        Raises:
            OverloadedError: the grace ran out while the block was running.
        """
        expired = self.expired
        with anyio.CancelScope() as scope:

            def cancel(_: object) -> None:
                scope.cancel()

            expired.add_done_callback(cancel)
            try:
                yield
            finally:
                expired.remove_done_callback(cancel)
        if scope.cancelled_caught:
            raise self.ended_error()
