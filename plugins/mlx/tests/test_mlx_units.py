"""The prompt-cache store and the incremental detokenizer, without running the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from missive_mlx.detokenize import IncrementalDetokenizer
from missive_mlx.prompt_cache import PromptCacheStore, common_prefix


class FakeLayerCache:
    """Stands in for an mlx-lm KVCache: ``offset`` tokens, trimmable or not."""

    def __init__(self, offset: int, trimmable: bool = True, name: str = "") -> None:
        self.offset = offset
        self.trimmable = trimmable
        self.name = name  # survives the store's deepcopy: tells which entry was used


def can_trim(cache: list[Any]) -> bool:
    return all(c.trimmable for c in cache)


def trim(cache: list[Any], n: int) -> int:
    n = min(n, cache[0].offset)
    for c in cache:
        c.offset -= n
    return n


def store(capacity: int = 4) -> PromptCacheStore:
    return PromptCacheStore(capacity, can_trim=can_trim, trim=trim)


def put(s: PromptCacheStore, tokens: list[int], trimmable: bool = True) -> list[Any]:
    cache = [FakeLayerCache(len(tokens), trimmable, name=str(tokens))]
    s.put(tokens, cache)
    return cache


def fresh() -> list[Any]:
    return [FakeLayerCache(0)]


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


def test_empty_store_gives_a_fresh_cache() -> None:
    s = store()
    assert s.reusable([1, 2, 3]) == 0
    cache, n = s.take([1, 2, 3], fresh)
    assert n == 0 and cache[0].offset == 0


def test_prefix_entry_is_taken_out_and_extended_in_place() -> None:
    s = store()
    cache = put(s, [1, 2, 3])
    assert s.reusable([1, 2, 3, 4, 5]) == 3
    taken, n = s.take([1, 2, 3, 4, 5], fresh)
    assert taken is cache and n == 3 and len(s) == 0


def test_at_least_one_prompt_token_is_left_to_evaluate() -> None:
    s = store()
    original = put(s, [1, 2, 3])
    assert s.reusable([1, 2, 3]) == 2
    taken, n = s.take([1, 2, 3], fresh)
    assert n == 2 and taken is not original and taken[0].offset == 2
    assert original[0].offset == 3 and len(s) == 1  # the entry still serves its own prompt


def test_diverging_entry_is_copied_and_trimmed() -> None:
    s = store()
    original = put(s, [1, 2, 3, 4])
    taken, n = s.take([1, 2, 9, 9], fresh)
    assert n == 2 and taken[0].offset == 2 and taken is not original
    assert original[0].offset == 4 and len(s) == 1


def test_longest_common_prefix_wins_then_most_recent() -> None:
    s = store()
    put(s, [1, 2, 7])
    best = put(s, [1, 2, 3, 8])
    put(s, [5, 6])
    assert s.reusable([1, 2, 3, 4, 5]) == 3
    taken, _ = s.take([1, 2, 3, 4, 5], fresh)
    assert taken[0].offset == 3 and best[0].offset == 4
    assert taken[0].name == str([1, 2, 3, 8])
    s2 = store()
    put(s2, [1, 2, 7])
    put(s2, [1, 2, 8])
    taken, n = s2.take([1, 2, 3], fresh)
    assert n == 2 and taken[0].name == str([1, 2, 8])  # the tie goes to the most recent


def test_untrimmable_cache_only_serves_as_a_prefix() -> None:
    s = store()
    put(s, [1, 2, 3, 4], trimmable=False)
    assert s.reusable([1, 2, 9]) == 0
    assert s.reusable([1, 2, 3, 4, 5]) == 4


def test_put_drops_entries_it_extends_and_evicts_least_recent() -> None:
    s = store(capacity=2)
    put(s, [1, 2])
    put(s, [1, 2, 3, 4])  # extends [1, 2]: replaces it
    assert len(s) == 1
    put(s, [7, 8])
    put(s, [9, 9])  # third entry: [1, 2, 3, 4] (least recent) goes
    assert len(s) == 2 and s.reusable([1, 2, 3, 4, 5]) == 0
    assert s.reusable([7, 8, 1]) == 2 and s.reusable([9, 9, 1]) == 2


def test_a_copied_entry_becomes_most_recent() -> None:
    s = store(capacity=2)
    put(s, [1, 2, 3])
    put(s, [7, 8])
    s.take([1, 2, 5], fresh)  # copies [1, 2, 3]: now the most recent
    put(s, [9, 9])  # evicts [7, 8]
    assert s.reusable([1, 2, 3, 4]) == 3 and s.reusable([7, 8, 1]) == 0


def test_capacity_zero_stores_nothing() -> None:
    s = store(capacity=0)
    put(s, [1, 2, 3])
    assert len(s) == 0 and s.reusable([1, 2, 3, 4]) == 0


def test_an_entry_serves_and_is_replaced_by_its_own_cache_scope_only() -> None:
    """``Prompt.cache_scope`` (the request's API key, docs/operations.md#prompt-cache-scopes):
    another key's prompt reads nothing of an entry, even the same tokens,
    and its own entry of them does not replace the other key's."""
    s = store()
    alice = [FakeLayerCache(3, name="alice")]
    s.put([1, 2, 3], alice, scope="key:alice")
    assert s.reusable([1, 2, 3, 4], "key:bob") == 0 and s.reusable([1, 2, 3, 4]) == 0
    cache, n = s.take([1, 2, 3, 4], fresh, "key:bob")
    assert n == 0 and cache[0].name == "" and len(s) == 1
    s.put([1, 2, 3, 4], [FakeLayerCache(4, name="bob")], scope="key:bob")
    assert len(s) == 2  # bob's longer entry does not drop alice's
    assert s.reusable([1, 2, 3, 4, 5], "key:alice") == 3
    taken, n = s.take([1, 2, 3, 4, 5], fresh, "key:alice")
    assert taken is alice and n == 3


@pytest.fixture(scope="module")
def hf_tokenizer(mlx_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(mlx_model_dir))


def pieces_of(tokenizer: Any, text: str, context: str = "") -> tuple[list[str], list[int]]:
    def decode(ids: Any) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))

    tokens = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(decode, tokenizer.encode(context, add_special_tokens=False))
    pieces = [detok.add(t) for t in tokens]
    pieces.append(detok.flush())
    return pieces, tokens


def test_detokenizer_holds_split_characters(hf_tokenizer: Any) -> None:
    text = " héllo 😀 wörld 日本語!"
    pieces, tokens = pieces_of(hf_tokenizer, text, context="<|im_start|>assistant\n")
    assert "".join(pieces) == text == hf_tokenizer.decode(tokens)
    assert not any("\ufffd" in p for p in pieces)
    assert pieces.count("") >= 3  # tokens that complete no character yet


def test_detokenizer_keeps_a_leading_space_and_special_tokens(hf_tokenizer: Any) -> None:
    pieces, _ = pieces_of(hf_tokenizer, " Paris.<|im_end|>")
    assert pieces[0] == " Paris" and "".join(pieces) == " Paris.<|im_end|>"


def test_detokenizer_flushes_an_incomplete_character(hf_tokenizer: Any) -> None:
    def decode(ids: Any) -> str:
        return str(hf_tokenizer.decode(list(ids)))

    first_byte_of_emoji = hf_tokenizer.encode("😀", add_special_tokens=False)[0]
    detok = IncrementalDetokenizer(decode)
    assert detok.add(first_byte_of_emoji) == ""
    assert detok.flush() == "\ufffd"
