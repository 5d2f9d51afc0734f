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
