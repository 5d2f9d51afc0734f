"""What the llama.cpp runner's slots hold between requests: tokens, checkpoints, saved states, pool cells.

A mixin of :class:`~missive_llamacpp.runner.LlamaCppRunner`: the
:class:`~missive.api.ContextStates` and :class:`~missive.api.SharedPool`
sides of the runner, on its slots (one llama.cpp ``seq_id`` each).

* **reuse** (:meth:`SlotStates.reusable_in`, :meth:`~SlotStates.reusable_from`):
  :func:`~missive_llamacpp.checkpoints.plan_reuse` on the slot's tokens, its
  checkpoints and, for a sliding-window model, the first position its
  window still holds; an image is reused whole or not at all; nothing of a
  state computed through another adapter set than the prompt's
  (``Prompt.variant``: a slot and a saved state remember theirs; its keys
  and values are other numbers), nor of a state computed for a prompt of
  another cache scope (``Prompt.cache_scope``: another API key's prompt,
  docs/operations.md#prompt-cache-scopes);
* **cut** (:meth:`SlotStates.cut`, in ``begin``): restore the checkpoint
  the plan names (its partial state), then ``llama_memory_seq_rm`` after
  the reused prefix, and forget the checkpoints beyond it;
* **context states**: the slot's whole state (``llama_state_seq_get_data``,
  every layer), with its checkpoints, saved to and restored from host
  memory, into any slot;
* **pool**: with a unified KV pool, the cells each slot holds (one a token)
  and the cells a step may add, so the engine keeps steps within the pool.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import llama_cpp

from missive.api import ApiError, Prompt, SavedContext, Sequence

from .checkpoints import Checkpoint, Cut, plan_reuse, restore

if TYPE_CHECKING:
    from .context import Layout

__all__ = ["Slot", "SlotStates"]


@dataclass
class Slot:
    """One slot: the token ids its KV cache holds (positions ``0 ..
    len(tokens) - 1``), its checkpoints (ascending), and the first position
    its window layers hold (-1: none; sliding-window models). Changed in
    place in the model's thread only, read (copied) from any thread."""

    tokens: list[int] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    pos_min: int = -1
    variant: Hashable | None = None  # the adapter set its tokens were decoded through
    cache_scope: Hashable | None = None  # the cache scope (Prompt.cache_scope) of the prompt they came from

    def clear(self) -> None:
        self.tokens.clear()
        self.checkpoints = []
        self.pos_min = -1


@dataclass(frozen=True)
class _State:
    """A slot's saved state (``SavedContext.state``)."""

    data: Any
    size: int
    checkpoints: tuple[Checkpoint, ...]
    pos_min: int
    variant: Hashable | None = None  # the adapter set (Prompt.variant) it was computed through


