"""Incremental, UTF-8-safe detokenization of generated tokens.

Why not mlx-lm's streaming detokenizers: ``BPEStreamingDetokenizer`` and
``SPMStreamingDetokenizer`` (``mlx_lm/tokenizer_utils.py``) drop the leading
space of the first piece of text (``_maybe_trim_space``, ``trim_space``), so
the continuation of a prefilled assistant turn (``"The capital is"`` ->
``" Paris"``) would come out as ``"Paris"``; and the Naive one trims trailing
spaces it later restores. This is the scheme of vLLM's
``detokenize_incrementally`` and Hugging Face TGI's ``decode_token``: decode a
small window of tokens twice, with and without the newest token, and emit the
difference once it no longer ends in U+FFFD (an incomplete UTF-8 sequence).
The window starts on the last prompt tokens, so a tokenizer that strips the
leading space of a whole decoded string (SentencePiece's ``Strip`` decoder)
strips it from the prompt, not from the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["CONTEXT_TOKENS", "IncrementalDetokenizer"]

#: Prompt tokens the first window starts with (vLLM's
#: ``INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET``).
CONTEXT_TOKENS = 5

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """Turns token ids into text pieces, one token at a time.

    Args:
        decode: ids -> text, with special tokens kept and no clean-up of
            spaces (``tokenizer.decode(ids, skip_special_tokens=False,
            clean_up_tokenization_spaces=False)``), so the pieces concatenate
            to the decode of all the generated tokens.
        context: the last prompt tokens (at most :data:`CONTEXT_TOKENS` used).
    """

    def __init__(self, decode: Callable[[Sequence[int]], str], context: Sequence[int] = ()) -> None:
        self._decode = decode
        self._tokens: list[int] = list(context[-CONTEXT_TOKENS:]) if context else []
        self._prefix = 0  # window start
        self._read = len(self._tokens)  # tokens already turned into text

    def add(self, token: int) -> str:
        """Text the token completes ("" while a character is incomplete)."""
        self._tokens.append(token)
        return self._emit(final=False)

    def flush(self) -> str:
        """Text still held back (an incomplete character decodes as U+FFFD)."""
        return self._emit(final=True) if self._read < len(self._tokens) else ""

    def _emit(self, *, final: bool) -> str:
        before = self._decode(self._tokens[self._prefix : self._read])
        after = self._decode(self._tokens[self._prefix :])
        if not final and (len(after) <= len(before) or after.endswith(_INCOMPLETE)):
            return ""
        # A held-back U+FFFD in ``before`` can become a real character in
        # ``after``: compare from the common part, as vLLM does.
        piece = after[len(before) :] if after.startswith(before) else after[len(before.rstrip(_INCOMPLETE)) :]
        self._prefix, self._read = self._read, len(self._tokens)
        return piece
