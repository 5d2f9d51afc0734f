"""One answer begun: its ``message_start``, the events after it, its admission permit.

:meth:`missive.serving.service.Messages.begin` makes an :class:`Answer`;
the HTTP route sends it as JSON or SSE, the batch runner folds it into a
result. Whoever holds it calls :meth:`Answer.aclose` when done with it,
however it ended. The permit (a :class:`~missive.serving.admission.Permit`) is
given back in one place, :meth:`Answer._release`, reached three ways:

* the answer completes: just before ``message_stop`` is handed on (the
  driver has ended by then: :class:`~missive.messages.stream.MessageStream`
  closes it before ``message_delta``), so a client that sends its next
  request as soon as it reads ``message_stop`` finds the slot free;
* the answer fails or is abandoned (an error mid-stream, a client gone, a
  shutdown's grace run out): when :meth:`Answer.events` ends, after the
  driver was stopped;
* :meth:`Answer.aclose`, after the driver was stopped (an answer whose
  events were never read).

An answer dropped without any of these (a streaming body never iterated)
still frees its permit, through ``Permit.__del__``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from ..messages.extras import EventStream
    from ..messages.stream.usage import Usage
    from .admission import Permit
    from .prepared import Prepared

__all__ = ["Answer", "Event"]

Event = dict[str, Any]


class Answer:
    """See the module doc.

    Attributes:
        prepared: the request it answers.
        first: its ``message_start`` event, not sent yet (a thread's cache
            diagnostics may still be put into it).
    """

    def __init__(
        self,
        prepared: Prepared,
        first: Event,
        stream: EventStream,
        permit: Permit,
        usage: Usage | None = None,
    ) -> None:
        self.prepared = prepared
        self.first = first
        self._stream = stream
        self._usage = usage
        self._permit: Permit | None = permit
        self._watchers: list[Callable[[Event], None]] = [prepared.caller.record.note]

    @property
    def thinking_tokens(self) -> int:
        """The output tokens of the model's reasoning so far (counted on its
        thinking deltas, at most the answer's output tokens; 0 when it did
        not reason): not in the Messages API's usage, for a front door whose
        API reports them (OpenAI's ``reasoning_tokens``)."""
        if self._usage is None:
            return 0
        return min(self._usage.thinking_tokens, self._usage.used())

    def watch(self, note: Callable[[Event], None]) -> None:
        """Have ``note`` take in every event after ``message_start`` as it is
        handed on (the request's record always does)."""
        self._watchers.append(note)

    async def events(self) -> AsyncGenerator[Event, None]:
        """The events after ``message_start``, up to ``message_stop``.

        Raises:
            MissiveError: a failure after the answer started (sent as an SSE
                ``error`` event, or as the HTTP error of a non-streaming answer).
        """
        try:
            async with aclosing(self._stream.events()) as events:
                async for event in events:
                    if event["type"] == "message_stop":
                        self._release()
                    for note in self._watchers:
                        note(event)
                    yield event
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the driver (if it still runs), then give the permit back;
        idempotent. Shielded: it runs as a cancelled request unwinds (a
        client gone, a shutdown's grace run out), and a driver left
        running would keep generating for nobody."""
        try:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
        finally:
            self._release()

    def _release(self) -> None:
        permit, self._permit = self._permit, None
        if permit is not None:
            permit.release()
