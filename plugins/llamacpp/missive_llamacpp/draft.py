"""A draft model for speculative decoding (llama-server's ``--model-draft``, ``-md``).

A small model of the same vocabulary proposes the next tokens; the target
model verifies them all in its one ``llama_decode`` of the step
(:func:`missive_llamacpp.speculative.verify`, the same acceptance rule as
prompt lookup), so greedy output is the output without drafting. llama.cpp's
rules (``common/speculative.cpp``, ``common/speculative.h``):

* **compatible vocabularies** (``common_speculative_are_compatible``): the
  same vocabulary type, the same BOS and EOS, at most 128 tokens more in
  one than the other, and the same text for every token from id 5 on
  (``SPEC_VOCAB_CHECK_START_TOKEN_ID``); otherwise drafts would be other
  tokens than they look. An incompatible draft model is a start-up error;
* **drafting** (``common_speculative_gen_draft``): the draft model's cache
  keeps each sequence's tokens; before a draft, the part that differs from
  the sequence now (rejected drafts, a new conversation in the slot) is
  removed and the rest read (nothing of a sequence of another cache scope,
  ``Prompt.cache_scope``: its drafting speed would tell what it held); then
  the most probable token is taken, one
  ``llama_decode`` a token, while its probability is at least ``p_min``
  (0.75, ``common_speculative_params``) and fewer than ``k`` are drafted.

Each slot of the target has the sequence of the same number in the draft
model's context, one pool of the target's size shared by them. A draft
whose decode cannot find room in that pool empties the draft cache and
drafts nothing that step: the next step reads the sequence again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals as internals

from missive.api import ConfigError, common_prefix

from .memory import LogCapture
from .settings import LlamaCppSettings
from .step_cost import step_costs
from .trial import model_params

__all__ = ["DraftModel", "ModelDrafter", "load_draft", "SPEC_VOCAB_MAX_SIZE_DIFFERENCE"]

#: The most tokens one vocabulary may have beyond the other (``common/speculative.cpp``).
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
#: The first token id whose text is compared (ids below are often special).
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


class DraftModel:
    """The draft model of one runner, its context and its cache's contents per slot."""

    def __init__(self, llm: Any, ctx: Any, n_batch: int, slots: int, p_min: float, name: str) -> None:
        self.llm = llm
        self.ctx = ctx  # internals.LlamaContext
        self.name = name
        self.p_min = p_min
        self.n_vocab = int(llm.n_vocab())
        self._memory = llama_cpp.llama_get_memory(ctx.ctx)
        self._n_batch = n_batch
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[list[int]] = [[] for _ in range(slots)]
        self.scopes: list[Hashable | None] = [None] * slots  # the cache scope each slot's tokens came from

    def propose(self, slot: int, tokens: list[int], k: int, scope: Hashable | None = None) -> list[int]:
        """Up to ``k`` tokens to follow ``tokens`` (the sequence of ``slot``,
        its last token the one the target decodes this step, its prompt of
        cache scope ``scope``: nothing of another scope's is reused, whose
        speed would tell what it held)."""
        if k <= 0 or not tokens:
            return []
        have = self.tokens[slot]
        if self.scopes[slot] != scope:  # another key's tokens: dropped, cells and all
            llama_cpp.llama_memory_seq_rm(self._memory, slot, -1, -1)
            have.clear()
            self.scopes[slot] = scope
        keep = min(common_prefix(have, tokens), len(tokens) - 1)  # the last token is read again: its logits
        if keep < len(have):
            llama_cpp.llama_memory_seq_rm(self._memory, slot, keep, -1)
            del have[keep:]
        if not self._read(slot, tokens[keep:]):
            return []
        draft: list[int] = []
        while True:
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(self.ctx.ctx, -1), shape=(self.n_vocab,)
            )
            top = int(logits.argmax())
            probability = 1.0 / float(np.exp(logits - logits[top]).sum())
            if probability < self.p_min:
                break
            draft.append(top)
            if len(draft) >= k or not self._read(slot, [top]):
                break
        return draft

    def _read(self, slot: int, tokens: list[int]) -> bool:
        """Decode ``tokens`` after the slot's cached ones, logits at the last;
        False (the cache emptied) when the pool has no room."""
        have = self.tokens[slot]
        batch = self._batch
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start : start + self._n_batch]
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = len(have) + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = slot
                batch.logits[i] = int(start + i == len(tokens) - 1)
            batch.n_tokens = len(chunk)
            if llama_cpp.llama_decode(self.ctx.ctx, batch) != 0:
                self.clear()
                return False
            have.extend(chunk)
        return True

    def clear(self) -> None:
        """Empty the draft cache of every slot."""
        llama_cpp.llama_memory_clear(self._memory, True)
        for have in self.tokens:
            have.clear()

    def token_cost(self) -> float:
        """Seconds of one 1-token ``llama_decode`` of the draft model (the
        ``"auto"`` decision's draft cost), timed as the model's own token is
        (:func:`missive_llamacpp.step_cost.step_costs`)."""
        try:
            one, _ = step_costs(self.ctx.ctx, self._batch, self.n_vocab, 2)
        finally:
            self.clear()
        return one

    def close(self) -> None:
        batch, self._batch = self._batch, None
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        self.llm.close()


