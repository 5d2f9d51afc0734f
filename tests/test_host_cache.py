"""The engine's host-memory prompt cache, on a scripted runner (no model):
LRU by bytes and count, superseded prefixes dropped, the best prefix chosen,
and the swap before a sequence saves and restores as it should."""

from __future__ import annotations

from typing import Any

from missive.engine.host_cache import MIN_SAVED_TOKENS, HostPromptCache, common_prefix, reusable, swap_in
from missive.engine.runner import ContextStates, Prompt, SavedContext


def saved(tokens: list[int], nbytes: int = 10) -> SavedContext:
    return SavedContext(list(tokens), object(), nbytes)


def test_best_prefix_and_lru_by_bytes() -> None:
    cache = HostPromptCache(max_bytes=25)
    a, b = saved([1, 2, 3, 4]), saved([1, 2, 9])
    assert cache.put(a) and cache.put(b)
    assert cache.best([1, 2, 3, 7]) == (a, 3)
    assert cache.best([5]) == (None, 0)
    cache.touch(a)  # b is now the least recently used
    assert cache.put(saved([7, 7]))
    assert len(cache) == 2 and cache.nbytes == 20
    assert cache.best([1, 2, 9])[0] is not b
    assert not cache.put(saved([8], nbytes=26))  # larger than the whole cache


def test_a_state_that_a_newer_one_extends_is_dropped() -> None:
    cache = HostPromptCache(max_bytes=100)
    cache.put(saved([1, 2]))
    cache.put(saved([1, 2, 3]))
    cache.put(saved([1, 5]))
    assert len(cache) == 2 and cache.best([1, 2])[1] == 2


def test_entry_count_is_bounded() -> None:
    cache = HostPromptCache(max_bytes=10**9, max_entries=3)
    for i in range(5):
        cache.put(saved([i, i]))
    assert len(cache) == 3 and cache.best([0, 0]) == (None, 0) and cache.best([4, 4])[1] == 2


