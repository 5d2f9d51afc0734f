"""Speculative decoding's pure parts: n-gram drafting, the acceptance rule, the adaptive draft length.

The runner (:meth:`~missive_llamacpp.runner.LlamaCppRunner.step_many`)
decodes a generating sequence's last token and a draft after it in one
``llama_decode``, then calls :func:`verify`; this module holds no llama.cpp
state, so its rules are tested without a model.

* **Drafting** (:class:`NgramDrafter`, prompt lookup): the last ``n``
  tokens of the sequence (prompt and output), for ``n`` from
  ``prompt_lookup_max`` down to ``prompt_lookup_min``, are looked up among
  the earlier tokens; the tokens that followed the match are the draft.
  The rule is vLLM's ``NgramProposer`` (``vllm/v1/spec_decode/ngram_proposer.py``:
  the longest suffix n-gram between ``prompt_lookup_min`` and
  ``prompt_lookup_max``, the tokens after its match, at most ``k``), with one
  difference: vLLM scans the context for the earliest match at each step,
  here a dictionary kept up to date token by token gives the most recent
  one in constant time (a step must not rescan 12k tokens), which is also
  the nearer text.
* **Acceptance** (:func:`verify`): at each drafted position the sequence's
  own sampler chain samples from the target model's logits; the run goes on
  while the sampled token equals the draft, and the first one that differs
  is emitted too (it came from the target model). This is llama.cpp's
  ``common_sampler_sample_and_accept_n`` (``common/sampling.cpp``, used by
  ``common/speculative.cpp`` and llama-server): for greedy sampling the
  output is the one without speculation; for temperature > 0 each emitted
  token is a draw of the target distribution given the emitted prefix (a
  one-point draft is accepted with probability p(draft), and a rejected
  position's draw is the sample itself), so sampled output keeps its
  distribution. A grammar in the chain sees only emitted tokens.
* **"auto"** (the default, :func:`auto_decision`): drafting is on where
  it can pay on this machine and model. At load the runner times one
  ``llama_decode`` of 1 token and of :data:`AUTO_STEP` tokens
  (:mod:`missive_llamacpp.step_cost`), their ratio ``r``. A step drafting
  ``g`` tokens of which each is accepted with probability ``a`` emits
  ``(1 - a^(g+1)) / (1 - a)`` tokens on average (Leviathan, Kalman and
  Matias, "Fast Inference from Transformers via Speculative Decoding",
  ICML 2023, equation 1) for ``r`` plain steps' time (their cost
  coefficient ``c`` is ~0 for prompt lookup, and their verification is
  assumed free: here it is measured). Drafting is on when that expected
  speed-up, at ``g = AUTO_STEP - 1`` and ``a =`` :data:`AUTO_ACCEPTANCE`
  (0.68 of drafted tokens were accepted on the edit task of
  ``bench_speculative.py``), is at least :data:`AUTO_MIN_SPEEDUP`: on a
  GPU or a memory-bound large model ``r`` is near 1 (speed-up ~3), on
  SmolLM2 on 2 CPU cores ``r`` is ~7 (0.46: off).
* **Draft length** (:class:`DraftLength`): per sequence, grows by 2 when a
  whole draft was accepted and shrinks by 1 otherwise, between
  ``draft_min`` and ``draft_max``: the "heuristic" schedule of Hugging Face
  transformers' assisted generation (``num_assistant_tokens_schedule``).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "AUTO_ACCEPTANCE",
    "AUTO_MIN_SPEEDUP",
    "AUTO_STEP",
    "DraftLength",
    "NgramDrafter",
    "auto_decision",
    "verify",
]

#: Tokens of the step ``"auto"`` times against one token: the last token and 8 drafted ones.
AUTO_STEP = 9
#: The acceptance rate ``"auto"`` assumes of each drafted token.
AUTO_ACCEPTANCE = 0.7
#: The least expected speed-up for ``"auto"`` to draft.
AUTO_MIN_SPEEDUP = 1.25


def auto_decision(
    cost_one: float,
    cost_step: float,
    step: int = AUTO_STEP,
    acceptance: float = AUTO_ACCEPTANCE,
    draft_cost: float = 0.0,
) -> tuple[bool, float]:
    """Whether ``speculative = "auto"`` drafts (module documentation), given
    the seconds of a 1-token and a ``step``-token ``llama_decode``, and of
    drafting one token (a draft model's 1-token decode; ~0 for prompt
    lookup: Leviathan et al.'s cost coefficient ``c``); and the expected
    speed-up: tokens a step emits on average, ``(1 - a^step) / (1 - a)``,
    over the step's cost in plain steps, the ``step - 1`` drafted tokens'
    cost included."""
    if cost_one <= 0 or cost_step <= 0:
        return False, 0.0
    emitted = (1 - acceptance**step) / (1 - acceptance)
    expected = emitted / ((cost_step + (step - 1) * draft_cost) / cost_one)
    return expected >= AUTO_MIN_SPEEDUP, expected


class NgramDrafter:
    """Prompt-lookup drafting over one sequence's tokens (module documentation).

    Args:
        min_n: the shortest suffix n-gram looked up (``prompt_lookup_min``).
        max_n: the longest (``prompt_lookup_max``).
    """

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= prompt_lookup_min ({min_n}) <= prompt_lookup_max ({max_n})")
        self.min_n = min_n
        self.max_n = max_n
        self.tokens: list[int] = []
        # n-gram -> the position right after its most recent occurrence that
        # has a token after it (so a lookup never finds the suffix itself).
        self._after: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: list[int]) -> None:
        """Add ``tokens`` at the end of the sequence and index the n-grams
        they complete (``zip`` over slices: a 12k-token prompt is indexed
        without a Python loop per token)."""
        seq = self.tokens
        start = len(seq)
        seq.extend(tokens)
        size = len(seq)
        index = self._after
        for n in range(self.min_n, self.max_n + 1):
            # The n-grams ending at first .. size - 1 now have a token after them.
            first = max(start, n)
            if first >= size:
                continue
            window = seq[first - n : size - 1]
            index.update(
                zip(zip(*(window[i:] for i in range(n)), strict=False), range(first, size), strict=True)
            )

    def propose(self, k: int) -> list[int]:
        """At most ``k`` tokens that followed the most recent earlier
        occurrence of the longest suffix n-gram found; [] when none is.
        The draft stops before an image's position: those hold a negative
        synthetic id (:func:`missive_llamacpp.vision.image_id`), no token
        the model could sample or decode."""
        seq = self.tokens
        if k <= 0:
            return []
        size = len(seq)
        for n in range(min(self.max_n, size), self.min_n - 1, -1):
            at = self._after.get(tuple(seq[size - n :]))
            if at is not None:
                draft = seq[at : at + k]
                for i, token in enumerate(draft):
                    if token < 0:
                        return draft[:i]
                return draft
        return []


class DraftLength:
    """A sequence's draft length, adapted to how much of its drafts the
    model accepts (module documentation).

    Args:
        low: ``draft_min``, the length it shrinks to at least.
        high: ``draft_max``, the length it grows to at most.
    """

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high
        self.n = min(high, max(low, 4))

    def update(self, drafted: int, accepted: int) -> None:
        """After a verified draft of ``drafted`` tokens, ``accepted`` of them kept."""
        if drafted <= 0:
            return
        if accepted >= drafted:
            self.n = min(self.high, self.n + 2)
        else:
            self.n = max(self.low, self.n - 1)


def verify(
    sample: Callable[[int], int], draft: list[int], is_eog: Callable[[int], bool]
) -> tuple[list[int | None], int]:
    """The acceptance rule (module documentation).

    Args:
        sample: ``sample(i)`` draws the token at position ``i`` of the run
            (0: after the last emitted token, ``i``: after ``draft[i - 1]``)
            with the sequence's sampler chain, which then accepts it.
        draft: the drafted tokens.
        is_eog: whether a token ends generation.

    Returns:
        ``(emitted, accepted)``: the tokens to hand over in order, ending
        with the first sampled token that differs from the draft (or the
        one after a fully accepted draft), or with None where an
        end-of-generation token was sampled; and how many draft tokens were
        accepted.
    """
    emitted: list[int | None] = []
    for i in range(len(draft) + 1):
        token = sample(i)
        if is_eog(token):
            emitted.append(None)
            return emitted, i
        emitted.append(token)
        if i == len(draft) or token != draft[i]:
            return emitted, i
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns
