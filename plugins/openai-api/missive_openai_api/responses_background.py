"""Background responses: ``POST /v1/responses`` with ``background: true``.

OpenAI's API reference ("Create a model response", ``background``: "Whether
to run the model response in the background"; "Background mode" guide;
"Cancel a response": "Only responses created with the ``background``
parameter set to ``true`` can be cancelled"): the request is answered at
once with the ``response`` object (``background: true``, its ``status``
``queued`` or ``in_progress``), the client polls ``GET /v1/responses/{id}``
until the status is ``completed`` (``incomplete``, ``failed``), and ``POST
/v1/responses/{id}/cancel`` stops it (``status: "cancelled"``) and returns it.

Here the answer begins in the request, as any other (so a request the core
refuses is still a 400 in the request's terms, and the response is
``in_progress``: the model has been admitted); its events are then read by
a task of the process (:class:`Background`), through the same
:class:`.responses_stream.ResponseConverter` a stream uses, and the kept
response is replaced by each newer state; its request's record finishes
when the answer ends, as a stream's does. A background response is kept
(``store: false`` with ``background`` is a 400, as it cannot be polled), for
its key only, and lost with the process like every kept response. Not
served: ``background`` with ``stream: true`` (a 400: the SSE replay by
``starting_after`` it implies is not kept).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from missive.api import MissiveError

from .responses_store import ResponseStore, Stored
from .responses_stream import ResponseConverter

__all__ = ["Background"]

log = logging.getLogger("missive.openai_api")

#: ``finished(converter)``: keep the response the converter ended with.
Keep = Callable[[ResponseConverter], None]


class EventBatches(Protocol):
    """What :meth:`missive.api.Gateway.stream` returns, as read here."""

    def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]: ...

    async def aclose(self) -> None: ...


class Background:
    """The background responses running in this process."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store
        self._running: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        entry: Stored,
        converter: ResponseConverter,
        first: dict[str, Any],
        batches: EventBatches,
        finished: Keep,
        counted: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Keep ``entry`` (its response ``in_progress``) and read the
        answer's events (``first``, then ``batches``, each as ``counted``
        gives it: with the reasoning tokens in its usage) in a task;
        ``finished`` keeps the last state. The response object to answer with."""
        converter.feed(first)
        response_id = entry.response["id"]
        self.store.put(response_id, entry)
        task = asyncio.get_running_loop().create_task(self._run(converter, batches, finished, counted))
        self._running[response_id] = task
        task.add_done_callback(lambda _: self._running.pop(response_id, None))
        return entry.response

    async def _run(
        self,
        converter: ResponseConverter,
        batches: EventBatches,
        finished: Keep,
        counted: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        try:
            try:
                async for batch in batches:
                    for event in batch:
                        if event["type"] != "ping":
                            converter.feed(counted(event))
            except MissiveError as exc:
                converter.fail(exc)
            except asyncio.CancelledError:
                converter.stop("cancelled")
            finally:
                await batches.aclose()
            if converter.final is not None:
                finished(converter)
        except Exception:  # a task's failure has no one to reach but the log
            log.exception("background response %s failed", converter.shape.response_id)

    async def close(self) -> None:
        """Stop every running response (the app is shutting down)."""
        for response_id in list(self._running):
            await self.cancel(response_id)

    async def cancel(self, response_id: str) -> bool:
        """Stop ``response_id`` if it is running (its response is kept as
        ``cancelled``); whether it was running."""
        task = self._running.get(response_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True
