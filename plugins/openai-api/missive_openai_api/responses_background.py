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
its key only, and lost with the process like every kept response. While
it runs, ``GET`` shows the output written so far (its items
``in_progress``, :meth:`.responses_stream.ResponseConverter.snapshot`).

Its stream events are logged (:mod:`.responses_replay`): ``background``
with ``stream: true`` streams them as they come, and ``GET
/v1/responses/{id}?stream=true&starting_after=N`` streams them again from
there, then the new ones; a client whose stream drops does not stop the
response (the guide: "helpful if you expect the client to drop the stream
and want the option of picking it back up later").
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from missive.api import MissiveError

from .responses_replay import KEPT_LOGS, EventLog
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


def _cancelled_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last events of a cancelled response's stream: the open items'
    ends, then ``response.incomplete`` carrying the response, its ``status``
    ``"cancelled"``. OpenAI's streaming events reference has no
    ``response.cancelled`` event (its terminal events are
    ``response.completed``, ``response.failed`` and ``response.incomplete``,
    the ones the ``openai`` SDK's stream types know); without one a client
    reading the stream waits for an end that never comes. ``incomplete``
    is the one that says "stopped before its end, with what it wrote", no
    error; the response's own ``status`` says it was cancelled."""
    *ends, last = events
    return [*ends, {**last, "type": "response.incomplete"}]


class Background:
    """The background responses running in this process."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store
        self._running: dict[str, asyncio.Task[None]] = {}
        self._converters: dict[str, ResponseConverter] = {}
        self._logs: OrderedDict[str, EventLog] = OrderedDict()

    def log(self, response_id: str) -> EventLog | None:
        """The events of ``response_id`` (running, or among the last
        :data:`~.responses_replay.KEPT_LOGS` finished), or None."""
        return self._logs.get(response_id)

    def snapshot(self, response_id: str) -> dict[str, Any] | None:
        """The response ``response_id`` as it stands while it runs (None: not running)."""
        converter = self._converters.get(response_id)
        return None if converter is None else converter.snapshot()

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
        response_id = entry.response["id"]
        logged = self._logs[response_id] = EventLog()
        logged.add(converter.feed(first))
        self.store.put(response_id, entry)
        task = asyncio.get_running_loop().create_task(
            self._run(converter, batches, finished, counted, logged)
        )
        self._running[response_id] = task
        self._converters[response_id] = converter
        task.add_done_callback(lambda _: self._ended(response_id))
        return entry.response

    def _ended(self, response_id: str) -> None:
        self._running.pop(response_id, None)
        self._converters.pop(response_id, None)
        logged = self._logs.get(response_id)
        if logged is not None:
            logged.end()
        finished = [rid for rid in self._logs if rid not in self._running]
        for rid in finished[: max(0, len(finished) - KEPT_LOGS)]:
            del self._logs[rid]

    async def _run(
        self,
        converter: ResponseConverter,
        batches: EventBatches,
        finished: Keep,
        counted: Callable[[dict[str, Any]], dict[str, Any]],
        logged: EventLog,
    ) -> None:
        kept = False
        try:
            try:
                async for batch in batches:
                    events = [
                        e
                        for event in batch
                        if event["type"] != "ping"
                        for e in converter.feed(counted(event))
                    ]
                    if converter.final is not None and not kept:
                        # kept before its last event is streamed: a client that
                        # continues as soon as it reads it finds it
                        finished(converter)
                        kept = True
                    logged.add(events)
            except MissiveError as exc:
                logged.add(converter.fail(exc))
            except asyncio.CancelledError:
                logged.add(_cancelled_events(converter.stop("cancelled")))
            finally:
                await batches.aclose()
            if converter.final is not None and not kept:
                finished(converter)
        except Exception:  # a task's failure has no one to reach but the log
            log.exception("background response %s failed", converter.shape.response_id)

    async def forget(self, response_id: str) -> None:
        """Stop ``response_id`` if it runs and drop its events: it is being
        deleted (``DELETE /v1/responses/{id}``). OpenAI's "Delete a model
        response" removes the response; a generation left running would
        keep its slot and write the response back when it ends, so a
        deleted response would come back."""
        await self.cancel(response_id)
        self._logs.pop(response_id, None)

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
