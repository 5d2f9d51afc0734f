"""The app in process, for API tests that need no socket: the same Quart
app ``missive serve`` runs (:func:`missive.server.app.create_app`), started
with its lifespan (models loaded, closed at the end) on an event loop of
its own in a thread, and reached through httpx transports, so the official
SDK's clients talk to it unchanged (their ``http_client`` argument)::

    with in_process_app({"models": {"echo": {"driver": "echo"}}}) as app:
        client = anthropic.Anthropic(base_url=app.url, api_key="test", http_client=app.http_client())

What it does not give: a socket (disconnects, keep-alive, Hypercorn's own
behaviour), several workers, or a stream read as it is written: httpx's
:class:`~httpx.ASGITransport` hands over a response once its body has ended,
so a test of timing or of a client leaving mid-stream needs
:func:`missive.testing.live_server`. Sources: httpx's transports API
(``BaseTransport.handle_request``, ``ASGITransport``); Quart's
``test_app()`` for the lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import httpx

from .held import HeldRequest

if TYPE_CHECKING:
    import anthropic

__all__ = ["InProcessApp", "in_process_app", "sdk_http"]

#: The base URL the clients use; nothing listens there, the transport routes it to the app.
BASE_URL = "http://missive.in-process"


def sdk_http() -> ModuleType:
    """The httpx package the installed ``anthropic`` SDK builds its clients
    from (``httpx``; ``httpx2`` in releases that moved to it): its
    ``http_client`` argument must be a client of that package."""
    import anthropic

    client_class = anthropic.DefaultHttpxClient.__mro__[1]
    return sys.modules[client_class.__module__.split(".")[0]]


def _transport(http: ModuleType, app: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """A synchronous transport of ``http`` (httpx or a package with its API)
    that runs each request on the app's event loop, in its thread, through
    that package's ``ASGITransport``."""

    class SyncASGITransport(http.BaseTransport):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            self._inner = http.ASGITransport(app=app)

        def handle_request(self, request: Any) -> Any:
            body = request.read()

            async def send() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
                copy = http.Request(request.method, request.url, headers=request.headers, content=body)
                response = await self._inner.handle_async_request(copy)
                content = await response.aread()
                return response.status_code, response.headers.raw, content

            status, headers, content = asyncio.run_coroutine_threadsafe(send(), loop).result()
            return http.Response(status, headers=headers, content=content, request=request)

    return SyncASGITransport()


class _LogLines(logging.Handler):
    """The lines of the records it is given, kept in memory."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class InProcessApp:
    """A started app (see :func:`in_process_app`).

    Attributes:
        app: the Quart app.
        url: the base URL to give clients (only :meth:`http_client`'s transport reaches it).
    """

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop, lines: list[str] | None = None) -> None:
        self.app = app
        self.url = BASE_URL
        self._loop = loop
        self._lines = lines if lines is not None else []

    def log(self) -> str:
        """What the ``missive`` loggers wrote at ``info`` and above since the
        app was created (its start-up included; another app of this process
        running meanwhile writes there too), one record a line: the messages
        a server's log holds, not its format (a test of the format, or of
        all a process writes, needs a live server)."""
        return "".join(line + "\n" for line in self._lines)

    def http_client(self, http: ModuleType | None = None, **options: Any) -> Any:
        """A synchronous client bound to the app, of the httpx package
        ``http`` (default: the one the SDK uses, :func:`sdk_http`), for
        ``anthropic.Anthropic(http_client=...)`` or direct HTTP."""
        http = http or sdk_http()
        return http.Client(transport=_transport(http, self.app, self._loop), base_url=self.url, **options)

    def sdk(self, **options: Any) -> anthropic.Anthropic:
        """An ``anthropic.Anthropic`` client of the app (``api_key="unused"``,
        ``max_retries=0`` unless ``options`` say otherwise): what a test of a
        live server builds from its URL."""
        import anthropic

        settings: dict[str, Any] = {"api_key": "unused", "max_retries": 0, **options}
        return anthropic.Anthropic(base_url=self.url, http_client=self.http_client(), **settings)

    def async_http_client(self, **options: Any) -> httpx.AsyncClient:
        """An async httpx client bound to the app, for use on the app's own loop only
        (:meth:`run`); an ``AsyncAnthropic`` on another loop needs :meth:`http_client`'s sync form."""
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=self.url, **options)

    def run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the app's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def hold(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> HeldRequest:
        """``POST`` ``body`` to ``path``, held open as a client's connection
        (:class:`~missive.testing.held.HeldRequest`): a slot kept busy, a
        request queued behind it, a stream read while it is written."""
        return HeldRequest(self, path, body, headers)


@contextlib.contextmanager
def in_process_app(
    config: Mapping[str, Any] | None = None,
    *,
    state_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: int = 300,
) -> Iterator[InProcessApp]:
    """Create the app for ``config`` (a configuration mapping; None: the
    defaults, i.e. the default model), start it with its lifespan on a
    thread's event loop, yield it, then shut it down (models closed).

    Its batch and usage databases are files of its own (in a temporary
    folder) unless ``config`` names them or ``state_dir`` is given: one
    server per database, and an app kept for a whole test session must not
    hold the state directory's files that the test run's servers open
    (their batches would answer "in use by another Missive server").

    ``state_dir``: the app's state directory (``MISSIVE_STATE_DIR`` while it
    is created and runs, its databases there as ``missive serve`` keeps
    them): a second app on the same folder is a restart. ``env``: further
    environment variables set while the app is created and runs (restored
    after). Both change this process's ``os.environ``: one such app at a time.
    ``timeout``: the seconds its start-up, and its shutdown, may take (a
    model's load, its state written at the close; Quart's own limit is 6).

    Raises:
        ConfigError: a configuration the app refuses (as ``missive serve``
            would), when it is read or when the app starts (a driver's own
            check); any other exception of a failed start, as raised.
    """
    from ..config import Config
    from ..server.app import create_app

    own = tempfile.TemporaryDirectory(prefix="missive-in-process-")
    settings = dict(config or {})
    variables = dict(env or {})
    if state_dir is not None:
        variables["MISSIVE_STATE_DIR"] = str(state_dir)
    else:
        for section, file in (("batches", "batches.sqlite3"), ("usage", "usage.sqlite3")):
            table = dict(settings.get(section) or {})
            table.setdefault("database", str(Path(own.name) / file))
            settings[section] = table
    saved = {name: os.environ.get(name) for name in variables}

    def restore_environment() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        own.cleanup()

    logger = logging.getLogger("missive")
    lines = _LogLines()
    level = logger.level
    logger.addHandler(lines)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)

    def restore() -> None:
        logger.removeHandler(lines)
        logger.setLevel(level)
        restore_environment()

    os.environ.update(variables)
    try:
        app = create_app(Config.model_validate(settings))
    except BaseException:
        restore()
        raise
    loop = asyncio.new_event_loop()
    started: Future[None] = Future()
    stop = asyncio.Event()

    async def serve() -> None:
        # The lifespan's two halves (before_serving / after_serving), called
        # as Quart's ASGI lifespan calls them, so that a failed start raises
        # its own exception (a driver's ConfigError), not the lifespan's message.
        try:
            await asyncio.wait_for(app.startup(), timeout)
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result(None)
        await stop.wait()
        await asyncio.wait_for(app.shutdown(), timeout)

    thread = threading.Thread(
        target=lambda: loop.run_until_complete(serve()), name="missive-in-process", daemon=True
    )
    thread.start()
    try:
        started.result()
        yield InProcessApp(app, loop, lines.lines)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        loop.close()
        restore()
