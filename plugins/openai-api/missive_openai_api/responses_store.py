"""The responses kept for ``previous_response_id``, ``GET /v1/responses/{id}``
and its ``input_items``.

OpenAI keeps a response made with ``store`` (the default) and lets a later
request continue from it by id: the new ``input`` follows the earlier
response's input and output (API reference, "Create a model response",
``previous_response_id``; "Conversation state" guide); ``instructions`` are
not carried over. A response made with ``store: false`` is not kept, and an
id that is not kept (unknown, another key's, dropped) is answered as OpenAI
answers an unknown one.

As Missive's message threads (:mod:`missive.threads.store`), what is kept
is per API key (the key's name, :attr:`missive.api.Gateway.key_name`; another
key's id is as absent), in memory, per process, and bounded: beyond
:data:`MAX_COUNT` responses or :data:`MAX_BYTES` of kept conversation (its
JSON size) the least recently used go first. Unlike a thread, a response
may be continued many times (a conversation may branch), so each entry
holds only what its request added (its new input and its output, as
Messages API turns) and the id of the response it continued: a
conversation is the chain of its entries, each turn held once, and a chain
with a link dropped is not found.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from missive.api import json_dumps

from .errors import OpenAIRequestError

__all__ = ["Stored", "ResponseStore", "MAX_COUNT", "MAX_BYTES", "continued"]

#: The statuses of a response a conversation may continue from (a background
#: response still running, failed or cancelled has no answer to continue).
FINISHED = ("completed", "incomplete")
#: Responses kept at most, per process.
MAX_COUNT = 10_000
#: Bytes of kept conversations and response objects (their JSON) at most.
MAX_BYTES = 256 * 1024 * 1024


@dataclass
class Stored:
    """One kept response.

    Attributes:
        owner: the API key's name that made it.
        previous: the id of the response it continued, or None.
        system: the ``system`` blocks its input's leading system/developer
            messages gave (``instructions`` excluded: not carried over).
        messages: the Messages API turns its input added, then its output
            as an assistant turn.
        response: the ``response`` object as it was answered.
        input_items: its input as ``ResponseItem`` objects
            (:func:`.responses_listing.listed_items`), for
            ``GET /v1/responses/{id}/input_items``.
    """

    owner: str
    previous: str | None
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    response: dict[str, Any]
    input_items: list[dict[str, Any]] = field(default_factory=list)
    size: int = field(default=0, repr=False)


class ResponseStore:
    """The kept responses of one process (see the module doc)."""

    def __init__(self, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Stored] = OrderedDict()
        self._bytes = 0
        #: the ids deleted (``DELETE``), by their owner, the last ``max_count``
        self._deleted: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, owner: str, response_id: str) -> Stored | None:
        """The entry of ``response_id`` if ``owner`` made it; None otherwise."""
        entry = self._entries.get(response_id)
        if entry is None or entry.owner != owner:
            return None
        self._entries.move_to_end(response_id)
        return entry

    def conversation(self, owner: str, response_id: str) -> tuple[list[Any], list[Any]] | None:
        """``(system, messages)`` of the conversation up to and including
        ``response_id`` (its chain, oldest first); None when it or a link
        of its chain is not kept for ``owner``."""
        chain = self._chain(owner, response_id)
        if chain is None:
            return None
        system: list[Any] = []
        messages: list[Any] = []
        for entry in chain:
            system += entry.system
            messages += entry.messages
        return system, messages

    def input_items(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The items ``response_id`` was made from, oldest first: the input
        and output items of the responses it continued, then its own input;
        None as for :meth:`conversation`."""
        chain, _ = self._links(owner, response_id)
        if not chain:
            return None
        # a link dropped (deleted): the items of the responses still kept,
        # its own input always among them
        found: list[dict[str, Any]] = []
        for entry in chain[:-1]:
            found += [*entry.input_items, *entry.response["output"]]
        return found + chain[-1].input_items

    def _chain(self, owner: str, response_id: str) -> list[Stored] | None:
        """The entries of ``response_id``'s conversation, oldest first; None
        when a link is not kept or one has no answer to continue from."""
        chain, missing = self._links(owner, response_id)
        if missing is not None or not chain or any(e.response["status"] not in FINISHED for e in chain):
            return None
        return chain

    def _links(self, owner: str, response_id: str) -> tuple[list[Stored], str | None]:
        """The kept entries of ``response_id``'s chain back to the first link
        not kept for ``owner`` (oldest first), and that link's id (None: the
        chain is whole)."""
        chain: list[Stored] = []
        seen: set[str] = set()
        current: str | None = response_id
        while current is not None:
            entry = self.get(owner, current)
            if entry is None or current in seen:
                return chain[::-1], current
            seen.add(current)
            chain.append(entry)
            current = entry.previous
        return chain[::-1], None

    def broken_link(self, owner: str, response_id: str) -> tuple[str, bool] | None:
        """The link of kept ``response_id``'s chain that is not kept, and
        whether ``owner`` deleted it (``DELETE /v1/responses/{id}``); None
        when ``response_id`` is not kept or its chain is whole."""
        chain, missing = self._links(owner, response_id)
        if not chain or missing is None or missing == response_id:
            return None
        return missing, self._deleted.get(missing) == owner

    def put(self, response_id: str, entry: Stored) -> None:
        """Keep ``entry`` under ``response_id`` (ids are random: no other
        key's entry shares one) and bring the store within its bounds; an
        entry alone over ``max_bytes`` is not kept."""
        if self.delete(entry.owner, response_id):  # replaced, not deleted
            self._deleted.pop(response_id, None)
        entry.size = len(json_dumps([entry.system, entry.messages, entry.response, entry.input_items]))
        if entry.size > self.max_bytes:
            return
        self._entries[response_id] = entry
        self._bytes += entry.size
        while self._entries and (len(self._entries) > self.max_count or self._bytes > self.max_bytes):
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.size

    def delete(self, owner: str, response_id: str) -> bool:
        """Drop ``response_id`` if ``owner`` made it; whether it was kept."""
        entry = self._entries.get(response_id)
        if entry is None or entry.owner != owner:
            return False
        del self._entries[response_id]
        self._bytes -= entry.size
        self._deleted[response_id] = owner
        while len(self._deleted) > self.max_count:
            self._deleted.popitem(last=False)
        return True


