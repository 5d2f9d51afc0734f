"""A connection its client closed is closed at once, not after the keep-alive timeout.

Hypercorn's asyncio worker (0.17, 0.18: ``hypercorn/asyncio/tcp_server.py``)
runs each connection as a task group holding the reader loop, the requests'
tasks and, between requests, a keep-alive timer (``keep_alive_timeout``;
``missive serve`` sets 75 s, above the 60 s idle timeout of common load
balancers). When the client closes an idle keep-alive connection, the reader
sees the end of the stream and returns, but nothing stops the timer: the task
group waits for it, and only then is the socket closed. Until then the socket
sits in ``CLOSE-WAIT`` and holds a file descriptor. A client that opens a new
connection for each answer, or a pool that drops its connections, therefore
leaves up to ``keep_alive_timeout`` seconds' worth of dead sockets open: 64
streaming clients held 550 of them (issue 16, benchmarks/bench_soak.py).

:class:`PromptCloseTCPServer` is Hypercorn's connection with that fixed: once
its reader has returned (end of stream, a read error), nothing more can
arrive, so the timer is stopped and the connection closes as soon as its
requests have ended (a request still running gets ``http.disconnect`` from
Hypercorn, as before). If a request ends after that and Hypercorn would arm
the timer again to wait for the next request, the connection is closed
instead. :func:`install` makes Hypercorn's asyncio worker use it;
``missive serve`` and :mod:`missive.asgi` call it. Other workers (trio,
uvloop's own server) are left as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from hypercorn.asyncio import run as hypercorn_run
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.events import Updated

__all__ = ["PromptCloseTCPServer", "install", "installed"]

log = logging.getLogger("missive.connections")


class PromptCloseTCPServer(TCPServer):
    """Hypercorn's ``TCPServer``, closed as soon as its client is gone (module doc)."""

    _reading_ended = False

    async def _read_data(self) -> None:
        try:
            await super()._read_data()
        finally:
            # Nothing more will be read: the keep-alive timer must not keep the
            # connection open (its task group waits for every task in it).
            self._reading_ended = True
            await self.idle_task.stop()

    async def protocol_send(self, event: Any) -> None:
        """Hypercorn's, except that a connection going idle after its reader
        returned is closed instead of waiting for a next request."""
        if isinstance(event, Updated) and event.idle and self._reading_ended:
            await self._close()  # idle, and no next request can come
            return
        await super().protocol_send(event)


def install() -> bool:
    """Make Hypercorn's asyncio worker serve connections with
    :class:`PromptCloseTCPServer` (idempotent). Returns whether it is in
    place: False, with a warning, when this Hypercorn's connection class is
    not of the expected shape (the fix is then left out)."""
    if _worker_class() is PromptCloseTCPServer:
        return True
    expected = ("_read_data", "protocol_send", "_close", "_idle_timeout")
    if _worker_class() is not TCPServer or not all(hasattr(TCPServer, name) for name in expected):
        log.warning(
            "Hypercorn's asyncio connections are not the expected ones: connections closed by their "
            "client may stay open until keep_alive_timeout"
        )
        return False
    setattr(hypercorn_run, _NAME, PromptCloseTCPServer)  # looked up for each connection by worker_serve
    return True


def installed() -> bool:
    """Whether :func:`install` has put the fix in place in this process."""
    return _worker_class() is PromptCloseTCPServer


#: The name under which ``hypercorn.asyncio.run`` imports its connection
#: class (which it does not re-export, so it is reached by name).
_NAME = "TCPServer"


def _worker_class() -> object:
    """The connection class Hypercorn's asyncio worker builds connections with."""
    return getattr(hypercorn_run, _NAME)
