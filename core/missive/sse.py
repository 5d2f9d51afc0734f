"""Server-sent events framing and the keep-alive ``ping``.

Frames are ``event: <type>\\ndata: <json>\\n\\n`` with ``data.type`` equal to
the event name and no ``[DONE]`` sentinel (contract section 4; the SDKs
dispatch on the ``event:`` line).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any, TypeVar

__all__ = ["frame", "PING", "with_heartbeat"]

T = TypeVar("T")

PING: dict[str, Any] = {"type": "ping"}


def frame(event: dict[str, Any]) -> bytes:
    """One SSE frame for an API event dict."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


async def with_heartbeat(source: AsyncIterator[T], interval: float, beat: T) -> AsyncIterator[T]:
    """Yield ``source``'s items, and ``beat`` after every ``interval`` seconds of silence.

    The pending ``__anext__`` runs as a task that a timeout does not cancel,
    so a slow prefill is never interrupted by a ping; cancelling this
    generator (client gone) cancels that task and closes ``source``.
    """
    iterator = source.__aiter__()
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield beat
                continue
            task, pending = pending, None
            try:
                item = task.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with suppress(BaseException):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
