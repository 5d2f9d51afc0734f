"""Graceful shutdown of ``missive serve``: drain, then stop.

On SIGTERM or SIGINT (:func:`serve_until_stopped`):

1. The drain begins (:meth:`Drain.begin`). Hypercorn's ``shutdown_trigger``
   returns, so Hypercorn closes its listening sockets (new connections are
   refused), closes idle keep-alive connections at once and each busy one
   after its response. Every request waiting in an admission queue is
   answered 529 ``overloaded_error`` at once, and so is every request that
   reaches admission later (:meth:`missive.serving.admission.Admission.close`) or
   reaches the API at all (:meth:`Drain.refusal`, checked by the app).
2. Generations already running go on for ``server.shutdown_grace`` seconds.
3. Then (:meth:`Drain.expire`; at once on a second signal) each one still
   running ends: a stream with an SSE ``error`` event of type
   ``overloaded_error`` after what it had already sent (:func:`missive.protocol.sse.paced`
   with ``stop``), a request not answered yet with a 529 (:meth:`Drain.cut`).
4. Hypercorn waits for the connections to close (its ``graceful_timeout``:
   the grace plus :data:`CLOSE_MARGIN`), then runs the lifespan shutdown,
   which closes the models (``Driver.aclose``), and ``missive serve`` exits 0.

Python 3.12's ``asyncio.Server.wait_closed()`` waits for every connection
(pgjones/hypercorn#308), so Hypercorn alone may wait forever for a client
that stopped reading: :func:`serve_until_stopped` cancels it
:data:`CLOSE_MARGIN` seconds after its own timeout, ends the connections'
tasks and closes the models itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..serving.drain import RETRY_AFTER, SHUTTING_DOWN, Drain  # the drain the signals begin

__all__ = ["Drain", "serve_until_stopped", "CLOSE_MARGIN", "RETRY_AFTER", "SHUTTING_DOWN"]

log = logging.getLogger("missive.shutdown")

#: Seconds after the grace for the last ``error`` events to be written and
#: the connections to close (Hypercorn's ``graceful_timeout`` is the grace
#: plus this), and again before :func:`serve_until_stopped` stops waiting.
CLOSE_MARGIN = 5.0


class _Models(Protocol):
    closing: bool

    async def aclose(self) -> None: ...


async def serve_until_stopped(
    serve: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]],
    drain: Drain,
    models: _Models,
    *,
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
    control: int | None = None,
) -> None:
    """Run ``serve(shutdown_trigger)`` (Hypercorn's ``serve`` with the app)
    until a signal has drained it (module doc), then close ``models``.

    The first of ``signals`` begins the drain, a second one ends the grace at
    once, a third one has its default effect (the process ends). With
    ``control`` (a worker of several, :mod:`missive.server.workers`), the signals
    come as bytes from the supervisor on that file descriptor instead (one
    byte, the signal's number, per signal; end of file, the supervisor gone,
    counts as a first signal), and no signal handler is installed. If Hypercorn
    has not returned :data:`CLOSE_MARGIN` seconds after its own
    ``graceful_timeout`` (Python 3.12+, pgjones/hypercorn#308), it is
    cancelled, with the tasks of the connections still open.

    Raises:
        OSError: Hypercorn could not listen.
    """
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        if not drain.begun:
            log.info("received %s", signum.name)
            drain.begin()
        else:
            log.info("received %s again: ending the grace now", signum.name)
            drain.expire(early=True)
            if control is None:
                with contextlib.suppress(NotImplementedError):
                    loop.remove_signal_handler(signum)  # a third one ends the process

    def on_control() -> None:
        assert control is not None
        try:
            data = os.read(control, 16)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(control)
            if not drain.begun:
                log.warning("the supervisor of the workers is gone: shutting down")
                drain.begin()
            return
        for number in data:
            try:
                on_signal(signal.Signals(number))
            except ValueError:
                on_signal(signal.SIGTERM)

    if control is not None:
        signals = ()
        loop.add_reader(control, on_control)
    for signum in signals:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except NotImplementedError:  # Windows: a plain handler that hands over to the loop
            signal.signal(signum, lambda sig, _: loop.call_soon_threadsafe(on_signal, signal.Signals(sig)))
    before = asyncio.all_tasks()
    server: asyncio.Task[Any] = loop.create_task(serve(drain.wait_begun))  # type: ignore[arg-type]
    try:
        begun = loop.create_task(drain.wait_begun())
        await asyncio.wait({server, begun}, return_when=asyncio.FIRST_COMPLETED)
        begun.cancel()
        while not server.done():
            assert drain.expires_at is not None
            remaining = drain.expires_at + 2 * CLOSE_MARGIN - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait({server}, timeout=remaining)
        if not server.done() and models.closing:
            await server  # Hypercorn's lifespan shutdown is closing the models: let it
        if not server.done():
            await _abandon(server, before)
        elif not server.cancelled():
            server.result()  # Hypercorn's own errors (cannot listen)
    finally:
        if control is not None:
            loop.remove_reader(control)
        for signum in signals:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signum)
        if not server.done():
            server.cancel()
        await models.aclose()
        log.info("stopped: models closed")


async def _abandon(server: asyncio.Task[None], before: set[asyncio.Task[object]]) -> None:
    """Cancel Hypercorn, then the tasks started since it was (its
    connections and their requests), before the models close under them."""
    log.warning("connections still open %g s after the shutdown grace: closing them", 2 * CLOSE_MARGIN)
    server.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await server
    others = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=CLOSE_MARGIN)
