"""The host-memory prompt cache: KV states that left the context, kept in RAM.

An in-process model holds one prompt in its KV cache. When another
conversation takes the context (Claude Code's title and topic requests, a
subagent, a second user), the first one's prompt would be decoded again from
scratch on its next turn: 25 to 29 s for a 2,500-token prompt of SmolLM2 on
2 cores, minutes for a 4B model and Claude Code's 20,000-token prompts.

So before a sequence begins in a slot, the engine (:func:`swap_in`, in the
model's thread) does what llama-server does with ``--cache-ram``
(``tools/server``: ``server_prompt_cache``, its ``load``/``save`` around a
slot's new task):

* if the slot would lose at least :data:`MIN_SAVED_TOKENS` tokens to
  the new prompt, its state is saved here (the runner's
  :meth:`~missive.engine.runner.ContextStates.save_context`: llama.cpp's
  per-sequence state, the KV cache of those tokens);
* the entry sharing the longest token prefix with the new prompt is restored
  into the slot when it gives more than the slot's own tokens would, and the
  runner then decodes only the rest.

Entries are evicted least recently used first, to stay within ``max_bytes``;
an entry whose tokens are a prefix of a newer one's is dropped (the newer one
serves everything it would). Restored tokens are cache reads:
``cache_read_input_tokens`` counts them, as it counts tokens the live context
kept. The runner's own rules still apply to a restored state (its last token
is decoded again for fresh logits; an image is reused whole or not at all).

With a disk tier (:attr:`HostPromptCache.disk`, :mod:`missive.engine.disk_cache`)
every state put here is also written to a file, and a lookup considers the
files too (RAM wins a tie); a file chosen is read, checked and put here
before it is restored. A file refused then (corrupt) leaves the prompt to be
read: the sequence's ``reused`` says so, and the engine reports the exact
split at the end (as when another request changed the slots meanwhile).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..protocol.errors import ApiError
from .runner import ContextStates, Prompt, Runner, SavedContext, SharedPool, common_prefix

if TYPE_CHECKING:
    from .disk_cache import DiskPromptCache

__all__ = [
    "HostPromptCache",
    "MAX_ENTRIES",
    "MIN_SAVED_TOKENS",
    "batcher_hooks",
    "common_prefix",
    "default_cache_bytes",
    "park",
    "restorable",
    "reusable",
    "swap_in",
]

log = logging.getLogger("missive.engine")

#: A live context is saved only if the new prompt would discard at least this
#: many of its tokens (a few differing tokens cost less to decode again than
#: to copy the state).
MIN_SAVED_TOKENS = 64
#: Most states kept, whatever their size: finding the best one compares the
#: prompt with each (in Python), so thousands of small ones would cost more
#: than they save.
MAX_ENTRIES = 32
#: The default size when the machine's memory cannot be read (bytes).
FALLBACK_BYTES = 2 * 1024**3


def default_cache_bytes() -> int:
    """A quarter of the machine's physical memory, at most 8 GiB (llama-server's
    ``--cache-ram`` default is 8192 MiB): enough for a few long conversations
    of a small model, never a threat to the machine."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return FALLBACK_BYTES
    return int(min(8 * 1024**3, total // 4))


class HostPromptCache:
    """Saved context states, least recently used first out, within
    ``max_bytes`` and ``max_entries``.

    Thread-safe: :meth:`best` is called from tokenizing threads (to report
    the reuse before queueing) and from the model's thread.
    """

    def __init__(self, max_bytes: int, max_entries: int = MAX_ENTRIES) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[int, SavedContext] = OrderedDict()
        self._sessions: dict[int, str | None] = {}  # the session each entry's tokens came from
        self._next = 0
        self._bytes = 0
        self._lock = threading.Lock()
        #: The disk tier, when the model has one (set once, before the first request).
        self.disk: DiskPromptCache | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def best(
        self,
        tokens: list[int],
        session: str | None = None,
        variant: Hashable | None = None,
        cache_scope: Hashable | None = None,
    ) -> tuple[SavedContext | None, int]:
        """The entry of ``variant`` (``Prompt.variant``) and ``cache_scope``
        (``Prompt.cache_scope``: another key's state is never offered)
        sharing the longest prefix with ``tokens``, and that prefix's length
        (``(None, 0)`` when none shares a token); of equal ones, the one
        saved from ``session`` (:mod:`missive.messages.session`)."""
        with self._lock:
            found: SavedContext | None = None
            longest = 0
            own = False
            for key, entry in self._entries.items():
                common = common_prefix(entry.tokens, tokens) if entry.serves(variant, cache_scope) else 0
                mine = session is not None and self._sessions.get(key) == session
                if common > longest or (common == longest > 0 and mine and not own):
                    found, longest, own = entry, common, mine
        if self.disk is not None:
            on_disk, common = self.disk.best(tokens, longest, variant, cache_scope)
            if on_disk is not None:
                return on_disk, common
        return found, longest

    def from_disk(self, entry: SavedContext) -> SavedContext | None:
        """``entry`` ready to restore: itself when in RAM; read back from
        the disk tier (then kept in RAM too) when it is a file there; None
        when that file was refused (model thread)."""
        from .disk_cache import OnDisk

        if not isinstance(entry, OnDisk) or self.disk is None:
            return entry
        loaded = self.disk.load(entry)
        if loaded is not None:
            self.put(loaded)
        return loaded

    def touch(self, entry: SavedContext) -> None:
        """Mark ``entry`` as just used (last to be evicted)."""
        with self._lock:
            for key, value in self._entries.items():
                if value is entry:
                    self._entries.move_to_end(key)
                    return

    def put(self, saved: SavedContext, session: str | None = None) -> bool:
        """Keep ``saved`` (from ``session``'s prompt); drop the entries it
        makes useless (a prefix of its tokens) and the least recently used
        ones beyond ``max_bytes``. Returns False when it alone is larger
        than ``max_bytes``. With a disk tier, it is also queued to be
        written there (whatever its size in RAM)."""
        if self.disk is not None:
            self.disk.put(saved)
        if saved.nbytes > self.max_bytes or not saved.tokens:
            return False
        with self._lock:
            for key, entry in list(self._entries.items()):
                if (
                    len(entry.tokens) <= len(saved.tokens)
                    and saved.tokens[: len(entry.tokens)] == entry.tokens
                    and entry.serves(saved.variant, saved.cache_scope)
                ):
                    self._drop(key)
            while self._entries and (
                self._bytes + saved.nbytes > self.max_bytes or len(self._entries) >= self.max_entries
            ):
                self._drop(next(iter(self._entries)))
            self._entries[self._next] = saved
            self._sessions[self._next] = session
            self._next += 1
            self._bytes += saved.nbytes
        return True

    def _drop(self, key: int) -> None:
        self._sessions.pop(key, None)
        entry = self._entries.pop(key)
        self._bytes -= entry.nbytes


def swap_in(
    runner: ContextStates,
    cache: HostPromptCache,
    prompt: Prompt,
    slot: int = 0,
    session: str | None = None,
    previous: str | None = None,
) -> int:
    """Before a sequence of ``prompt`` begins in slot ``slot`` (model thread):
    save the slot's state if the prompt would discard enough of it, and
    restore the cached state that serves the prompt best when it beats what
    the slot holds. Returns the prompt tokens the slot can now reuse (what
    ``begin`` will take from it). ``session``: the request's session (its
    own saved states win ties); ``previous``: the session whose tokens the
    slot holds (recorded with them when saved)."""
    live_tokens = runner.context_tokens(slot)
    live = runner.reusable_in(prompt, slot)
    entry, _ = cache.best(prompt.tokens, session, prompt.variant, prompt.cache_scope)
    restored = runner.reusable_from(prompt, entry) if entry is not None else 0
    if cache.disk is not None:
        cache.disk.count_lookup(entry)
    # What the slot would lose: for a model whose state cannot be cut at any
    # position (recurrent, sliding-window), more than the tokens that differ.
    # The entry holding the same tokens is a copy only if it serves no more
    # than the slot: else the slot's are another scope's or variant's.
    copy = entry is not None and entry.tokens == live_tokens and restored <= live
    if len(live_tokens) - live >= MIN_SAVED_TOKENS and not copy:
        saved = runner.save_context(slot)
        if saved is not None and cache.put(saved, previous):
            log.debug(
                "saved slot %d's %d tokens (%d bytes; cache: %d entries, %d bytes)",
                slot,
                len(saved.tokens),
                saved.nbytes,
                len(cache),
                cache.nbytes,
            )
    if entry is not None and restored > live and _room(runner, entry, slot):
        chosen = cache.from_disk(entry)
        if chosen is None:
            return live  # a file refused: the prompt is read
        if chosen is not entry:
            return _restore_read(runner, cache, chosen, entry, prompt, slot)
        runner.restore_context(entry, slot)
        cache.touch(entry)
        log.debug(
            "restored %d tokens into slot %d: %d of %d prompt tokens reused (the slot had %d)",
            len(entry.tokens),
            slot,
            restored,
            len(prompt.tokens),
            live,
        )
        return restored
    return live


def _restore_read(
    runner: ContextStates,
    cache: HostPromptCache,
    state: SavedContext,
    entry: SavedContext,
    prompt: Prompt,
    slot: int,
) -> int:
    """Restore a state read back from the disk tier; one the backend refuses
    has its file deleted and the prompt is read (the slot is then empty)."""
    from .disk_cache import OnDisk

    try:
        runner.restore_context(state, slot)
    except ApiError as exc:
        if cache.disk is not None and isinstance(entry, OnDisk):
            cache.disk.drop(entry, f"refused by the backend ({exc})")
        return 0
    restored = runner.reusable_from(prompt, state)
    log.debug(
        "restored %d tokens from disk into slot %d: %d of %d prompt tokens reused",
        len(state.tokens),
        slot,
        restored,
        len(prompt.tokens),
    )
    return restored


def _room(runner: ContextStates, entry: SavedContext, slot: int) -> bool:
    """Whether a shared KV pool has the cells to restore ``entry`` into
    ``slot`` (the batcher empties idle slots before a prompt joins; a state
    longer than the prompt may still not fit: the prompt is then read)."""
    if not isinstance(runner, SharedPool):
        return True
    return runner.pool_free() + runner.held(slot) >= len(entry.tokens)


def park(runner: ContextStates, cache: HostPromptCache, slot: int, session: str | None = None) -> None:
    """Save slot ``slot``'s state into ``cache`` before its cells are taken
    from it (an idle slot emptied for room in a shared KV pool), when it
    holds at least :data:`MIN_SAVED_TOKENS` tokens (model thread).
    ``session``: the session whose tokens the slot holds."""
    if len(runner.context_tokens(slot)) < MIN_SAVED_TOKENS:
        return
    saved = runner.save_context(slot)
    if saved is not None and cache.put(saved, session):
        log.debug("parked slot %d's %d tokens (%d bytes)", slot, len(saved.tokens), saved.nbytes)


def restorable(
    runner: ContextStates, cache: HostPromptCache, prompt: Prompt, session: str | None = None
) -> int:
    """The prompt tokens the best saved state would serve if restored (0
    when none shares a token); the slots are not looked at."""
    entry, _ = cache.best(prompt.tokens, session, prompt.variant, prompt.cache_scope)
    return runner.reusable_from(prompt, entry) if entry is not None else 0


def reusable(runner: Runner, cache: HostPromptCache | None, prompt: Prompt) -> int:
    """The prompt tokens :func:`swap_in` would reuse now, without changing
    anything (tokenizing thread): ``cache_read_input_tokens``."""
    live = runner.reusable(prompt)
    if cache is None or not isinstance(runner, ContextStates):
        return live
    return max(live, restorable(runner, cache, prompt))


def batcher_hooks(runner: Runner, cache: HostPromptCache | None, shared_pool: bool) -> dict[str, Any]:
    """The :class:`~missive.engine.batcher.Batcher` arguments that tie it to
    the runner's slots and ``cache``: ``reuse`` (what a slot serves),
    ``elsewhere`` (what ``cache`` would restore), ``pool`` (the runner, when
    its slots share one KV pool: ``shared_pool``) and ``evict`` (an idle
    slot emptied for room in the pool is parked in ``cache`` first)."""
    hooks: dict[str, Any] = {}
    if shared_pool and isinstance(runner, SharedPool):
        hooks["pool"] = runner
    if isinstance(runner, ContextStates):
        hooks["reuse"] = runner.reusable_in
        if cache is not None:
            hooks["elsewhere"] = partial(restorable, runner, cache)
            if "pool" in hooks:
                hooks["evict"] = partial(park, runner, cache)  # (slot, session), in the model's thread
    return hooks
