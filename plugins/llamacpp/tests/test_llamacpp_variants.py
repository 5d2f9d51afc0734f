"""Step grouping by adapter set (:mod:`missive_llamacpp.variants`): which
sequences one ``llama_decode`` takes when the running ones use different
LoRA adapter sets, and the fairness between the sets (round robin), without
a model: the sets' adapters are empty, the context a stand-in that only
records what was set on it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from missive_llamacpp.lora import Adapters
from missive_llamacpp.variants import Variants, next_group

A = (("/a.gguf", 1, 2, 1.0),)
B = (("/b.gguf", 1, 2, 0.5),)


def test_the_next_group_follows_the_last_in_a_fixed_order() -> None:
    assert next_group([A, None], None, stepped=False) is None  # the model's own set first
    assert next_group([A, None], None, stepped=True) == A
    assert next_group([A, None], A, stepped=True) is None  # wraps around
    assert next_group([B, A], A, stepped=True) == B
    assert next_group([B, A, None], B, stepped=True) is None
    assert next_group([A], A, stepped=True) == A  # alone: every step
    assert next_group([B], A, stepped=True) == B  # the last one's sequences ended
    with pytest.raises(ValueError):
        next_group([], None, stepped=False)


@pytest.mark.parametrize("groups", [[None, A], [None, A, B], [A, B, A, None, None]])
def test_each_set_gets_its_share_of_steps(groups: list[Any]) -> None:
    variants = Variants()
    sets = set(groups)
    steps = Counter(variants.choose(groups) for _ in range(30 * len(sets)))
    assert steps == Counter({group: 30 for group in sets})  # equal shares, whatever the sequences per set
    # Never the same set twice in a row while another waits.
    chosen = [variants.choose(groups) for _ in range(12)]
    assert all(a != b for a, b in zip(chosen, chosen[1:], strict=False))
    assert variants.split_steps == 30 * len(sets) + 12


def test_a_set_is_switched_on_the_context_only_when_the_group_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_on: list[tuple[Any, int]] = []

    def set_adapters(ctx: Any, handles: Any, n: int, scales: Any) -> int:
        set_on.append((ctx, n))
        return 0

    import llama_cpp

    monkeypatch.setattr(llama_cpp, "llama_set_adapters_lora", set_adapters)
    variants = Variants()
    variants.add(A, Adapters())
    ctx = object()
    variants.switch(ctx, None)  # the model's own set is on the context since load
    assert set_on == [] and variants.switches == 0
    variants.switch(ctx, A)
    variants.switch(ctx, A)
    variants.switch(ctx, None)
    assert set_on == [(ctx, 0), (ctx, 0)] and variants.switches == 2
    from missive.api import ApiError

    with pytest.raises(ApiError, match="LoRA adapters this model has not loaded"):
        variants.switch(ctx, B)
    assert variants.split_steps == 0
