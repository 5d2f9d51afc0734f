"""The MLX runner with slots: continuous batching through mlx-lm's ``BatchGenerator``.

With ``settings.parallel > 1`` the driver uses :class:`BatchedMlxRunner`
instead of :class:`~missive_mlx.runner.MlxRunner` (loading, tokenizing,
sampling parameters and detokenizing are inherited). It declares
``ModelInfo.slots = parallel`` and implements
:class:`~missive.engine.runner.Batched`: the engine's
:class:`~missive.engine.batcher.Batcher` calls :meth:`~BatchedMlxRunner.step_many`
once per step with every running sequence.

**Why mlx-lm's BatchGenerator** (``mlx_lm/generate.py``, 0.32) rather than a
batch of our own: it serves every need of the :class:`Batched` protocol, and
it is what mlx-lm's own server batches with (``mlx_lm/server.py``,
``_generate``), kept in step with mlx-lm's cache classes:

* a sequence joins between steps: ``insert`` (:meth:`Runner.begin` only
  queues it; the next ``next()`` merges its cache into the batch);
* one ``next()`` is one engine step: one token for every generating
  sequence (one forward pass of the batch), and a chunk of
  ``prefill_step_size`` tokens of every prompt still being read (one padded
  forward pass); a prompt's last token is read in the step that moves it to
  the generation batch, so its first token comes one step later
  (:data:`~missive.api.PENDING` until then);
* per-sequence samplers (``make_sampler`` of each request) and logits
  processors (the grammar constraint of :mod:`missive_mlx.constrain`);
* cancel: ``remove``, at any stage, with the sequence's cache extracted
  (``return_prompt_caches``), so a stopped sequence still leaves its cache
  in its slot;
* EOS and ``max_new`` are decided here and by the engine, not by the
  generator: it is given no stop tokens and a limit it never reaches, so a
  sequence always leaves through :meth:`~BatchedMlxRunner.end`;
* ``max_new == 0`` (cache warm-up): the generator refuses a limit of 0, so
  the sequence gets 1 and is removed in the step its prompt is read, before
  its first token is handed out (its cache then holds exactly the prompt);
* :meth:`~BatchedMlxRunner.append` (the thinking budget's close): the
  generator has no way to feed tokens to a running sequence, so the
  sequence is removed with its cache (which holds every token handed out
  so far: the generator feeds a token in the step that returns it) and
  inserted again with the appended tokens as its prompt, sampling after
  them. A grammar processor is carried over but sees only the last
  appended token (its input is the context's last token on each call).

What ``BatchGenerator`` cannot batch is refused at configuration time
(mlx-lm's server serves such requests one at a time instead: its
``_is_batchable``, and ``ModelProvider.load``'s check that every cache has
``merge``): ``kv_bits`` (``QuantizedKVCache`` has no ``merge``) and ``seed``
(one random state for the batch) in :mod:`missive_mlx.settings`, a model
with a cache class that cannot merge (``ChunkedKVCache``...) at load.

**Slots and prompt caches** (the llama.cpp driver's rule,
:mod:`missive_llamacpp.slots`, on mlx-lm's cache objects): each slot keeps
the cache its last sequence left (prompt and output, EOS included,
extracted from the batch by ``remove``) with the tokens it holds.

* a slot serves a prompt the common prefix of its tokens and the prompt,
  leaving at least one prompt token to read, when its cache can be trimmed
  (``can_trim_prompt_cache``) or holds only that prefix; otherwise nothing
  (never a cache whose content past the prefix is unknown): the rule of
  :class:`~missive_mlx.prompt_cache.PromptCacheStore`;
* :meth:`~BatchedMlxRunner.reusable` is the best of every slot and the
  store; :meth:`~BatchedMlxRunner.reusable_in` a slot's own, by which the
  engine's :meth:`~missive.engine.batcher.Batcher.choose_slot` places a
  sequence (its runner is a :class:`~missive.api.ContextStates` for that);
* the multi-entry :class:`~missive_mlx.prompt_cache.PromptCacheStore` stays
  behind the slots: in :meth:`~BatchedMlxRunner.begin`, a slot's cache that
  is a prefix of the prompt (the next turn of its conversation) is extended
  in place, unless the store serves the prompt more; any other goes into the
  store, and the store's best entry is taken as today (a diverging entry is
  copied and the copy trimmed), so a conversation whose slot is taken by
  another prompt is not lost: it is one of the store's entries, least
  recently used evicted first. For a cache that cannot be trimmed, a copy at the
  prompt's last token but one goes into the store as a checkpoint (taken at
  the end of the generator's first prompt segment, where mlx-lm's server
  saves its caches too), as :meth:`MlxRunner._checkpoint` does;
* the engine's host-memory prompt cache is not used (the driver turns it
  off): the store already keeps the caches that leave the slots.

``prompt_cache_entries = 0`` turns every reuse off, the slots' included.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from missive.api import (
    PENDING,
    ApiError,
    Cancelled,
    ConfigError,
    ModelInfo,
    Pending,
    Prompt,
    SavedContext,
    Sequence,
    StepResult,
    common_prefix,
)

from .constrain import logits_processor
from .runner import MlxRunner, _sampler

__all__ = ["BatchedMlxRunner"]

log = logging.getLogger("missive.mlx")

#: The generator's own token limit per sequence: never reached (the engine ends sequences).
_NO_LIMIT = 1 << 40


@dataclass
class _Slot:
    """What a slot keeps between sequences: ``cache`` (mlx-lm per-layer
    caches of one sequence) holding exactly ``tokens``; ``trimmable``:
    ``can_trim_prompt_cache(cache)``, read here so that tokenizing threads
    never touch MLX objects; ``scope``: the ``Prompt.cache_scope`` they
    were computed for (served to that scope only). Replaced whole under the
    runner's lock."""

    tokens: list[int] = field(default_factory=list)
    cache: list[Any] | None = None
    trimmable: bool = True
    scope: Hashable | None = None


