"""The decode loop of one sequence, in the model's thread, ahead of the event loop.

:class:`Producer.run` runs in the model's thread: it starts the sequence
(:meth:`~missive.engine.runner.Runner.begin`), steps it token after token
without ever waiting for the event loop, and hands each token's text (possibly
"") over through a :class:`~missive.engine.channel.ThreadChannel`. The loop
side (:mod:`missive.engine.local`) takes the pieces that arrived while it was
busy together, as one text delta carrying their token count, so a busy loop
never slows decoding and usage stays exact. The thread checks the channel's
cancel flag before every token, so a consumer that goes away stops the model
within one token (and within one prompt batch, through ``Sequence.cancelled``).

With a :class:`~missive.engine.budget.ThinkingBudget`, the reasoning is closed
when its budget is spent: the closing tokens are handed over like generated
ones (first piece their text, then empty pieces, so token counts stay exact)
and written into the context with :meth:`~missive.engine.runner.Runner.append`.
"""

from __future__ import annotations

from collections.abc import Callable

from .budget import ThinkingBudget
from .channel import ThreadChannel
from .runner import Cancelled, Runner, Sequence

__all__ = ["Producer"]


class Producer:
    """Decodes one :class:`~missive.engine.runner.Sequence` in the model's thread.

    Thread side: :meth:`run` (exactly once). Loop side: :meth:`next_batch`
    (``(pieces, ended)``, one str piece per output token; raises
    :class:`~missive.errors.ApiError` ``<backend> failed while generating:
    ...`` if the thread failed) and :meth:`cancel`. After the end:
    :attr:`reached_eog` (an end-of-generation token ended it) and
    :attr:`tail` (text the detokenizer held back, not yet counted).
    """

    def __init__(
        self,
        runner: Runner,
        seq: Sequence,
        budget: ThinkingBudget | None = None,
        setup: Callable[[], None] | None = None,
    ) -> None:
        """``setup``: run in the model's thread before the sequence begins
        (the host-memory prompt cache's swap, :func:`missive.engine.host_cache.swap_in`)."""
        self.runner = runner
        self.seq = seq
        self.budget = budget
        self.setup = setup
        self.reached_eog = False
        self.tail = ""
        self.channel: ThreadChannel[str] = ThreadChannel(f"{runner.backend} failed while generating")
        self.cancel = self.channel.cancel
        self.next_batch = self.channel.next_batch
        seq.cancelled = self.channel.cancelled

    def run(self) -> None:
        """The thread's body; always ends the sequence and closes the channel."""
        runner, seq, channel = self.runner, self.seq, self.channel
        ok = True
        try:
            if self.setup is not None:
                self.setup()
            runner.begin(seq)
            if seq.max_new == 0:
                return  # the prompt is decoded (cache warm-up)
            detok = runner.detokenizer(seq)
            output, max_new, budget = seq.output, seq.max_new, self.budget
            send, cancelled, step = channel.send, channel.cancelled, runner.step
            while len(output) < max_new:
                if cancelled():
                    return
                token = step(seq)
                if token is None:
                    self.reached_eog = True
                    break
                output.append(token)
                text = detok.add(token)
                send(text)
                if budget is not None and budget.exhausted(text) and len(output) < max_new:
                    close = budget.close_tokens[: max_new - len(output)]
                    closing = "".join([detok.add(t) for t in close])
                    budget.closed(closing)
                    output += close
                    for i in range(len(close)):
                        send(closing if i == 0 else "")
                    runner.append(seq, close)
            self.tail = detok.flush()
        except Cancelled:
            ok = False  # stopped inside a prompt decode: the state is incomplete
        except Exception as exc:  # noqa: BLE001 - handed to the event loop, raised there as ApiError
            ok = False
            channel.fail(exc)
        finally:
            try:
                runner.end(seq, ok)
            except Exception as exc:  # noqa: BLE001
                channel.fail(exc)
            finally:
                channel.close()
