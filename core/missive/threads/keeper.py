"""One ``POST /v1/messages`` request's part in the kept responses.

The route makes a :class:`Keeper` per request
(:func:`missive.server.routes.messages.keeper`) and calls it
at four points:

1. :meth:`Keeper.expand` on the parsed body, before validation: a thread
   continue becomes the whole conversation (:mod:`.thread`);
2. :meth:`Keeper.start` on ``message_start``, before it is sent: the
   request's cache diagnostics go into it and its fingerprint is kept
   (:mod:`.fingerprint`);
3. :meth:`Keeper.note` on every event as it is sent: at ``message_stop``,
   before that event leaves, the thread with its answer is held, so a client
   that continues as soon as it reads ``message_stop`` finds it;
4. :meth:`Keeper.close` when the request's record finishes: a continue
   whose answer did not complete frees the response it continued.
"""

from __future__ import annotations

from typing import Any

from ..config import ThreadsConfig
from ..messages.stream import accumulate
from ..protocol.schema.request import MessagesRequest
from .fingerprint import cache_miss_reason, fingerprint_of
from .store import ResponseStore
from .thread import ThreadTurn, begin_turn

__all__ = ["Keeper"]


class Keeper:
    """What one request keeps (see the module doc).

    Args:
        store: the process's :class:`~missive.threads.store.ResponseStore`.
        config: ``[threads]``.
        owner: the name of the request's API key (:mod:`missive.keys`).
    """

    def __init__(self, store: ResponseStore, config: ThreadsConfig, owner: str) -> None:
        self.store = store
        self.config = config
        self.owner = owner
        self.turn: ThreadTurn | None = None
        self._events: list[dict[str, Any]] = []

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body to validate: ``body``, or for a thread continue the whole
        conversation (see :func:`missive.threads.thread.begin_turn`, which
        says what it raises)."""
        body, self.turn = begin_turn(body, store=self.store, owner=self.owner, enabled=self.config.enabled)
        return body

    def start(self, req: MessagesRequest, *, model: str, system: str | None, first: dict[str, Any]) -> None:
        """Put the request's cache diagnostics into ``first`` (its
        ``message_start`` event, not sent yet) and keep its fingerprint, when
        it asked for ``diagnostics``; begin collecting a thread's answer.

        Args:
            model: the configured model serving it.
            system: the system prompt rendered for it.
        """
        message = first["message"]
        if req.diagnostics is not None:
            usage = message["usage"]
            cache_read = usage.get("cache_read_input_tokens") or 0
            tokens = usage["input_tokens"] + cache_read + (usage.get("cache_creation_input_tokens") or 0)
            current = fingerprint_of(req, model=model, system=system, prompt_tokens=tokens)
            reason = None
            previous_id = req.diagnostics.previous_message_id
            if previous_id is not None:
                previous = self.store.get(self.owner, previous_id)
                reason = cache_miss_reason(previous.fingerprint if previous else None, current, cache_read)
            message["diagnostics"] = None if reason is None else {"cache_miss_reason": reason}
            kept = self.store.entry(self.owner, message["id"])
            self.store.keep_fingerprint(kept, current, self.config.diagnostics_ttl)
        self.note(first)

    def note(self, event: dict[str, Any]) -> None:
        """Take in one event as it is sent; at ``message_stop``, hold the thread."""
        if self.turn is None:
            return
        self._events.append(event)
        if event["type"] == "message_stop":
            turn, self.turn = self.turn, None
            events, self._events = self._events, []
            turn.store_reply(self.store, self.owner, accumulate(events), self.config.ttl)

    def close(self) -> None:
        """The request ended: a thread turn that did not complete is given up."""
        turn, self.turn = self.turn, None
        self._events = []
        if turn is not None:
            turn.release()