@dataclass
class _BatchState:
    """A running sequence: its ``uid`` in the generator (None once removed),
    sampler and logits processors, whether tokens were appended (no
    checkpoint after that), and the cache the generator handed back if it
    let the sequence go by itself."""

    sampler: Callable[[Any], Any]
    processors: list[Callable[[Any, Any], Any]]
    uid: int | None = None
    owner: Any = None  # the generator ``uid`` is of (a failed step replaces it)
    appended: bool = False
    final: tuple[list[Any], list[int]] | None = None


def _reuse(tokens: list[int], trimmable: bool, prompt: list[int]) -> int:
    """Prompt tokens a cache of ``tokens`` serves (module documentation)."""
    n = min(common_prefix(tokens, prompt), len(prompt) - 1)
    if n < len(tokens) and not trimmable:
        return 0
    return max(n, 0)


def _holds(cache: list[Any], tokens: list[int]) -> bool:
    """Whether ``cache`` holds as many tokens as ``tokens`` (an attention
    layer's offset; a recurrent layer's ``ArraysCache`` has none)."""
    offset = next((c.offset for c in cache if hasattr(c, "offset")), len(tokens))
    return int(offset) == len(tokens)


@dataclass(frozen=True)
class _Saved:
    """A slot's cache saved by :meth:`BatchedMlxRunner.save_context`."""

    cache: list[Any]
    trimmable: bool