class Runner:
    """One slot of token ids; reuse as llama.cpp's runner counts it (a
    restored state gives its last token back)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.restored: list[list[int]] = []

    def reusable(self, prompt: Prompt) -> int:
        return common_prefix(self.tokens, prompt.tokens)

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        assert slot == 0
        return self.reusable(prompt)

    def context_tokens(self, slot: int) -> list[int]:
        assert slot == 0
        return list(self.tokens)

    def reusable_from(self, prompt: Prompt, saved: SavedContext) -> int:
        n = common_prefix(saved.tokens, prompt.tokens)
        return n - 1 if n == len(prompt.tokens) else n

    def save_context(self, slot: int) -> SavedContext | None:
        return saved(self.tokens) if self.tokens else None

    def restore_context(self, state: SavedContext, slot: int) -> None:
        self.tokens = list(state.tokens)
        self.restored.append(list(state.tokens))


def test_swap_saves_what_would_be_lost_and_restores_the_best() -> None:
    main = list(range(100, 100 + 2 * MIN_SAVED_TOKENS))
    side = [1, 2, 3]
    runner, cache = Runner(main), HostPromptCache(max_bytes=10**6)
    assert isinstance(runner, ContextStates)
    # A side prompt takes the context: the main one is saved first.
    assert swap_in(runner, cache, Prompt(side)) == 0 and len(cache) == 1 and runner.restored == []
    runner.tokens = side
    # The main conversation's next turn: its state is restored.
    turn = Prompt([*main, 5, 6])
    assert reusable(runner, cache, turn) == len(main)  # what Started reports
    assert swap_in(runner, cache, turn) == len(main) and runner.restored == [main]
    # A short context that would lose fewer than MIN_SAVED_TOKENS is not saved.
    runner.tokens = [9] * (MIN_SAVED_TOKENS - 1)
    swap_in(runner, cache, Prompt([8]))
    assert len(cache) == 1


def test_no_cache_reports_the_live_context_only() -> None:
    runner: Any = Runner([1, 2, 3])
    assert reusable(runner, None, Prompt([1, 2, 4])) == 2


def test_a_state_of_another_variant_is_neither_offered_nor_superseded() -> None:
    """``Prompt.variant`` (another model entry's LoRA adapters on the same
    load): the same tokens through other adapters are other keys and values."""
    cache = HostPromptCache(max_bytes=100)
    own, other = SavedContext([1, 2, 3], object(), 10), SavedContext([1, 2, 3, 4, 5], object(), 10, "style")
    assert cache.put(own) and cache.put(other)
    assert len(cache) == 2  # the longer state of another variant does not drop this one
    assert cache.best([1, 2, 3, 4, 5, 6]) == (own, 3)  # not the longer one of "style"
    assert cache.best([1, 2, 3, 4, 5, 6], variant="style") == (other, 5)
    assert cache.best([1, 2, 3], variant="tone") == (None, 0)
    assert cache.put(SavedContext([1, 2, 3, 4, 5, 6], object(), 10, "style")) and len(cache) == 2


def test_a_state_of_another_cache_scope_is_neither_offered_nor_superseded() -> None:
    """``Prompt.cache_scope`` (the request's API key, docs/operations.md#prompt-cache-scopes):
    the same tokens sent with another key read nothing of the first key's
    state, and its own longer state does not drop the other key's."""
    cache = HostPromptCache(max_bytes=100)
    alice = SavedContext([1, 2, 3, 4], object(), 10, cache_scope="key:alice")
    assert cache.put(alice)
    assert cache.best([1, 2, 3, 4, 5], cache_scope="key:bob") == (None, 0)
    assert cache.best([1, 2, 3, 4, 5]) == (None, 0)  # nor to the open server's scope
    assert cache.best([1, 2, 3, 4, 5], cache_scope="key:alice") == (alice, 4)
    bob = SavedContext([1, 2, 3, 4, 5, 6], object(), 10, cache_scope="key:bob")
    assert cache.put(bob) and len(cache) == 2  # alice's shorter state is kept
    assert cache.best([1, 2, 3, 4, 5, 6], cache_scope="key:alice") == (alice, 4)


def test_swap_in_restores_only_a_state_of_the_prompt_s_scope() -> None:
    """Through :func:`swap_in` and :func:`reusable` (``cache_read_input_tokens``):
    bob's prompt, the tokens alice's left in the cache, reads none of them;
    alice's own repeat reads them back."""
    main = list(range(100, 100 + 2 * MIN_SAVED_TOKENS))
    runner, cache = Runner([]), HostPromptCache(max_bytes=10**6)
    cache.put(SavedContext(list(main), object(), 10, cache_scope="key:alice"))
    bob = Prompt(main + [1]).with_scope("key:bob")
    alice = Prompt(main + [1]).with_scope("key:alice")
    assert reusable(runner, cache, bob) == 0
    assert swap_in(runner, cache, bob) == 0 and runner.restored == []
    assert reusable(runner, cache, alice) == len(main)
    assert swap_in(runner, cache, alice) == len(main) and runner.restored == [main]


def test_the_scope_survives_another_variant() -> None:
    """``with_variant`` keeps the prompt's scope (a LoRA entry's prompt of bob's key is still bob's)."""
    prompt = Prompt([1, 2]).with_scope("key:bob").with_variant("style")
    assert prompt.cache_scope == "key:bob" and prompt.variant == "style"


class ScopedRunner(Runner):
    """The scripted slot, remembering the scope of the prompt its tokens came
    from (as the llama.cpp runner's slots do): reuse only within it."""

    def __init__(self, tokens: list[int], scope: str | None = None) -> None:
        super().__init__(tokens)
        self.scope = scope

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        return super().reusable_in(prompt, slot) if prompt.cache_scope == self.scope else 0

    def save_context(self, slot: int) -> SavedContext | None:
        state = super().save_context(slot)
        if state is not None:
            state.cache_scope = self.scope
        return state

    def restore_context(self, state: SavedContext, slot: int) -> None:
        super().restore_context(state, slot)
        self.scope = state.cache_scope


def test_a_slot_of_another_scope_holding_the_cached_tokens_is_saved_too() -> None:
    """Bob's slot holds the very tokens of alice's cached state: it is no
    copy of it (another key's), so alice's restore first saves bob's, and
    bob's next request reads his own back."""
    main = list(range(100, 100 + 2 * MIN_SAVED_TOKENS))
    runner, cache = ScopedRunner(list(main), "key:bob"), HostPromptCache(max_bytes=10**6)
    cache.put(SavedContext(list(main), object(), 10, cache_scope="key:alice"))
    assert swap_in(runner, cache, Prompt(main + [1]).with_scope("key:alice")) == len(main)
    assert runner.scope == "key:alice" and len(cache) == 2
    assert swap_in(runner, cache, Prompt(main + [1]).with_scope("key:bob")) == len(main)
    assert runner.scope == "key:bob"
