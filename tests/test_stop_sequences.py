"""Stop sequence hold-back, unit level (the live behaviour is in test_stream_grammar)."""

from __future__ import annotations

import pytest

from missive.messages.stop_sequences import StopMatcher


def run(sequences: list[str], pieces: list[str]) -> tuple[str, str | None]:
    matcher = StopMatcher(sequences)
    out = []
    for piece in pieces:
        safe, matched = matcher.feed(piece)
        out.append(safe)
        if matched:
            return "".join(out), matched
    return "".join(out) + matcher.flush(), None


@pytest.mark.parametrize(
    ("sequences", "pieces", "expected"),
    [
        (["END"], ["abc", "E", "N", "D", "x"], ("abc", "END")),
        (["END"], ["abcEN"], ("abcEN", None)),
        (["END"], ["xENDy"], ("x", "END")),
        (["\n\nHuman:", "STOP"], ["a\n", "\nHu", "man: b"], ("a", "\n\nHuman:")),
        (["ab", "b"], ["xab"], ("x", "ab")),  # earliest match wins
        (["aab"], ["a", "a", "a", "b"], ("a", "aab")),
        (["é!"], ["caf", "é", "!"], ("caf", "é!")),
        ([], ["free", " text"], ("free text", None)),
    ],
)
def test_matching(sequences: list[str], pieces: list[str], expected: tuple[str, str | None]) -> None:
    assert run(sequences, pieces) == expected


def test_nothing_leaks_before_ruled_out() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("go ST") == ("go ", None)
    assert matcher.feed("O") == ("", None)
    assert matcher.feed("RM") == ("STORM", None)
