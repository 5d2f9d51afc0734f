"""Handing a model thread's output to the event loop, for in-process drivers.

In-process drivers (llama.cpp, MLX) run each model in its own thread, which
decodes ahead of the event loop. A :class:`ThreadChannel` carries what that
thread produces to the loop without ever making the thread wait for it (each
item is handed over with ``call_soon_threadsafe``), gathers the items that
arrive while the loop is busy into one batch (so a busy loop never slows
decoding), and carries a cancel flag the other way: the thread checks
:meth:`ThreadChannel.cancelled` before each token, so a client that goes away
stops its generation within one token.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Generic, TypeVar

from ..protocol.errors import ApiError

__all__ = ["ThreadChannel"]

T = TypeVar("T")


class ThreadChannel(Generic[T]):
    """Items from one worker thread to the event loop that created the channel.

    Thread side: :meth:`send`, :meth:`fail`, :meth:`close` (always, last) and
    :meth:`cancelled`. Loop side: :meth:`next_batch` and :meth:`cancel`.

    Args:
        failure: what a thread exception is reported as, e.g.
            ``"llama.cpp failed while generating"``.
    """

    def __init__(self, failure: str) -> None:
        self._failure = failure
        self._loop = asyncio.get_running_loop()
        self._items: list[T] = []
        self._ended = False
        self._error: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._cancel = threading.Event()

    # -- loop side ---------------------------------------------------------

    def cancel(self) -> None:
        """Ask the thread to stop before its next step."""
        self._cancel.set()

    async def next_batch(self) -> tuple[list[T], bool]:
        """Wait for items; return ``(items, ended)`` (``ended``: no more will come).

        Raises:
            ApiError: the thread failed (``failure: error``).
        """
        while not self._items and not self._ended and self._error is None:
            self._wakeup.clear()
            await self._wakeup.wait()
        if self._error is not None:
            raise ApiError(f"{self._failure}: {self._error}") from self._error
        items, self._items = self._items, []
        return items, self._ended

    async def wait_closed(self) -> None:
        """Wait until the thread has called :meth:`close` (items and errors
        not taken yet stay for :meth:`next_batch`)."""
        while not self._ended:
            self._wakeup.clear()
            await self._wakeup.wait()

    # -- thread side -------------------------------------------------------

    def cancelled(self) -> bool:
        """Whether the loop asked the thread to stop."""
        return self._cancel.is_set()

    def send(self, item: T) -> None:
        """Hand one item to the loop (never blocks)."""
        self._post(item, False, None)

    def fail(self, error: BaseException) -> None:
        """Report the thread's failure; the loop raises it from :meth:`next_batch`."""
        self._post(None, False, error)

    def close(self) -> None:
        """No more items will come (call it last, also after :meth:`fail`)."""
        self._post(None, True, None)

    def _post(self, item: T | None, ended: bool, error: BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._receive, item, ended, error)
        except RuntimeError:  # the event loop is closed (shutdown): nobody listens any more
            self._cancel.set()

    def _receive(self, item: T | None, ended: bool, error: BaseException | None) -> None:
        if item is not None:
            self._items.append(item)
        self._ended = self._ended or ended
        self._error = self._error or error
        self._wakeup.set()
