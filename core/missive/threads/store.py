"""What the server keeps of its responses: one small store, bounded in
count and bytes, for message threads and cache diagnostics.

Each response id (``msg_...``) may hold, for the API key that made it:

* a :class:`ThreadState`: the conversation up to and including that response,
  with the thread's ``system``, ``tools`` and fixed fields, for a later
  ``thread: {"type": "continue", "previous_message_id": ...}``;
* a :class:`~missive.threads.fingerprint.Fingerprint` of the request, for a
  later ``diagnostics.previous_message_id``.

Rules (Anthropic docs, "Message threads" and "Cache diagnostics"): a thread
expires ``ttl`` seconds after the response it ends with (the API's 5
minutes; each stored response starts the time again); a fingerprint is kept
``diagnostics_ttl`` seconds; data is kept per API key and never seen by
another (the key's name, :mod:`missive.keys`: another key's id is as absent);
nothing is written to disk. A response can be continued once: when a
continue completes, the response it continued keeps only that fact (its
conversation now lives in the new response), so a thread's conversation is
held once, not once per turn.

Bounds: beyond ``max_count`` responses or ``max_bytes`` of kept
conversations (their JSON size), the oldest entries are dropped first; a
continue of a dropped thread is answered ``thread_not_found`` and the SDKs
resend the whole conversation. The store is per process: with
``server.workers`` > 1 or several replicas, a continue may reach a process
that does not hold the thread, with the same answer and the same recovery.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import fastjson
from .fingerprint import Fingerprint

__all__ = ["ThreadState", "Kept", "ResponseStore"]

#: Seconds between two sweeps of expired entries (lookups expire entries anyway).
SWEEP_INTERVAL = 1.0


@dataclass
class ThreadState:
    """A thread as of one response.

    Attributes:
        fixed: the fields that must stay the same across the thread's turns,
            by name (``model``, ``output_config``, ``output_format``), as sent
            at its creation (None where absent).
        system, tools: the thread's ``system`` and ``tools`` as sent (None
            where absent); a continue leaves them out and gets these.
        messages: every message up to and including the response, as JSON
            values (the response as ``{"role": "assistant", "content": [...]}``).
    """

    fixed: dict[str, Any]
    system: Any
    tools: Any
    messages: list[Any]

    def size(self) -> int:
        """Bytes this thread counts for ``max_bytes``: its JSON."""
        return len(fastjson.dumps([self.system, self.tools, self.messages]))


@dataclass
class Kept:
    """What is kept of one response, for the API key ``owner``.

    Attributes:
        thread: the thread ending with this response, or None.
        thread_expires: monotonic time the thread (or the mark below) expires.
        continued: a continue from this response completed (its thread moved
            on; a second continue is ``thread_already_continued``).
        in_flight: a continue from this response is running.
        fingerprint: the request's, when it asked for ``diagnostics``.
        fingerprint_expires: monotonic time the fingerprint expires.
    """

    owner: str
    thread: ThreadState | None = None
    thread_expires: float = 0.0
    continued: bool = False
    in_flight: bool = False
    fingerprint: Fingerprint | None = None
    fingerprint_expires: float = 0.0
    size: int = field(default=0, repr=False)

    def expire(self, now: float) -> bool:
        """Drop the parts that expired by ``now`` (a thread being continued
        stays until that continue ends); True when nothing is left."""
        if not self.in_flight and now >= self.thread_expires:
            self.thread, self.continued = None, False
        if self.fingerprint is not None and now >= self.fingerprint_expires:
            self.fingerprint = None
        return self.thread is None and not self.continued and not self.in_flight and self.fingerprint is None


class ResponseStore:
    """The kept responses of one process (see the module doc).

    Args:
        max_count: entries kept at most.
        max_bytes: bytes of thread conversations kept at most.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, max_count: int, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: OrderedDict[str, Kept] = OrderedDict()
        self._bytes = 0
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes of the thread conversations held now."""
        return self._bytes

    def get(self, owner: str, message_id: str) -> Kept | None:
        """The entry of ``message_id`` if ``owner`` made it and some of it is
        still valid; None otherwise (another key's entry is as absent)."""
        kept = self._entries.get(message_id)
        if kept is None or kept.owner != owner:
            return None
        if kept.expire(self.clock()):
            self._drop(message_id)
            return None
        self._resize(kept)
        return kept

    def entry(self, owner: str, message_id: str) -> Kept:
        """The entry of ``message_id`` for ``owner``, created empty when absent
        (message ids are random: no other key's entry shares one)."""
        kept = self.get(owner, message_id)
        if kept is None:
            kept = Kept(owner=owner)
            self._entries[message_id] = kept
        return kept

    def keep_thread(self, kept: Kept, thread: ThreadState | None, ttl: float) -> None:
        """Set ``kept``'s thread (None: drop it), valid ``ttl`` seconds from
        now, and bring the store within its bounds. A thread alone larger
        than ``max_bytes`` is not kept (its continue gets ``thread_not_found``)."""
        size = thread.size() if thread is not None else 0
        if size > self.max_bytes:
            thread, size = None, 0
        kept.thread = thread
        kept.thread_expires = self.clock() + ttl
        self._bytes += size - kept.size
        kept.size = size
        self._bound()

    def keep_fingerprint(self, kept: Kept, fingerprint: Fingerprint, ttl: float) -> None:
        """Set ``kept``'s fingerprint, valid ``ttl`` seconds from now."""
        kept.fingerprint = fingerprint
        kept.fingerprint_expires = self.clock() + ttl
        self._bound()

    def _resize(self, kept: Kept) -> None:
        """Account for a thread that expired (a kept thread never changes size)."""
        if kept.thread is None and kept.size:
            self._bytes -= kept.size
            kept.size = 0

    def _drop(self, message_id: str) -> None:
        kept = self._entries.pop(message_id, None)
        if kept is not None:
            self._bytes -= kept.size
            kept.size = 0

    def _bound(self) -> None:
        now = self.clock()
        if now - self._swept >= SWEEP_INTERVAL:
            self._swept = now
            for message_id, kept in list(self._entries.items()):
                if kept.expire(now):
                    self._drop(message_id)
                else:
                    self._resize(kept)
        while self._entries and (len(self._entries) > self.max_count or self._bytes > self.max_bytes):
            self._drop(next(iter(self._entries)))