#: What a request that continues a kept response with no answer to continue
#: from is told, by that response's ``status``.
_RUNNING = "is still in progress; poll GET /v1/responses/{id} until it has finished, then continue from it"
_ENDED = "cannot be continued; continue from an earlier response or send the conversation whole"
_UNFINISHED = {
    "queued": _RUNNING,
    "in_progress": _RUNNING,
    "cancelled": "was cancelled before it finished and " + _ENDED,
    "failed": "failed and " + _ENDED,
}


def continued(store: ResponseStore, owner: str, response_id: str) -> tuple[list[Any], list[Any]] | None:
    """The conversation a ``previous_response_id`` continues (:meth:`ResponseStore.conversation`),
    or None when it is not kept (the request's ``previous_response_not_found``).

    The Background mode guide (OpenAI, "Background mode": poll while the
    status is ``queued`` or ``in_progress``; a response leaves those states
    for a final one) makes a background response still running a response
    with nothing to continue from yet, and a cancelled (or failed) one a
    response whose answer never finished: each is a 400 of its own, naming
    ``previous_response_id``, rather than "not found" for an id that is kept.
    So is a kept response whose chain lost a link (a response it continued
    was deleted, or dropped from the store): the 400 names that link. Each
    entry holds only what its request added, so the conversation cannot be
    rebuilt without it. (OpenAI's reference documents no answer for this
    case; "Delete a model response" only says the response is deleted.)

    Raises:
        OpenAIRequestError: ``response_id`` is kept but has no finished answer.
    """
    found = store.conversation(owner, response_id)
    broken = store.broken_link(owner, response_id) if found is None else None
    if broken is not None:
        link, deleted = broken
        why = "was deleted" if deleted else "is no longer stored"
        raise OpenAIRequestError(
            f"Previous response with id '{response_id}' continues response '{link}', which {why}; "
            "its conversation cannot be continued: send the conversation whole.",
            param="previous_response_id",
        )
    entry = store.get(owner, response_id) if found is None else None
    if entry is not None and entry.response["status"] in _UNFINISHED:
        why = _UNFINISHED[entry.response["status"]].replace("{id}", response_id)
        raise OpenAIRequestError(
            f"Previous response with id '{response_id}' {why}.", param="previous_response_id"
        )
    return found
