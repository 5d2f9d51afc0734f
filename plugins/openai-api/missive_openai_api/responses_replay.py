"""The stream events of a background response, kept to be streamed again.

OpenAI's "Background mode" guide ("Streaming a background response"): a
response made with both ``background`` and ``stream`` streams its events
at once, and a client whose stream dropped picks it up again with ``GET
/v1/responses/{id}?stream=true&starting_after=N``, ``N`` the
``sequence_number`` of the last event it read (the API reference, "Get a
model response": ``stream``, ``starting_after`` "The sequence number of the
event after which to start streaming"). A response made without
``background`` cannot be streamed so: OpenAI answers a 400 naming
``stream`` ("This response cannot be streamed because it was not created
with background=true.").

Here every background response's events are logged as its task makes them
(:class:`EventLog`, their ``sequence_number`` their place in the log); a
stream replays those after ``N``, then follows the new ones until the
answer ends, with ``: ping`` comments on silence. The logs of finished
responses are kept for the :data:`KEPT_LOGS` most recent, in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["EventLog", "KEPT_LOGS", "PING_SECONDS"]

#: The finished background responses whose events are kept for a replay.
KEPT_LOGS = 256
#: Seconds of silence before a follower gets a ``: ping`` (an empty batch).
PING_SECONDS = 10.0


class EventLog:
    """The stream events of one background response (see the module doc)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = False
        self._changed = asyncio.Event()

    def add(self, events: list[dict[str, Any]]) -> None:
        """Log ``events`` (numbered from the log's length on) and wake the followers."""
        if events:
            self.events += events
            self._wake()

    def end(self) -> None:
        """The answer has ended: followers stop after the last event."""
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(
        self, after: int, ping_seconds: float = PING_SECONDS
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The events whose ``sequence_number`` is above ``after``, in
        batches: those logged, then each new batch until :meth:`end`; an
        empty batch after ``ping_seconds`` of silence."""
        at = max(0, after + 1)
        while True:
            changed = self._changed
            if at < len(self.events):
                batch, at = self.events[at:], len(self.events)
                yield batch
                continue
            if self.done:
                return
            try:
                await asyncio.wait_for(changed.wait(), ping_seconds)
            except asyncio.TimeoutError:
                yield []
