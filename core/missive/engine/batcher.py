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
slot. A failed step fails every sequence in it (each gets the error as an SSE
``error`` event); a bug in the loop itself fails every sequence it holds, so
no request is ever left waiting for a loop that died.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from .producer import Producer
from .runner import Batched, Prompt, Runner

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
    """

    def __init__(
        self,
        runner: Runner,
        executor: Executor,
        slots: int,
        reuse: Callable[[Prompt, int], int] | None = None,
        elsewhere: Callable[[Prompt], int] | None = None,
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
        self._session: list[str | None] = [None] * slots  # the session whose tokens each slot holds

    @property
    def active(self) -> int:
        """Sequences running now (including those just submitted)."""
        with self._lock:
            return len(self._active) + len(self._incoming)

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
            entry: dict[str, Any] = {"slot": slot, "state": "generating" if slot in owners else "idle",
                                     "session": session[:8] if session else None}
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
            return (1 if session is not None and owners[s] == session else 0,
                    1 if owners[s] is None or owners[s] == session else 0)

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
                    if not joining and not self._active:
                        self._running = False
                        return
                for producer in joining:
                    self._join(producer)
                self._drop_cancelled()
                if self._active:
                    self._step()
        except BaseException as exc:  # a bug in the loop: fail everyone rather than leave them waiting
            log.exception("the decode loop failed")
            with self._lock:
                everyone, self._active, self._incoming = self._active + self._incoming, [], []
                self._running = False
            for producer in everyone:
                producer.fail(exc)
                self._release(producer)

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
        self._active = [p for p, result in zip(active, results) if p.accept(result) or self._release(p)]

    def _release(self, producer: Producer) -> bool:
        """Free the slot the (ended) producer holds, if any; always False."""
        slot = producer.seq.slot
        if self._owner.get(slot) is producer:
            del self._owner[slot]
            self._free.add(slot)
            self._last_used[slot] = time.monotonic()
        return False
