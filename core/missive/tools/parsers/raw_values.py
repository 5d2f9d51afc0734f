"""The text a raw string value may hold in a forced call.

Formats that write string arguments as raw text between tags (Qwen3-Coder's
``<parameter=K>``, GLM's ``<arg_value>``, DSML, Kimi-K3's XTML, Gemma 4's
``<|"|>`` quotes) have no escaping: their templates write a value as it is.
A value may hold ``<``, ``</parameter>`` or ``]]>``; the parsers read such a
value back whole, because a closing tag ends a value only where the
format's next element follows it (:attr:`~missive.tools.parsers.blocks.BlockParser.FOLLOWERS`,
:meth:`~missive.tools.parsers.xml._ParameterParser._value_end`). What a
value must not hold is only what the parser would read as the end of the
value or call: each parser lists those sequences
(:meth:`~missive.driver.parsing.ToolParser.value_forbids`), and
:class:`RawValueLanguage` is the set of strings holding none of them, as a
deterministic automaton that a grammar backend writes as rules (the
llama.cpp driver's GBNF).

A forbidden sequence is a tuple of literal parts; between two parts any
run of whitespace (``[ \\t\\r\\n]*``) may stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RawValueLanguage", "WHITESPACE"]

WHITESPACE = " \t\r\n"
_W = object()  # a whitespace run in a pattern


@dataclass(frozen=True)
class RawValueLanguage:
    """Strings holding none of ``forbidden`` (module doc), as a DFA.

    Attributes:
        alphabet: the characters the automaton tells apart; every other
            character (NUL excepted: never allowed) moves as :data:`OTHER`.
        transitions: state -> {character or "" for any other character ->
            next state}; a missing entry is a forbidden move. State 0 is
            the start; every state accepts (a value may end anywhere).
    """

    forbidden: tuple[tuple[str, ...], ...]
    alphabet: frozenset[str]
    transitions: tuple[dict[str, int], ...]

    @classmethod
    def build(cls, forbidden: Sequence[Sequence[str]]) -> RawValueLanguage:
        patterns: list[list[object]] = []
        for parts in forbidden:
            tokens: list[object] = []
            for k, part in enumerate(parts):
                if k:
                    tokens.append(_W)
                tokens += list(part)
            if tokens:
                patterns.append(tokens)
        alphabet = frozenset(c for p in patterns for c in p if isinstance(c, str)) | (
            frozenset(WHITESPACE) if any(_W in p for p in patterns) else frozenset()
        )

        def closure(states: set[tuple[int, int]]) -> frozenset[tuple[int, int]] | None:
            todo = list(states | {(i, 0) for i in range(len(patterns))})
            seen: set[tuple[int, int]] = set()
            while todo:
                i, j = todo.pop()
                if (i, j) in seen:
                    continue
                if j == len(patterns[i]):
                    return None  # a forbidden sequence is complete
                seen.add((i, j))
                if patterns[i][j] is _W:
                    todo.append((i, j + 1))
            return frozenset(seen)

        def step(states: frozenset[tuple[int, int]], ch: str | None) -> frozenset[tuple[int, int]] | None:
            """``ch`` None: a character outside the alphabet."""
            nxt: set[tuple[int, int]] = set()
            for i, j in states:
                tok = patterns[i][j]
                if tok is _W:
                    if ch is not None and ch in WHITESPACE:
                        nxt.add((i, j))
                elif ch is not None and tok == ch:
                    nxt.add((i, j + 1))
            return closure(nxt)

        start = closure(set())
        assert start is not None
        index = {start: 0}
        order = [start]
        transitions: list[dict[str, int]] = []
        while len(transitions) < len(order):
            current = order[len(transitions)]
            moves: dict[str, int] = {}
            for ch in [*sorted(alphabet), None]:
                nxt = step(current, ch)
                if nxt is None:
                    continue
                if nxt not in index:
                    index[nxt] = len(order)
                    order.append(nxt)
                moves["" if ch is None else ch] = index[nxt]
            transitions.append(moves)
        return cls(tuple(tuple(p) for p in forbidden), alphabet, tuple(transitions))

    def accepts(self, text: str) -> bool:
        """Whether ``text`` holds none of the forbidden sequences (and no NUL)."""
        state = 0
        for ch in text:
            if ch == "\x00":
                return False
            key = ch if ch in self.alphabet else ""
            if key not in self.transitions[state]:
                return False
            state = self.transitions[state][key]
        return True
