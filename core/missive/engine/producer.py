"""One sequence's decoding, in the model's thread, ahead of the event loop.

A :class:`Producer` is driven by the model's :class:`~missive.engine.batcher.Batcher`
(in the model's thread): :meth:`Producer.start` places the sequence in its
slot (the host-memory prompt cache's swap, then
:meth:`~missive.engine.runner.Runner.begin`), then :meth:`Producer.accept`
takes what each decode step gave it, never waiting for the event loop, and
hands each token's text (possibly "") over through a
:class:`~missive.engine.channel.ThreadChannel`. The loop side
(:mod:`missive.engine.local`) takes the pieces that arrived while it was busy
together, as one text delta carrying their token count, so a busy loop never
slows decoding and usage stays exact. The batcher checks the channel's cancel
flag before every step, so a consumer that goes away stops its sequence
within one step (and within one prompt batch, through ``Sequence.cancelled``,
in runners that read the prompt in :meth:`~missive.engine.runner.Runner.begin`).

With a :class:`~missive.engine.budget.ThinkingBudget`, the reasoning is closed
when its budget is spent: the closing tokens are handed over like generated
ones (first piece their text, then empty pieces, so token counts stay exact)
and written into the context with :meth:`~missive.engine.runner.Runner.append`.
"""

from __future__ import annotations

from collections.abc import Callable

from .budget import ThinkingBudget
from .channel import ThreadChannel
from .runner import PENDING, Batched, Cancelled, Detokenizer, Runner, Sequence, StepResult

__all__ = ["Producer"]


class Producer:
    """One :class:`~missive.engine.runner.Sequence`: the model's thread side
    and the event loop's side.

    Thread side (the batcher): :meth:`start`, then :meth:`accept` once per
    step until it returns False, or :meth:`stop`/:meth:`fail`; every path
    ends the sequence (:meth:`~missive.engine.runner.Runner.end`, once, if it
    began) and closes the channel. Loop side: :meth:`next_batch`
    (``(pieces, ended)``, one str piece per output token; raises
    :class:`~missive.protocol.errors.ApiError` ``<backend> failed while generating:
    ...`` if the thread failed), :meth:`cancel` and :meth:`wait_closed`.
    After the end: :attr:`reached_eog` (an end-of-generation token ended it)
    and :attr:`tail` (text the detokenizer held back, not yet counted).

    Args:
        runner: the model's runner.
        seq: the sequence (its ``cancelled`` is bound to the channel).
        budget: the thinking budget, or None.
        setup: ``setup(slot)`` runs in the model's thread before the sequence
            begins in ``slot`` (the host-memory prompt cache's swap,
            :func:`missive.engine.host_cache.swap_in`).
    """

    def __init__(
        self,
        runner: Runner,
        seq: Sequence,
        budget: ThinkingBudget | None = None,
        setup: Callable[[int], object] | None = None,
    ) -> None:
        self.runner = runner
        self.seq = seq
        self.budget = budget
        self.setup = setup
        self.reached_eog = False
        self.tail = ""
        self.channel: ThreadChannel[str] = ThreadChannel(f"{runner.backend} failed while generating")
        self.cancel = self.channel.cancel
        self.cancelled = self.channel.cancelled
        self.next_batch = self.channel.next_batch
        self.wait_closed = self.channel.wait_closed
        seq.cancelled = self.channel.cancelled
        if budget is not None:
            seq.draft = False  # the budget's close is appended between steps
        self._begun = False
        self._done = False
        self.waited = False  # waited for cells of a shared KV pool (counted once)
        self._detok: Detokenizer | None = None

    @property
    def done(self) -> bool:
        """Whether the sequence has ended (its channel is closed)."""
        return self._done

    # -- thread side -------------------------------------------------------

    def start(self, slot: int) -> bool:
        """Place the sequence in ``slot`` and begin it; False when it already
        ended (a failure, a cancel inside the prompt, or a runner that read
        the whole prompt for ``max_new == 0``)."""
        seq = self.seq
        seq.slot = slot
        try:
            if self.setup is not None:
                self.setup(slot)
            self._begun = True
            self.runner.begin(seq)
            if seq.max_new > 0:
                self._detok = self.runner.detokenizer(seq)
            elif not isinstance(self.runner, Batched):
                self._end(True)  # the prompt is decoded (cache warm-up)
                return False
        except Cancelled:
            self._end(False)  # stopped inside a prompt decode: the state is incomplete
            return False
        except Exception as exc:  # noqa: BLE001 - handed to the event loop, raised there as ApiError
            self.fail(exc)
            return False
        return True

    def accept(self, result: StepResult) -> bool:
        """Take one step's result (a token, None at the end of generation,
        :data:`~missive.engine.runner.PENDING`, or several of these from a
        verified draft, handed over one by one); False once the sequence ended."""
        if result is PENDING:
            return True
        if isinstance(result, list):
            return all(self.accept(token) for token in result)  # stops at the first that ends it
        seq = self.seq
        if result is None:
            self.reached_eog = seq.max_new > 0
            self._end(True)
            return False
        assert isinstance(result, int)
        try:
            assert self._detok is not None
            output, detok, send, budget = seq.output, self._detok, self.channel.send, self.budget
            output.append(result)
            text = detok.add(result)
            send(text)
            if budget is not None and budget.exhausted(text) and len(output) < seq.max_new:
                close = budget.close_tokens[: seq.max_new - len(output)]
                closing = "".join([detok.add(t) for t in close])
                budget.closed(closing)
                output += close
                for i in range(len(close)):
                    send(closing if i == 0 else "")
                self.runner.append(seq, close)
            if len(output) >= seq.max_new:
                self._end(True)
                return False
        except Cancelled:
            self._end(False)
            return False
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)
            return False
        return True

    def step(self) -> bool:
        """One step of a runner without :class:`~missive.engine.runner.Batched`
        (``Runner.step``); False once the sequence ended."""
        try:
            result = self.runner.step(self.seq)
        except Cancelled:
            self._end(False)
            return False
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)
            return False
        return self.accept(result)

    def stop(self) -> None:
        """End the sequence now (its consumer has gone; between steps its
        state is complete)."""
        self._end(True)

    def fail(self, error: BaseException) -> None:
        """End the sequence with ``error`` (reported to the event loop)."""
        if self._done:
            return
        self.channel.fail(error)
        self._end(False)

    def _end(self, ok: bool) -> None:
        if self._done:
            return
        self._done = True
        try:
            if ok and self._detok is not None:
                self.tail = self._detok.flush()
            if self._begun:
                self.runner.end(self.seq, ok)
        except Exception as exc:  # noqa: BLE001
            self.channel.fail(exc)
        finally:
            self.channel.close()
