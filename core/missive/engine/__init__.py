"""The in-process engine: what the llama.cpp and MLX drivers share.

A backend plugin implements a :class:`~missive.engine.runner.Runner` (load,
tokenize, begin/step/append/end a sequence; :class:`~missive.engine.runner.Batched`
for runners that decode several sequences together,
:class:`~missive.engine.runner.ContextStates` for runners that can save and
restore a slot's context) and subclasses :class:`~missive.engine.local.LocalDriver`; everything else is here:

* :mod:`~missive.engine.runner`: the runner protocol and the types it speaks
  (:class:`~missive.engine.runner.Prompt`, :class:`~missive.engine.runner.Sequence`...);
* :mod:`~missive.engine.prompt`: render with the chat template and tokenize,
  one path for ``count_tokens`` and ``generate``;
* :mod:`~missive.engine.channel`: a model thread's output to the event loop;
* :mod:`~missive.engine.batcher`: continuous batching, every running
  sequence stepped together in the model's thread, slots chosen by prefix;
* :mod:`~missive.engine.producer`: one sequence's decoding (tokens to text,
  thinking budget, end) and its hand-over to the event loop;
* :mod:`~missive.engine.host_cache`: the host-memory prompt cache;
* :mod:`~missive.engine.budget`: the thinking budget;
* :mod:`~missive.engine.scheduler`: one permit per slot, FIFO;
* :mod:`~missive.engine.local`: the ``Driver`` API on top of a runner.

How :class:`~missive.engine.local.LocalDriver` serves a request, the same for every backend:

* one thread per model (a one-thread executor) runs everything that touches
  the model (load, the decode loop, close): backends' contexts and streams
  are not thread-safe; rendering and tokenizing run beside it, in up to
  ``runner.tokenize_threads`` threads, never behind a generation;
* the prompt (:mod:`missive.engine.prompt`) is rendered and tokenized once per
  request; ``len(prompt) >= context`` raises
  :class:`~missive.protocol.errors.PromptTooLongError` (``prompt is too long: N tokens
  > M maximum``, M = context - 1: one token must be left to answer), and
  ``max_tokens`` is clamped to ``context - len(prompt)``
  (:func:`~missive.driver.interface.clamp_max_tokens`; reaching it ends with
  ``max_tokens``);
* :class:`~missive.driver.events.Started` is yielded at once, before queueing, with
  the prefix the runner's cache would serve at that moment as
  ``cache_read_input_tokens`` (a request served while this one waits can
  change the reuse actually obtained; the total is always exact); when the
  prompt leaves a reasoning tag open (``<think>``), a ``TextDelta`` of it with
  0 tokens follows;
* the generation then waits for a permit (:class:`~missive.engine.scheduler.Scheduler`,
  one per slot: the runner's ``ModelInfo.slots``, also set as
  ``capabilities.max_concurrency``, FIFO) and joins the model's decode loop
  (:class:`~missive.engine.batcher.Batcher`) in a free slot, the one whose
  cached tokens serve its prompt best; every running sequence is stepped
  together there (continuous batching), ahead of the event loop
  (:class:`~missive.engine.producer.Producer`); closing the iterator (client
  gone, stop sequence matched) stops it within one step, and the permit is
  given back only once its sequence has left the loop;
* if the sequence reused another prefix than ``Started`` announced (another
  request changed the slots while it waited, or it got another slot),
  :class:`~missive.driver.events.Finished` carries the exact split (in
  ``message_delta``);
* an end-of-generation token ends with ``end_turn`` (neither shown nor
  counted), else ``max_tokens``; :class:`~missive.driver.events.Finished` carries the
  exact ``output_tokens``; ``max_tokens: 0`` (the API's cache warm-up) decodes
  the prompt only and finishes with ``max_tokens`` and 0 output tokens;
* with a runner that can save its context (:class:`~missive.engine.runner.ContextStates`),
  prompts that leave a slot are kept in a host-memory prompt cache
  (:mod:`missive.engine.host_cache`) and restored when a later prompt shares
  more with them than with the slot it takes; restored tokens are cache reads;
  with :class:`~missive.engine.runner.PortableStates`, also on disk (:mod:`missive.engine.disk_tier`:
  after a restart or an idle unload too; the slots get their states back at load);
* ``thinking.budget_tokens`` is enforced (:mod:`missive.engine.budget`) for models whose reasoning closes;
* sampling fields the request leaves unset take the model's defaults (``ModelInfo.sampling``,
  :mod:`missive.sampling`; thinking-mode values when it thinks), shown in :meth:`LocalDriver.choices`.
"""

from __future__ import annotations

from .local import LocalDriver
from .runner import Cancelled, Detokenizer, ImageMarks, ModelInfo, Prompt, Runner, Sampling, Sequence

__all__ = [
    "Cancelled",
    "Detokenizer",
    "ImageMarks",
    "LocalDriver",
    "ModelInfo",
    "Prompt",
    "Runner",
    "Sampling",
    "Sequence",
]