class ModelDrafter:
    """The drafter of one sequence (the interface of
    :class:`~missive_llamacpp.speculative.NgramDrafter`): ``tokens`` gives the
    sequence as the target holds it, the token of this step last."""

    def __init__(
        self, model: DraftModel, slot: int, tokens: Callable[[], list[int]], scope: Hashable | None = None
    ) -> None:
        self.model = model
        self.slot = slot
        self._tokens = tokens
        self.scope = scope  # the prompt's cache scope (Prompt.cache_scope)

    def extend(self, tokens: list[int]) -> None:
        """Nothing: the sequence is read from the target's slot at each draft."""

    def propose(self, k: int) -> list[int]:
        return self.model.propose(self.slot, self._tokens(), k, self.scope)


def _check_vocabularies(target: Any, draft: Any, model_id: str, path: str) -> None:
    """``common_speculative_are_compatible``'s checks (module doc).

    Raises:
        ConfigError: naming the first difference.
    """
    tv, dv = target._model.vocab, draft._model.vocab
    problems = []
    if llama_cpp.llama_vocab_type(tv) != llama_cpp.llama_vocab_type(dv):
        problems.append("another vocabulary type")
    for what, get in (("BOS", llama_cpp.llama_vocab_bos), ("EOS", llama_cpp.llama_vocab_eos)):
        if get(tv) != get(dv):
            problems.append(f"another {what} token ({get(dv)}, the model's is {get(tv)})")
    nt, nd = llama_cpp.llama_vocab_n_tokens(tv), llama_cpp.llama_vocab_n_tokens(dv)
    if abs(nt - nd) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        problems.append(f"{nd} tokens where the model has {nt}")
    else:
        for token in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(nt, nd)):
            a, b = llama_cpp.llama_vocab_get_text(tv, token), llama_cpp.llama_vocab_get_text(dv, token)
            if a != b:
                theirs, ours = (x.decode("utf-8", "replace") for x in (b, a))
                problems.append(f"token {token} is {theirs!r} where the model's is {ours!r}")
                break
    if problems:
        raise ConfigError(
            f"model '{model_id}': settings.draft_model {path} cannot draft for this model: its vocabulary "
            f"differs ({'; '.join(problems)}); a draft model must share the model's tokenizer"
        )


def load_draft(target: Any, settings: LlamaCppSettings, model_id: str, cells: int, slots: int) -> DraftModel:
    """Load ``settings.draft_model`` beside ``target``, with a context of
    ``cells`` tokens shared by ``slots`` sequences.

    Raises:
        ConfigError: missing file, a file llama.cpp cannot load, an
            incompatible vocabulary, a model whose cache cannot drop a
            rejected draft (recurrent, hybrid, sliding-window).
    """
    assert settings.draft_model is not None
    path = settings.draft_path
    if path is None or not path.is_file():
        raise ConfigError(f"model '{model_id}': settings.draft_model: GGUF file not found: {path}")
    layers = settings.gpu_layers if settings.draft_gpu_layers is None else settings.draft_gpu_layers
    try:
        with model_params(use_extra_bufts=False):
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=256,
                n_threads=settings.threads,
                n_threads_batch=settings.threads,
                n_gpu_layers=layers,
                verbose=settings.verbose,
            )
    except (ValueError, RuntimeError, OSError) as exc:
        raise ConfigError(
            f"model '{model_id}': settings.draft_model: llama.cpp could not load {path}: {exc}"
        ) from exc
    try:
        model = llm._model.model
        if (
            llama_cpp.llama_model_is_recurrent(model)
            or llama_cpp.llama_model_is_hybrid(model)
            or llama_cpp.llama_model_n_swa(model) > 0
        ):
            raise ConfigError(
                f"model '{model_id}': settings.draft_model {path}: a recurrent, hybrid or sliding-window "
                "model cannot drop a rejected draft from its cache; use a model of plain attention"
            )
        _check_vocabularies(target, llm, model_id, str(path))
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_ctx = cells
        params.n_batch = params.n_ubatch = min(settings.n_batch, cells)
        params.n_seq_max = slots
        params.kv_unified = True
        llm._ctx.close()
        with LogCapture.capture(forward=settings.verbose):
            ctx = internals.LlamaContext(model=llm._model, params=params, verbose=settings.verbose)
        llm._ctx = ctx
    except BaseException:
        llm.close()
        raise
    return DraftModel(llm, ctx, int(params.n_batch), slots, settings.draft_p_min, path.name)