class BatchedMlxRunner(MlxRunner):
    """An MLX model folder decoded ``settings.parallel`` sequences at a time
    (module documentation)."""

    def __init__(self, model_id: str, settings: Any, context_window: int | None) -> None:
        super().__init__(model_id, settings, context_window)
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._gen: Any = None
        self._eos: frozenset[int] = frozenset()

    # -- load and close ----------------------------------------------------

    def load(self) -> ModelInfo:
        """:meth:`MlxRunner.load`, then the slots and the batch generator.

        Raises:
            ConfigError: as :meth:`MlxRunner.load`; a cache class of the model
                that mlx-lm cannot batch.
        """
        from mlx_lm.models.cache import make_prompt_cache

        info = super().load()
        n = self.settings.parallel
        if self.vision is not None:
            # Images enter as input embeddings with explicit M-RoPE positions
            # (missive_mlx.vision), which BatchGenerator's token batches do not carry.
            self.close()
            raise ConfigError(
                f"model '{self.model_id}': settings.parallel = {n} is not supported for a vision model "
                "(images are read one sequence at a time): set parallel = 1"
            )
        kinds = sorted({type(c).__name__ for c in make_prompt_cache(self.model) if not hasattr(c, "merge")})
        if kinds:
            self.close()
            raise ConfigError(
                f"model '{self.model_id}': settings.parallel = {n} needs caches mlx-lm can batch; "
                f"{', '.join(kinds)} cannot be merged into a batch: set parallel = 1"
            )
        self._slots = [_Slot() for _ in range(n)]
        self._eos = frozenset(int(t) for t in self.tokenizer.eos_token_ids)
        self._gen = self._generator()
        log.info("model %s: %d slots decoded together (mlx-lm BatchGenerator)", self.model_id, n)
        return dataclasses.replace(info, slots=n)

    def _generator(self) -> Any:
        from mlx_lm.generate import BatchGenerator

        n = self.settings.parallel
        return BatchGenerator(
            self.model,
            max_tokens=_NO_LIMIT,
            completion_batch_size=n,
            prefill_batch_size=n,
            prefill_step_size=self.settings.prefill_step_size,
        )

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None
        with self._lock:
            self._slots = [_Slot() for _ in self._slots]
        super().close()

    # -- reuse (any thread) ------------------------------------------------

    @property
    def _reusing(self) -> bool:
        return self.settings.prompt_cache_entries > 0

    def reusable(self, prompt: Prompt) -> int:
        """The most a slot or the store would serve now."""
        assert self.store is not None
        stored = self.store.reusable(prompt.tokens, prompt.cache_scope)
        return max([stored] + [self.reusable_in(prompt, s) for s in range(len(self._slots))])

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        if not self._reusing:
            return 0
        with self._lock:
            s = self._slots[slot]
            return _reuse(s.tokens, s.trimmable, prompt.tokens) if s.scope == prompt.cache_scope else 0

    def context_tokens(self, slot: int) -> list[int]:
        with self._lock:
            return list(self._slots[slot].tokens)

    def reusable_from(self, prompt: Prompt, saved: SavedContext) -> int:
        state: _Saved = saved.state
        if not self._reusing or saved.cache_scope != prompt.cache_scope:
            return 0
        return _reuse(saved.tokens, state.trimmable, prompt.tokens)

    def save_context(self, slot: int) -> SavedContext | None:
        """A copy of slot ``slot``'s cache (``copy.deepcopy``: every layer's
        arrays), None when it holds nothing."""
        with self._lock:
            s = self._slots[slot]
        if s.cache is None or not s.tokens:
            return None
        cache = copy.deepcopy(s.cache)
        nbytes = sum(int(getattr(c, "nbytes", 0)) for c in cache)
        return SavedContext(list(s.tokens), _Saved(cache, s.trimmable), nbytes, cache_scope=s.scope)

    def restore_context(self, saved: SavedContext, slot: int) -> None:
        state: _Saved = saved.state
        restored = _Slot(list(saved.tokens), copy.deepcopy(state.cache), state.trimmable, saved.cache_scope)
        with self._lock:
            self._slots[slot] = restored

    # -- sequences (the model's thread) ------------------------------------

    def begin(self, seq: Sequence) -> None:
        """Take the prompt's cached prefix (the slot's or the store's, module
        documentation) and queue the rest of the prompt in the generator."""
        processor = logits_processor(seq.sampling)
        state = seq.state = _BatchState(
            sampler=_sampler(seq.sampling), processors=[processor] if processor is not None else []
        )
        prompt = seq.prompt.tokens
        cache, seq.reused = self._take(seq.slot, prompt, seq.prompt.cache_scope)
        state.uid = self._insert(state, prompt[seq.reused :], cache, prompt[: seq.reused])

    def _take(self, slot: int, prompt: list[int], scope: Hashable | None) -> tuple[list[Any], int]:
        """The cache ``slot``'s sequence (of cache scope ``scope``) starts
        from and the prompt tokens it holds."""
        from mlx_lm.models.cache import make_prompt_cache

        assert self.store is not None
        with self._lock:
            s = self._slots[slot]
            self._slots[slot] = _Slot()
        live = _reuse(s.tokens, s.trimmable, prompt) if self._reusing and s.scope == scope else 0
        if s.cache is not None and 0 < live == len(s.tokens) and self.store.reusable(prompt, scope) <= live:
            return s.cache, live  # a prefix of the prompt: extended in place
        if s.cache is not None:
            # To the store (runner._keep checks it), which serves it as before, to its own scope.
            self._keep(s.cache, s.tokens, s.scope)
        return self.store.take(prompt, lambda: make_prompt_cache(self.model), scope)

    def _insert(self, state: _BatchState, tokens: list[int], cache: list[Any], held: list[int]) -> int:
        (uid,) = self._gen.insert(
            [list(tokens)],
            max_tokens=[_NO_LIMIT],
            caches=[cache],
            all_tokens=[list(held)],
            samplers=[state.sampler],
            logits_processors=[state.processors],
        )
        state.owner = self._gen
        return int(uid)

    def step_many(self, seqs: list[Sequence]) -> list[StepResult]:
        """One ``BatchGenerator.next()`` (module documentation): a token for
        each generating sequence, PENDING for those still reading, None at
        EOS and for a warm-up whose prompt is read."""
        by_uid = {seq.state.uid: seq for seq in seqs if seq.state.uid is not None}
        results: dict[int, StepResult] = {id(seq): PENDING for seq in seqs}
        try:
            prompt_responses, generated = self._gen.next()
        except Exception as exc:
            self._reset()
            raise ApiError(f"mlx-lm failed a batched step of {len(seqs)} sequences: {exc}") from exc
        for r in prompt_responses:
            seq = by_uid.get(r.uid)
            if seq is None:
                continue
            if r.end_of_prompt:
                if seq.max_new == 0:  # the prompt is in the cache (warm-up): out before a token comes
                    seq.state.final = self._remove(seq.state)
                    results[id(seq)] = None
            elif r.end_of_segment and self.checkpoints and not seq.state.appended:
                self._checkpoint_uid(r.uid, seq.prompt.cache_scope)
        for r in generated:
            seq = by_uid.get(r.uid)
            if seq is None:
                continue
            if r.finish_reason is not None:  # the generator let it go (never expected: no limit, no stops)
                seq.state.uid = None
                seq.state.final = (r.prompt_cache, list(r.all_tokens))
            token = int(r.token)
            results[id(seq)] = None if token in self._eos else token
        return [results[id(seq)] for seq in seqs]

    def _checkpoint_uid(self, uid: int, scope: Hashable | None) -> None:
        """Store a copy of the cache of sequence ``uid`` (of cache scope
        ``scope``) as a checkpoint (at the prompt's last token but one)."""
        import mlx.core as mx

        assert self.store is not None
        extracted = self._gen.extract_cache([uid]).get(uid)
        if extracted is None:
            return
        cache, tokens = extracted
        tokens = list(tokens)
        if not tokens or not _holds(cache, tokens):
            return
        mx.eval([c.state for c in cache])  # extract copies the arrays out of the batch
        self.store.put(tokens, cache, checkpoint=True, scope=scope)

    def _remove(self, state: _BatchState) -> tuple[list[Any], list[int]] | None:
        """Take the sequence out of the generator, with its cache and tokens."""
        uid, state.uid = state.uid, None
        if uid is None or state.owner is not self._gen:
            return None
        got = self._gen.remove([uid], return_prompt_caches=True).get(uid)
        return (got[0], list(got[1])) if got is not None else None

    def _reset(self) -> None:
        """After a failed step: a new generator (every sequence of the step
        fails; the caches they held are dropped)."""
        try:
            self._gen.close()
        except Exception:  # noqa: BLE001 - the old generator is dropped either way
            log.exception("closing the failed batch generator")
        self._gen = self._generator()

    def step(self, seq: Sequence) -> int | None:
        """:meth:`step_many` of ``seq`` alone until it samples (the engine
        calls ``step_many``; this serves the :class:`Runner` protocol)."""
        while (result := self.step_many([seq])[0]) is PENDING:
            if seq.cancelled():
                raise Cancelled
        assert not isinstance(result, (Pending, list))
        return result

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        """Feed ``tokens`` after the last token handed out and sample after
        them (module documentation: out of the generator and in again)."""
        state: _BatchState = seq.state
        if not tokens:
            return
        taken = state.final or self._remove(state)
        state.final = None
        if taken is None:
            raise ApiError("the sequence left mlx-lm's batch before tokens could be appended")
        cache, held = taken
        state.appended = True
        state.uid = self._insert(state, tokens, cache, held)

    def end(self, seq: Sequence, ok: bool) -> None:
        """Take the sequence out of the generator; its cache stays in its
        slot unless it failed (its content is then unknown)."""
        import mlx.core as mx

        state: _BatchState | None = seq.state
        if state is None:
            return
        taken = state.final or self._remove(state)
        state.final = None
        if not ok or taken is None or not self._reusing:
            return
        cache, tokens = taken
        if not tokens or not _holds(cache, tokens):
            if tokens:
                log.warning("slot %d's cache does not hold its %d tokens: not kept", seq.slot, len(tokens))
            return
        try:
            mx.eval([c.state for c in cache])
        except Exception:  # a cache that cannot be evaluated is dropped (logged)
            log.exception("slot %d's cache could not be evaluated: not kept", seq.slot)
            return
        from mlx_lm.models.cache import can_trim_prompt_cache

        kept = _Slot(tokens, cache, bool(can_trim_prompt_cache(cache)), seq.prompt.cache_scope)
        with self._lock:
            self._slots[seq.slot] = kept
