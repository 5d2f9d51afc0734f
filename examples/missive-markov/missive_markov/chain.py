"""The toy model the backend serves: a word bigram chain over a corpus.

Tokens are whitespace-separated words (:func:`tokens`), so a prompt's size
is its word count. The chain maps each word, compared lower-cased without
surrounding punctuation (:func:`key`), to the words that follow it in the
corpus and how often; each line of the corpus is a sentence, whose last word
is followed by the end marker. Generation starts after the last word of the
prompt the chain knows (the start of a sentence if none) and picks each
next word from the successors of the previous one: the most frequent at
temperature 0 (ties: the first seen), otherwise at random with weights
``count ** (1 / temperature)``, among the ``top_k`` most frequent if given;
a pair of words already written in this answer is avoided while the
previous word has other successors (a repetition penalty: without it the
most frequent pairs loop, "the colour of the colour of"). It ends at the
end marker (never before the first word, when the previous word has
another successor) or after ``max_tokens`` words.
"""

from __future__ import annotations

import random
import string
from collections import Counter
from collections.abc import Iterator

__all__ = ["BigramChain", "tokens", "key"]

_START = "\x02"  # keys that no word can have
_END = "\x03"


def tokens(text: str) -> list[str]:
    """The tokens of ``text``: its whitespace-separated words."""
    return text.split()


def key(word: str) -> str:
    """What the chain compares a word by: lower case, outer punctuation removed."""
    return word.lower().strip(string.punctuation)


class BigramChain:
    """Word successors counted over ``corpus`` (one sentence per line)."""

    def __init__(self, corpus: str) -> None:
        self.successors: dict[str, Counter[str]] = {}
        for line in corpus.splitlines():
            previous = _START
            for word in tokens(line):
                self.successors.setdefault(previous, Counter())[word] += 1
                previous = key(word)
            if previous != _START:
                self.successors.setdefault(previous, Counter())[_END] += 1
        if _START not in self.successors:
            raise ValueError("the corpus has no words")

    @property
    def vocabulary(self) -> int:
        """Distinct words (by :func:`key`) the chain can continue from."""
        return len(self.successors) - 1

    def state_after(self, prompt: str) -> str:
        """The key generation continues from: the prompt's last known word."""
        for word in reversed(tokens(prompt)):
            if key(word) in self.successors:
                return key(word)
        return _START

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        rng: random.Random | None = None,
    ) -> Iterator[str]:
        """The words that follow ``prompt``, one by one (at most ``max_tokens``).

        Raises:
            ValueError: a negative temperature or a ``top_k`` below 1.
        """
        if temperature < 0 or (top_k is not None and top_k < 1):
            raise ValueError("temperature must be >= 0 and top_k >= 1")
        rng = rng or random.Random()
        state = self.state_after(prompt)
        used: set[tuple[str, str]] = set()
        for _ in range(max_tokens):
            ranked = self.successors.get(state, self.successors[_START]).most_common(top_k)
            fresh = [(w, c) for w, c in ranked if (state, w) not in used and (used or w != _END)]
            ranked = fresh or ranked
            if temperature == 0:
                word = ranked[0][0]
            else:
                word = rng.choices([w for w, _ in ranked], [c ** (1 / temperature) for _, c in ranked])[0]
            if word == _END:
                return
            yield word
            used.add((state, word))
            state = key(word)