class SlotStates:
    """The slots' side of the runner (module documentation). The runner sets
    the attributes below when it loads."""

    _slots: list[Slot]
    _ctx: Any
    _memory: Any
    _layout: Layout | None
    _n_batch: int

    def _loaded(self) -> Any: ...

    def _draft_cap(self, seq: Sequence) -> int:
        """Tokens ``seq`` may draft in its next step (the runner's speculative decoding)."""
        return 0

    @property
    def _cut(self) -> Cut:
        return self._layout.cut if self._layout is not None else "any"

    # -- reuse -------------------------------------------------------------

    def _plan(
        self,
        prompt: Prompt,
        tokens: list[int],
        checkpoints: list[Checkpoint] | tuple[Checkpoint, ...],
        pos_min: int,
        variant: Hashable | None,
        cache_scope: Hashable | None,
    ) -> tuple[int, Checkpoint | None]:
        if variant != prompt.variant:
            return 0, None  # computed through other adapters: other keys and values
        if cache_scope != prompt.cache_scope:
            return 0, None  # another key's prompt: never served to this one
        layout = self._layout
        return plan_reuse(
            tokens,
            prompt.tokens,
            cut=self._cut,
            n_swa=layout.n_swa if layout is not None else 0,
            pos_min=pos_min,
            checkpoints=checkpoints,
            clip=prompt.media.image_start if prompt.media is not None else None,
        )

    def reusable(self, prompt: Prompt) -> int:
        """The most any slot would serve (:meth:`reusable_in`)."""
        self._loaded()
        return max(self.reusable_in(prompt, slot) for slot in range(len(self._slots)))

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        """Prompt tokens slot ``slot`` would serve (module documentation)."""
        s = self._slots[slot]
        return self._plan(prompt, list(s.tokens), list(s.checkpoints), s.pos_min, s.variant, s.cache_scope)[0]

    def context_tokens(self, slot: int) -> list[int]:
        return list(self._slots[slot].tokens)

    def reusable_from(self, prompt: Prompt, saved: SavedContext) -> int:
        """Reuse from ``saved`` restored into a slot (its checkpoints included)."""
        state: _State = saved.state
        return self._plan(
            prompt, saved.tokens, state.checkpoints, state.pos_min, state.variant, saved.cache_scope
        )[0]

    def cut(self, seq: Sequence) -> int:
        """Keep slot ``seq.slot``'s reusable prefix of ``seq.prompt`` and drop
        the rest (restoring a checkpoint first when the plan names one);
        the tokens kept (model thread)."""
        s = self._slots[seq.slot]
        reuse, checkpoint = self._plan(
            seq.prompt, s.tokens, s.checkpoints, s.pos_min, s.variant, s.cache_scope
        )
        if checkpoint is not None:
            if not restore(self._ctx.ctx, seq.slot, checkpoint):
                reuse = 0
        if reuse < len(s.tokens):
            if reuse == 0 or not llama_cpp.llama_memory_seq_rm(self._memory, seq.slot, reuse, -1):
                llama_cpp.llama_memory_seq_rm(self._memory, seq.slot, -1, -1)
                reuse = 0
            del s.tokens[reuse:]
        s.checkpoints = [c for c in s.checkpoints if c.n_tokens <= reuse]
        s.variant = seq.prompt.variant
        s.cache_scope = seq.prompt.cache_scope
        self._note_pos_min(seq.slot)
        return reuse

    def _note_pos_min(self, slot: int) -> None:
        """Record the first position slot ``slot``'s window layers hold (model thread)."""
        if self._cut == "window":
            self._slots[slot].pos_min = int(llama_cpp.llama_memory_seq_pos_min(self._memory, slot))

    # -- context states ----------------------------------------------------

    def save_context(self, slot: int) -> SavedContext | None:
        """Slot ``slot``'s whole state (``llama_state_seq_get_data``: the
        tokens' keys and values, about 23 KB a token for SmolLM2-135M at
        f16; the recurrent state) with its checkpoints, or None when empty."""
        self._loaded()
        s = self._slots[slot]
        tokens = list(s.tokens)
        if not tokens:
            return None
        ctx = self._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, slot))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(ctx, buffer, size, slot))
        if written == 0:
            return None
        checkpoints = tuple(s.checkpoints)
        nbytes = size + sum(c.size for c in checkpoints)
        pos_min = s.pos_min
        if self._cut == "window" and self._layout is not None:
            # A saved state keeps only the window's cells (measured: a state of
            # 511 tokens with n_swa 128 comes back holding positions 384..510).
            pos_min = max(pos_min, len(tokens) - self._layout.n_swa + 1)
        return SavedContext(
            tokens, _State(buffer, written, checkpoints, pos_min, s.variant), nbytes, s.variant, s.cache_scope
        )

    def restore_context(self, saved: SavedContext, slot: int) -> None:
        """Put ``saved`` into slot ``slot`` (any slot: the state carries
        positions, not the slot it came from).

        Raises:
            ApiError: llama.cpp refused the state (the slot is then empty).
        """
        self._loaded()
        state: _State = saved.state
        s = self._slots[slot]
        self.clear_slot(slot)
        if int(llama_cpp.llama_state_seq_set_data(self._ctx.ctx, state.data, state.size, slot)) == 0:
            llama_cpp.llama_memory_seq_rm(self._memory, slot, -1, -1)
            raise ApiError("llama.cpp could not restore a saved prompt state")
        s.tokens.extend(saved.tokens)
        s.checkpoints = list(state.checkpoints)
        s.variant = state.variant
        s.cache_scope = saved.cache_scope
        self._note_pos_min(slot)

    # -- the shared KV pool ------------------------------------------------

    def pool_free(self) -> int:
        """Cells no slot holds (one a token, image positions included)."""
        layout = self._layout
        total = layout.n_ctx if layout is not None else 0
        return total - sum(len(s.tokens) for s in self._slots)

    def pool_need(self, seqs: list[Sequence]) -> int:
        """At most ``n_batch`` tokens a step (drafts included), or a whole image when one is next."""
        pending = 0
        images = 0
        for seq in seqs:
            state = seq.state
            if state is None:
                continue
            pending += len(state.pending) + self._draft_cap(seq)
            media = seq.prompt.media
            span = media.span_at(len(self._slots[seq.slot].tokens)) if media is not None else None
            if span is not None:
                images += span.n_tokens
        return min(self._n_batch, pending) + images

    def held(self, slot: int) -> int:
        return len(self._slots[slot].tokens)

    def clear_slot(self, slot: int) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, slot, -1, -1)
        self._slots[slot].clear()
