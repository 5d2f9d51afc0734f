"""How many prompt tokens a KV cache holding ``cached`` tokens serves.

The rule of llama-cpp-python 0.3.36's ``Llama.generate`` (``reset=True``),
which the llama.cpp runner keeps for its slots and saved states (always with
``requires_eval=True``: a slot's logits do not outlive the step that made
them):

* nothing is reused when the context holds no tokens;
* ``longest`` = common prefix of the cached tokens and the prompt;
* the whole prompt is reused, nothing decoded, when the cache holds exactly the
  prompt and its logits come from a live decode (``not requires_eval``);
* otherwise a prompt wholly inside the cache gives back its last token to be
  decoded again (to refresh the logits): ``longest - 1``; else ``longest``;
* a partial reuse needs ``llama_memory_seq_rm`` to cut the cache, which fails
  for recurrent and hybrid models (``partial_reuse=False``); the runner then
  looks for a context checkpoint (:mod:`missive_llamacpp.checkpoints`).

The result is what the API reports as ``cache_read_input_tokens``; the rest of
the prompt is ``input_tokens`` (contract section 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from missive.api import common_prefix

__all__ = ["common_prefix", "reused_prefix"]


def reused_prefix(
    cached: Sequence[int],
    prompt: Sequence[int],
    *,
    requires_eval: bool,
    partial_reuse: bool = True,
) -> int:
    """Prompt tokens served from the cache, 0..len(prompt).

    Args:
        cached: tokens in the context (``Llama.input_ids[:n_tokens]``).
        prompt: the prompt about to be generated from.
        requires_eval: ``Llama._requires_eval`` (logits are stale).
        partial_reuse: the model's memory can be cut at a position (False for
            recurrent/hybrid models).
    """
    if not cached or not prompt:
        return 0
    longest = common_prefix(cached, prompt)
    consumed = longest == len(prompt)
    if consumed and len(cached) == len(prompt) and not requires_eval:
        return len(prompt)
    reuse = longest - 1 if consumed else longest
    return reuse if reuse > 0 and partial_reuse else 0
