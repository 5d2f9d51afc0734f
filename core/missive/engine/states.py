"""What a runner keeps between requests, for the engine's caches: saved contexts, a shared KV pool.

Part of the runner's interface (:mod:`missive.engine.runner`, which
re-exports these): a runner that can save and restore its context implements
:class:`ContextStates` (the host-memory prompt cache,
:mod:`missive.engine.host_cache`), one whose saved states can be written to
files :class:`PortableStates` (its disk tier, :mod:`missive.engine.disk_cache`),
one whose slots share one pool of KV cells :class:`SharedPool`
(:mod:`missive.engine.batcher` keeps every step within it).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .sequences import same_cache

if TYPE_CHECKING:
    from .sequences import Prompt, Sequence

__all__ = ["ContextStates", "PortableStates", "SavedContext", "SharedPool"]


@dataclass
class SavedContext:
    """A context state saved to host memory (:mod:`missive.engine.host_cache`).

    Attributes:
        tokens: the token ids (context positions) it holds.
        state: the runner's copy of the KV cache for them (opaque to the engine).
        nbytes: its size in host memory, in bytes.
        variant: the ``Prompt.variant`` it was computed through: the caches
            offer it only to prompts of the same variant.
        cache_scope: the ``Prompt.cache_scope`` of the prompt it was
            computed for: the caches offer it only to prompts of the same
            scope (set by the runner that saves it, kept by the disk tier).
    """

    tokens: list[int]
    state: Any
    nbytes: int
    variant: Hashable | None = None
    cache_scope: Hashable | None = None

    def serves(self, prompt_variant: Hashable | None, prompt_scope: Hashable | None) -> bool:
        """Whether it may serve a prompt of this variant and scope (:func:`~.sequences.same_cache`)."""
        return same_cache(self.variant, self.cache_scope, prompt_variant, prompt_scope)


@runtime_checkable
class ContextStates(Protocol):
    """A runner whose live context can be saved to host memory and put back
    (llama.cpp's per-sequence state). The engine keeps a host-memory prompt
    cache for such runners (:mod:`missive.engine.host_cache`)."""

    def context_tokens(self, slot: int) -> list[int]:
        """The token ids slot ``slot`` of the live context holds now (any
        thread; a copy)."""

    def reusable_from(self, prompt: Prompt, saved: SavedContext) -> int:
        """Prompt tokens :meth:`Runner.begin` would take from a context
        restored from ``saved`` (the backend's reuse rules: stale logits,
        whole images, the positions its state can be cut at). Any thread."""

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        """Prompt tokens :meth:`Runner.begin` would take from slot ``slot``
        now (how the engine chooses a slot). Any thread."""

    def save_context(self, slot: int) -> SavedContext | None:
        """A copy of slot ``slot``'s state, None when it holds nothing
        (model thread)."""

    def restore_context(self, saved: SavedContext, slot: int) -> None:
        """Replace slot ``slot``'s state with ``saved`` (model thread).

        Raises:
            ApiError: the backend refused the state.
        """


@runtime_checkable
class PortableStates(Protocol):
    """A :class:`ContextStates` runner whose saved states can be written to
    files and read back (the prompt cache's disk tier,
    :mod:`missive.engine.disk_cache`). Any thread: a saved state is not
    changed once saved."""

    def state_key(self) -> str:
        """A digest of everything a saved state's bytes depend on (the model
        file, the backend's build, the settings that change the KV layout):
        a state is only ever restored into a model of the same key."""

    def state_bytes(self, saved: SavedContext) -> tuple[bytes, list[Any]]:
        """``saved`` as ``(info, parts)``: a small description (what
        :meth:`ContextStates.reusable_from` needs) and the state's buffers,
        written one after the other."""

    def state_from_bytes(self, tokens: list[int], info: bytes, payload: memoryview | None) -> SavedContext:
        """The state :meth:`state_bytes` wrote, from ``info`` and the parts
        read back as one writable ``payload``; with ``payload`` None, a
        state that only plans reuse (it cannot be restored).

        Raises:
            ValueError: ``info`` or ``payload`` do not describe a state.
        """


@runtime_checkable
class SharedPool(Protocol):
    """A :class:`Batched` runner whose slots share one pool of KV cells
    (llama.cpp's unified KV cache), smaller than ``slots x context_window``.

    The engine keeps every step within the pool (:mod:`missive.engine.batcher`):
    before a step it empties idle slots (least recently used first, saved to
    the host-memory cache), then pauses the newest running sequences (their
    state saved, resumed when cells are free again), so a decode never fails
    for lack of room. Model thread, except :meth:`held`.
    """

    def pool_free(self) -> int:
        """Cells of the pool no slot holds now."""

    def pool_need(self, seqs: list[Sequence]) -> int:
        """The most cells one :meth:`Batched.step_many` of ``seqs`` may add."""

    def held(self, slot: int) -> int:
        """Cells slot ``slot`` holds now (any thread)."""

    def clear_slot(self, slot: int) -> None:
        """Empty slot ``slot`` (its cells go back to the pool)."""
