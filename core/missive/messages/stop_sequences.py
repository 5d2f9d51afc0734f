"""Exact stop sequence matching on streamed text, with hold-back.

While streaming, any tail of the text that could still become a stop sequence
is held back until it is ruled out, so not even the first characters of a stop
sequence leak (contract section 4). The match itself is excluded from the text
and reported as ``stop_sequence`` (API behaviour).
"""

from __future__ import annotations

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feed text pieces; get back what is safe to emit, and the match if any.

    >>> m = StopMatcher(["END"])
    >>> m.feed("abc E")
    ('abc ', None)
    >>> m.feed("ND more")
    ('', 'END')
    """

    def __init__(self, sequences: tuple[str, ...] | list[str]) -> None:
        self.sequences = tuple(s for s in sequences if s)
        self._held = ""
        self._longest = max((len(s) for s in self.sequences), default=0)

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add ``text``; return ``(safe_text, matched_sequence_or_None)``.

        After a match, ``safe_text`` is everything before the earliest match
        and the caller must stop generation.
        """
        if not self.sequences:
            return text, None
        buffer = self._held + text
        best: tuple[int, str] | None = None
        for seq in self.sequences:
            pos = buffer.find(seq)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, seq)
        if best is not None:
            self._held = ""
            return buffer[: best[0]], best[1]
        keep = self._partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], None

    def flush(self) -> str:
        """Release held text at the end of generation (it matched nothing)."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix(self, buffer: str) -> int:
        """Length of the longest buffer suffix that is a proper prefix of a sequence."""
        for size in range(min(len(buffer), self._longest - 1), 0, -1):
            tail = buffer[-size:]
            if any(seq.startswith(tail) for seq in self.sequences):
                return size
        return 0
