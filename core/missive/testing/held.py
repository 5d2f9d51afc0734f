"""A request held open on an in-process app, as an ASGI server holds a
client's connection: for tests that keep a slot busy, queue a request
behind it, or read a stream while it is still being written, none of which
the in-process transport can do (httpx's ``ASGITransport`` hands a response
over only once its body has ended).

The request is given to the app at the ASGI level on the app's event loop
(the ``http`` scope, ``http.request``, then ``receive`` waiting) as
Hypercorn passes it on; :meth:`HeldRequest.close` is the client hanging up:
``receive`` answers ``http.disconnect``, the message Hypercorn sends when
the client's socket closes. What it does not cover is Hypercorn noticing
the closed socket itself (the live tests of disconnects do). Source: the
ASGI HTTP connection scope specification (asgi.readthedocs.io, "HTTP").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["HeldRequest"]


class _App(Protocol):
    """What a held request needs of :class:`~missive.testing.in_process.InProcessApp`."""

    app: Any

    def run(self, coroutine: Any) -> Any: ...


class HeldRequest:
    """A ``POST`` of ``body`` (JSON) to ``path`` on ``app``, running until
    its response ends or :meth:`close` hangs up. A context manager: leaving
    it closes the request.

    Attributes:
        received: the response body's bytes so far.
    """

    def __init__(
        self,
        app: _App,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._app = app
        self.received = bytearray()
        self._status = 0
        content = json.dumps(body).encode()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"missive.in-process"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
                *((name.lower().encode(), value.encode()) for name, value in (headers or {}).items()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("missive.in-process", 80),
        }

        async def start() -> None:
            self._left = asyncio.Event()
            requested = False

            async def receive() -> dict[str, Any]:
                nonlocal requested
                if not requested:
                    requested = True
                    return {"type": "http.request", "body": content, "more_body": False}
                await self._left.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    self._status = int(message["status"])
                elif message["type"] == "http.response.body":
                    self.received.extend(message.get("body", b""))

            self._task: asyncio.Future[None] = asyncio.ensure_future(app.app(scope, receive, send))

        app.run(start())

    def done(self) -> bool:
        """Whether the app has ended the request."""
        return self._task.done()

    def status(self, timeout: float = 60) -> int:
        """The response's status, once the app has started it.

        Raises:
            AssertionError: no response started within ``timeout`` seconds.
        """
        self._until(lambda: self._status != 0, "the response's start", timeout)
        return self._status

    def wait_for(self, fragment: bytes | str, timeout: float = 60) -> bytes:
        """The body so far, once it holds ``fragment``.

        Raises:
            AssertionError: the request ended, or ``timeout`` passed, first.
        """
        wanted = fragment.encode() if isinstance(fragment, str) else fragment
        self._until(lambda: wanted in self.received, f"{wanted!r} in the body", timeout)
        return bytes(self.received)

    def close(self, timeout: float = 60) -> None:
        """Hang up and wait for the app to end the request.

        Raises:
            AssertionError: the request still runs ``timeout`` seconds after its client left.
        """

        async def leave() -> None:
            self._left.set()
            await asyncio.wait([self._task], timeout=timeout)

        self._app.run(leave())
        if not self._task.done():
            raise AssertionError(f"the held request still runs {timeout} s after its client left")
        if not self._task.cancelled() and self._task.exception() is not None:
            raise AssertionError("the app failed the held request") from self._task.exception()

    def _until(self, check: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self._task.done():
                if check():
                    return
                raise AssertionError(
                    f"the request ended (status {self._status}) before {what}: {bytes(self.received)[:500]!r}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s: {bytes(self.received)[:500]!r}")
            time.sleep(0.01)

    def __enter__(self) -> HeldRequest:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if not self._task.done():
            self.close()
