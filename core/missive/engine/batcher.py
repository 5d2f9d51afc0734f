"""Continuous batching: every running sequence of a model, stepped together in its thread.

One loop per model runs in the model's thread (its one-thread executor)
while the model has work, and exits when it has none. Each turn of the loop:

1. sequences submitted since the last turn join (a request joins between
   steps): each takes a free slot (:meth:`Batcher.choose_slot`: the one whose
   cached tokens serve its prompt best, else the least recently used one) and
   begins there (:meth:`~missive.engine.producer.Producer.start`);
2. sequences whose consumer has gone are ended (so a cancelled request stops
   within one step and its slot is free for the next);
3. one step for all the others: a :class:`~missive.engine.runner.Batched`
   runner decodes them in one call (``step_many``: prompt chunks and one token
   per generating sequence in one ``llama_decode``, as llama-server's
   ``update_slots`` does), another runner steps its single sequence;
4. each sequence takes its result; those that ended leave (their slot is free).

The core's admission and the engine's :class:`~missive.engine.scheduler.Scheduler`
admit at most ``slots`` sequences, so a submitted sequence always finds a free
slot.

With a runner whose slots share one KV pool (:class:`~missive.engine.runner.SharedPool`,
llama.cpp's unified KV cache), the loop also keeps every step within the
pool, so a decode never fails for lack of cells:

* a sequence joins only when the free cells (with those its slot holds)
  can take its whole prompt; idle slots are emptied for it first, least
  recently used first, their state saved to the host-memory cache
  (``evict``); otherwise it waits, in arrival order, until running
  sequences end;
* before each step, if the step may need more cells than are free, idle
  slots are emptied the same way, then the newest running sequences are
  paused: their state is saved (``save_context``) and their cells freed; a
  paused sequence resumes (``restore_context`` into its slot, which it
  keeps) before any new one joins, as soon as its cells are free again.
  One sequence alone always fits (``context_window`` is at most the pool),
  so the oldest always makes progress (vLLM preempts the newest requests
  the same way when its KV blocks run out). A failed step fails every
  sequence in it (each gets the error as an SSE ``error`` event); a bug in
  the loop itself fails every sequence it holds, so no request is ever left
  waiting for a loop that died.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from .producer import Producer
from .runner import Batched, ContextStates, Prompt, Runner, SavedContext, SharedPool

__all__ = ["Batcher"]

log = logging.getLogger("missive.engine")


class Batcher:
    """The decode loop of one model.

    Args:
        runner: the loaded model's runner.
        executor: the model's one-thread executor (the loop runs there).
        slots: ``ModelInfo.slots`` (> 1 only for a :class:`~missive.engine.runner.Batched` runner).
        reuse: ``reuse(prompt, slot)``, the prompt tokens a slot's cached
            tokens would serve (None: every slot serves nothing).
        elsewhere: ``elsewhere(prompt)``, the prompt tokens another store
            (the host-memory prompt cache) would serve, whatever the slot.
        pool: the runner, when its slots share one KV pool (module documentation).
        evict: ``evict(slot, session)`` saves an idle slot's state (of
            ``session``, the one whose tokens it holds) before the pool
            empties it (the host-memory prompt cache), or None.
    """

    def __init__(
        self,
        runner: Runner,
        executor: Executor,
        slots: int,
        reuse: Callable[[Prompt, int], int] | None = None,
        elsewhere: Callable[[Prompt], int] | None = None,
        pool: SharedPool | None = None,
        evict: Callable[[int, str | None], object] | None = None,
    ) -> None:
        self.runner = runner
        self.executor = executor
        self.slots = slots
        self.batched = isinstance(runner, Batched)
        if slots > 1 and not self.batched:
            raise ValueError(f"a runner with {slots} slots must implement Batched")
        self._reuse = reuse
        self._elsewhere = elsewhere
        self._lock = threading.Lock()
        self._incoming: list[Producer] = []
        self._active: list[Producer] = []
        self._running = False
        self._free = set(range(slots))
        self._owner: dict[int, Producer] = {}
        self._last_used = [0.0] * slots
        self._pool = pool
        self._evict = evict
        self._paused: list[tuple[Producer, SavedContext | None]] = []
        #: Times the shared pool made a sequence wait to join, emptied an
        #: idle slot, paused a running sequence (``status()``).
        self.pool_events = {"waits": 0, "evictions": 0, "pauses": 0}
        self._session: list[str | None] = [None] * slots  # the session whose tokens each slot holds

    @property
    def active(self) -> int:
        """Sequences running now (including those just submitted)."""
        with self._lock:
            return len(self._active) + len(self._incoming) + len(self._paused)

    def submit(self, producer: Producer) -> None:
        """Queue ``producer`` to join at the next step (any thread; never blocks)."""
        with self._lock:
            self._incoming.append(producer)
            if self._running:
                return
            self._running = True
        try:
            self.executor.submit(self._run)
        except RuntimeError as exc:  # the executor is shut down (the model is closing)
            with self._lock:
                self._running = False
                self._incoming.remove(producer)
            producer.fail(exc)

    def slot_states(self, held: Callable[[int], int] | None = None) -> list[dict[str, Any]]:
        """What each slot holds, for status: ``slot`` (its index), ``state``
        (``generating`` or ``idle``), ``session`` (the first 8 characters of
        the session whose tokens it holds, :mod:`missive.messages.session`; None: none
        known) and, with ``held`` (the tokens a slot's context holds),
        ``tokens_cached``. Any thread: a snapshot."""
        owners = dict(self._owner)
        out = []
        for slot in range(self.slots):
            session = self._session[slot]
            entry: dict[str, Any] = {
                "slot": slot,
                "state": "generating" if slot in owners else "idle",
                "session": session[:8] if session else None,
            }
            if held is not None:
                entry["tokens_cached"] = held(slot)
            out.append(entry)
        return out

    def slot_session(self, slot: int) -> str | None:
        """The session whose tokens ``slot`` holds (None: unknown)."""
        return self._session[slot]

    def choose_slot(self, prompt: Prompt, session: str | None = None) -> int:
        """A free slot for ``prompt``: the one whose cached tokens serve it
        best when that beats what the host-memory cache would restore,
        else the least recently used one (its tokens are worth least).

        Session affinity (``session``, :mod:`missive.messages.session`) decides ties:
        among slots that serve the prompt equally, one of the request's own
        session comes first, then one of no other session, then the least
        recently used; and a slot of another session that serves no more
        than the host-memory cache would restore is left to its session
        (the cache restores into the least recently used slot instead), so a
        subagent sharing the main conversation's system prompt does not take
        its slot. Model thread."""
        free = sorted(self._free, key=lambda s: self._last_used[s])
        if len(free) == 1 or self._reuse is None:
            return free[0]
        owners = self._session

        def rank(s: int) -> tuple[int, int]:
            return (
                1 if session is not None and owners[s] == session else 0,
                1 if owners[s] is None or owners[s] == session else 0,
            )

        scored = [(self._reuse(prompt, s), s) for s in free]
        best = max(score for score, _ in scored)
        tied = [s for score, s in scored if score == best]
        slot = max(tied, key=rank)  # max keeps the first (least recently used) of equals
        if best > 0:
            elsewhere = self._elsewhere(prompt) if self._elsewhere is not None else 0
            others = session is not None and owners[slot] not in (None, session)
            if best > elsewhere or (best == elsewhere and not others):
                return slot
        return max(free, key=rank) if session is not None else free[0]

    # -- the model's thread ------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    joining, self._incoming = self._incoming, []
                    if not joining and not self._active and not self._paused:
                        self._running = False
                        return
                waiting = self._admit(joining)
                if waiting:
                    with self._lock:
                        self._incoming[:0] = waiting  # they keep their place, ahead of later arrivals
                self._drop_cancelled()
                if self._active:
                    if self._pool is not None:
                        self._make_room()
                    self._step()
        except BaseException as exc:  # a bug in the loop: fail everyone rather than leave them waiting
            log.exception("the decode loop failed")
            with self._lock:
                paused = [p for p, _ in self._paused]
                everyone, self._active, self._incoming = self._active + paused + self._incoming, [], []
                self._paused = []
                self._running = False
            for producer in everyone:
                producer.fail(exc)
                self._release(producer)

    def _admit(self, joining: list[Producer]) -> list[Producer]:
        """Join what fits (paused sequences first, then arrivals in order);
        the arrivals that must wait, in order."""
        if self._pool is None:
            for producer in joining:
                self._join(producer)
            return []
        waiting: list[Producer] = []
        blocked = not self._resume()
        for producer in joining:
            if producer.cancelled():
                producer.stop()
            elif blocked or waiting or not self._room_for(producer.seq.prompt, producer.seq.session):
                if not producer.waited:
                    producer.waited = True
                    self.pool_events["waits"] += 1
                waiting.append(producer)
            else:
                self._join(producer)
        return waiting

    # -- the shared KV pool (model thread) ---------------------------------

    def _room_for(self, prompt: Prompt, session: str | None) -> bool:
        """Whether the pool can take ``prompt`` (of ``session``) whole in the
        slot it would get, after emptying idle slots; always True when
        nothing runs."""
        pool = self._pool
        assert pool is not None
        slot = self.choose_slot(prompt, session)
        need = len(prompt.tokens) + 1
        while pool.pool_free() + pool.held(slot) < need:
            if not self._evict_idle(keep=slot):
                return not self._active and not self._paused
        return True

    def _evict_idle(self, keep: int = -1) -> bool:
        """Empty the least recently used idle slot holding cells (its state
        saved by ``evict``), other than ``keep``; False when none is left."""
        pool = self._pool
        assert pool is not None
        idle = [s for s in self._free if s != keep and pool.held(s) > 0]
        if not idle:
            return False
        slot = min(idle, key=lambda s: self._last_used[s])
        if self._evict is not None:
            self._evict(slot, self._session[slot])
        pool.clear_slot(slot)
        self._session[slot] = None  # it holds nobody's tokens now
        self.pool_events["evictions"] += 1
        log.debug("emptied idle slot %d for room in the KV pool", slot)
        return True

    def _make_room(self) -> None:
        """Before a step: free the cells it may need (idle slots first, then
        the newest running sequences are paused)."""
        pool = self._pool
        assert pool is not None
        while pool.pool_free() < pool.pool_need([p.seq for p in self._active]):
            if self._evict_idle():
                continue
            if len(self._active) < 2:
                return  # one sequence fits its window: the pool holds at least one
            self._pause(self._active.pop())

    def _pause(self, producer: Producer) -> None:
        runner, slot = self.runner, producer.seq.slot
        saved = runner.save_context(slot) if isinstance(runner, ContextStates) else None
        assert self._pool is not None
        self._pool.clear_slot(slot)
        self._paused.append((producer, saved))
        self.pool_events["pauses"] += 1
        log.debug(
            "paused the sequence in slot %d (%d tokens saved) for room in the KV pool",
            slot,
            len(saved.tokens) if saved is not None else 0,
        )

    def _resume(self) -> bool:
        """Resume paused sequences in order while their cells fit; True when
        none is left paused."""
        pool, runner = self._pool, self.runner
        assert pool is not None
        while self._paused:
            producer, saved = self._paused[0]
            if producer.cancelled():
                self._paused.pop(0)
                producer.stop()
                self._release(producer)
                continue
            need = (len(saved.tokens) if saved is not None else 0) + pool.pool_need([producer.seq])
            while pool.pool_free() < need and self._evict_idle(keep=producer.seq.slot):
                pass
            if pool.pool_free() < need and self._active:
                return False  # with nothing running it must fit: its window is at most the pool
            self._paused.pop(0)
            try:
                if saved is not None and isinstance(runner, ContextStates):
                    runner.restore_context(saved, producer.seq.slot)
            except Exception as exc:  # noqa: BLE001 - this sequence fails, the others go on
                producer.fail(exc)
                self._release(producer)
                continue
            self._active.append(producer)
        return True

    def _join(self, producer: Producer) -> None:
        if producer.cancelled():
            producer.stop()  # gone while queued: it never takes a slot
            return
        slot = self.choose_slot(producer.seq.prompt, producer.seq.session)
        self._free.discard(slot)
        self._owner[slot] = producer
        started = producer.start(slot)  # its setup reads the slot's previous session
        self._session[slot] = producer.seq.session
        if started:
            self._active.append(producer)
        else:
            self._release(producer)

    def _drop_cancelled(self) -> None:
        keep = []
        for producer in self._active:
            if producer.cancelled():
                producer.stop()
                self._release(producer)
            else:
                keep.append(producer)
        self._active = keep

    def _step(self) -> None:
        active = self._active
        if not self.batched:
            self._active = [p for p in active if p.step() or self._release(p)]
            return
        try:
            results = self.runner.step_many([p.seq for p in active])  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - every sequence in the step fails
            for producer in active:
                producer.fail(exc)
                self._release(producer)
            self._active = []
            return
        self._active = [
            p for p, result in zip(active, results, strict=True) if p.accept(result) or self._release(p)
        ]

    def _release(self, producer: Producer) -> bool:
        """Free the slot the (ended) producer holds, if any; always False."""
        slot = producer.seq.slot
        if self._owner.get(slot) is producer:
            del self._owner[slot]
            self._free.add(slot)
            self._last_used[slot] = time.monotonic()
        return False
