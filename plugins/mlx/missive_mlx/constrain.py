"""Constrained decoding on MLX with llguidance: forced tool calls and structured output.

The grammar is the core's Lark text (:mod:`missive.tools.lark_grammar`: the
model's call syntax around each tool's ``input_schema``, or the
``output_config.format`` schema); llguidance (guidance-ai's Rust parser,
the library mlx-lm's own structured-output examples and vLLM's ``guidance``
backend use) compiles it against the model's tokenizer and, at each step,
gives the set of tokens that keep the output inside the grammar.

* :class:`GuidanceTokenizer`: llguidance's view of the model's Hugging Face
  tokenizer (``llguidance.hf.from_tokenizer``, about half a second for a
  50k vocabulary: built once per model, on the first constrained request),
  with the model's end-of-generation tokens, so a grammar that is complete
  lets only those through;
* :func:`compile_grammar`: the Lark text checked against it
  (``LLMatcher.validate_grammar_with_warnings``); an error is the caller's
  to turn into a 400;
* :func:`logits_processor`: one sequence's matcher as an mlx-lm logits
  processor ``(tokens, logits) -> logits``. mlx-lm calls it once per
  sampled position with the tokens so far; from the second call on,
  ``tokens[-1]`` is the token sampled last, which the matcher consumes
  before it computes the next mask. Tokens outside the mask get ``-inf``
  (computed on the CPU with numpy: llguidance's ``llguidance.mlx`` kernel is
  Metal only).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from missive.api import ApiError, Sampling

__all__ = ["Constraint", "GuidanceTokenizer", "compile_grammar", "logits_processor", "unenforced_keys"]


@dataclass(frozen=True)
class Constraint:
    """A compiled grammar for one request (``Sampling.constraint``).

    Attributes:
        grammar: llguidance's grammar (``LLMatcher.grammar_from_lark``).
        tokenizer: the model's ``llguidance.LLTokenizer``.
        eos: the model's end-of-generation tokens.
    """

    grammar: str
    tokenizer: Any
    eos: tuple[int, ...]


class GuidanceTokenizer:
    """The model's tokenizer as llguidance sees it, built once, on first use."""

    def __init__(self) -> None:
        self._built: Any = None
        self._lock = threading.Lock()

    def get(self, tokenizer: Any) -> Any:
        """``llguidance.LLTokenizer`` of an mlx-lm ``TokenizerWrapper``.

        Raises:
            ApiError: the tokenizer is not a fast (Rust) Hugging Face tokenizer.
        """
        with self._lock:
            if self._built is None:
                import llguidance.hf

                hf = getattr(tokenizer, "_tokenizer", tokenizer)
                try:
                    self._built = llguidance.hf.from_tokenizer(hf, eos_token=sorted(tokenizer.eos_token_ids))
                except ValueError as exc:
                    raise ApiError(f"llguidance cannot read this model's tokenizer: {exc}") from exc
            return self._built


def special_tokens(tokenizer: Any) -> dict[str, int]:
    """Text -> id of the tokenizer's special added tokens (module rules of
    :mod:`missive.tools.lark_grammar`: written as tokens in a grammar)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {t.content: int(i) for i, t in decoder.items() if getattr(t, "special", False) and t.content}


def compile_grammar(lark: str, tokenizer: Any) -> tuple[str | None, str]:
    """(grammar, "") for Lark text llguidance compiles for ``tokenizer``,
    else (None, its error message)."""
    grammar, messages = _validated(lark, tokenizer)
    return (grammar, "") if grammar is not None else (None, _reason(messages))


def _validated(lark: str, tokenizer: Any) -> tuple[str | None, list[str]]:
    """(grammar, llguidance's warnings) for Lark text that compiles for
    ``tokenizer``, else (None, its error messages)."""
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    except ValueError as exc:  # pragma: no cover - grammar_from_lark only wraps the text
        return None, [str(exc)]
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    return (None, messages) if failed else (grammar, messages)


def _reason(messages: list[str]) -> str:
    """llguidance's compile error in one line. Its message is "at LINE(COL):
    <what failed>", then the grammar's line; a regex error's first line ends
    in a colon and its reason follows on a line of its own (``error: ...``)."""
    lines = (messages[0] if messages else "the grammar does not compile").split("\n")
    first = re.sub(r"^at \d+\(\d+\): ", "", lines[0])
    if first.endswith(":"):
        detail = next((line.strip() for line in lines[1:] if line.strip().startswith("error:")), "")
        first = f"{first} {detail.removeprefix('error:').strip()}" if detail else first.rstrip(":")
    return first


def unenforced_keys(lark: str, tokenizer: Any) -> tuple[list[str], str]:
    """What llguidance leaves out of the ``%json`` schema of ``lark`` compiled
    leniently (:func:`missive.tools.lark_grammar.json_schema_lark`): (the
    keywords it does not implement, "") when it compiles, and it then
    enforces the rest; ([], its error) when it does not, and any JSON object
    is enforced instead (:meth:`missive_mlx.driver.MlxDriver.constraint`).

    llguidance names the keywords, not where they stand: its lenient mode
    warns ``Unimplemented keys: ["uniqueItems", "not"]`` (llguidance's
    ``json/compiler.rs``) once per compile."""
    grammar, messages = _validated(lark, tokenizer)
    if grammar is None:
        return [], _reason(messages)
    keys: list[str] = []
    for message in messages:
        listed = re.match(r"Unimplemented keys: (\[.*\])", message)
        if listed:
            keys += [k for k in json.loads(listed.group(1)) if k not in keys]
    return keys, ""


class _Processor:
    """One sequence's matcher as an mlx-lm logits processor (module doc)."""

    def __init__(self, constraint: Constraint) -> None:
        import llguidance

        self.matcher = llguidance.LLMatcher(constraint.tokenizer, constraint.grammar, log_level=0)
        self.eos = constraint.eos
        self.started = False

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx
        import numpy as np

        matcher = self.matcher
        if self.started and not matcher.is_stopped() and not matcher.consume_token(int(tokens[-1].item())):
            raise ApiError(f"the grammar refused a sampled token: {matcher.get_error()}")
        self.started = True
        vocab = logits.shape[-1]
        allowed = np.zeros(vocab, dtype=bool)
        if matcher.is_stopped():
            # Complete, nothing may follow (llguidance stops the matcher by
            # itself): only an end token; once one was sampled, what this
            # masks is never used.
            allowed[[t for t in self.eos if t < vocab]] = True
            return mx.where(mx.array(allowed), logits, mx.array(-float("inf"), dtype=logits.dtype))
        if matcher.is_error():
            raise ApiError(f"the grammar failed: {matcher.get_error()}")
        words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        bits = np.unpackbits(words, bitorder="little").astype(bool)
        allowed[: min(vocab, bits.size)] = bits[:vocab]
        return mx.where(mx.array(allowed), logits, mx.array(-float("inf"), dtype=logits.dtype))


def logits_processor(sampling: Sampling) -> Callable[[Any, Any], Any] | None:
    """A fresh matcher of ``sampling.constraint`` as an mlx-lm logits
    processor, or None when the sequence is not constrained."""
    constraint = sampling.constraint
    if constraint is None:
        return None
    if not isinstance(constraint, Constraint):
        raise ApiError(f"the mlx driver cannot apply a {type(constraint).__name__} constraint")
    return _Processor(constraint)
