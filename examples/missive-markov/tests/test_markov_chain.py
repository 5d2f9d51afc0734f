"""The toy model on its own: tokens, the greedy rules, seeded sampling."""

from __future__ import annotations

import random

import pytest

from missive_markov.chain import BigramChain, key, tokens


def test_tokens_are_words_and_keys_ignore_case_and_punctuation() -> None:
    assert tokens(" a  b\nc. ") == ["a", "b", "c."]
    assert key("Sea,") == key("sea") == "sea"


def test_greedy_takes_the_most_frequent_successor_and_never_repeats_a_pair() -> None:
    chain = BigramChain("a b a c\nx b")  # a: b, c (tie: b seen first); b: a, END; c: END
    assert list(chain.generate("a", 10, temperature=0)) == ["b", "a", "c"]  # not b a b a b...


def test_the_end_marker_is_never_the_first_word_when_there_is_another() -> None:
    chain = BigramChain("grey and blue\nsky is grey\nsea is grey")  # grey: END twice, "and" once
    assert list(chain.generate("grey", 2, temperature=0)) == ["and", "blue"]
    assert list(chain.generate("blue", 5, temperature=0)) == []  # blue: only the end


def test_generation_starts_after_the_last_known_word() -> None:
    chain = BigramChain("one two three\nfour five")
    assert list(chain.generate("four, then zzz", 1, temperature=0)) == ["five"]
    assert list(chain.generate("nothing known", 1, temperature=0)) == ["one"]  # a sentence's start


def test_sampling_is_reproducible_with_a_seed_and_bounded_by_top_k() -> None:
    chain = BigramChain("a b a c a d a e a b")  # a: b twice, c, d, e once
    runs = {tuple(chain.generate("a", 12, temperature=2.0, rng=random.Random(3))) for _ in range(3)}
    assert len(runs) == 1
    seeds = {tuple(chain.generate("a", 12, temperature=2.0, rng=random.Random(seed))) for seed in range(8)}
    assert len(seeds) > 1
    assert {
        next(chain.generate("a", 1, temperature=5.0, top_k=1, rng=random.Random(s))) for s in range(8)
    } == {"b"}
    with pytest.raises(ValueError):
        list(chain.generate("a", 1, top_k=0))
