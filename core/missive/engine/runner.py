"""The runner: the only backend-specific surface of the in-process engine.

A :class:`Runner` wraps one loaded model of one backend (llama.cpp, MLX) and
knows nothing of HTTP, events, queues or reasoning. The engine
(:mod:`missive.engine.local`) drives it:

* :meth:`Runner.load` once, :meth:`Runner.close` once, both in the model's
  thread;
* :meth:`Runner.tokenize` and :meth:`Runner.reusable` from tokenizing threads
  (never behind a generation, see :attr:`Runner.tokenize_threads`);
* per generation, in the model's thread: :meth:`Runner.begin` with a
  :class:`Sequence`, then :meth:`Runner.step` once per token, optionally
  :meth:`Runner.append` (tokens the model did not sample, e.g. the text that
  closes a reasoning block), and always :meth:`Runner.end`.

The interface is per *sequence*, not "generate a whole answer". A runner
that decodes several sequences together (``ModelInfo.slots > 1``: continuous
batching) also implements :class:`Batched`: its :meth:`Runner.begin` then
only prepares the sequence, and :meth:`Batched.step_many` advances every
running sequence by one ``llama_decode``-like step (a chunk of a prompt being
read, or one token). A runner that can save and restore its context also
implements :class:`ContextStates` (the host-memory prompt cache).

Errors: any method may raise :class:`~missive.protocol.errors.MissiveError`
(:class:`~missive.protocol.errors.InvalidRequestError` for a prompt the model cannot
take, :class:`~missive.protocol.errors.ApiError` for a backend failure);
:class:`~missive.config.ConfigError` from :meth:`Runner.load`;
:class:`Cancelled` from the prompt-decoding methods when the sequence's
``cancelled`` callback turned true. Any other exception raised in the model's
thread is reported to the client as ``<backend> failed while generating: ...``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .sequences import (  # part of the runner's interface
    PENDING,
    Cancelled,
    ImageMarks,
    ModelInfo,
    Pending,
    Prompt,
    Sampling,
    Sequence,
    StepResult,
    common_prefix,
)
from .states import ContextStates, PortableStates, SavedContext, SharedPool  # part of the runner's interface

__all__ = [
    "PENDING",
    "Pending",
    "Batched",
    "Cancelled",
    "Detokenizer",
    "ImageMarks",
    "ModelInfo",
    "Prompt",
    "ContextStates",
    "PortableStates",
    "Runner",
    "SavedContext",
    "Sampling",
    "SharedPool",
    "Sequence",
    "Speculative",
    "StepResult",
    "common_prefix",
]


class Detokenizer(Protocol):
    """Output tokens to text, one token at a time, a character split across
    tokens emitted whole (the backend's UTF-8 / incremental scheme)."""

    def add(self, token: int) -> str:
        """Text the token completes ("" while a character is incomplete)."""

    def flush(self) -> str:
        """Text still held back at the end of generation ("" if none, or if
        the backend drops an incomplete character)."""


@runtime_checkable
class Runner(Protocol):
    """One loaded model of one backend (see the module documentation).

    Attributes:
        backend: the backend's name in messages (``"llama.cpp"``, ``"mlx"``).
        tokenize_threads: how many threads may call :meth:`tokenize` and
            :meth:`reusable` at once (1 when the tokenizer is not thread-safe).
        image_marker: ``(index, nonce) -> marker text`` when the loaded model
            takes images, else None (set by :meth:`load`).
    """

    backend: str
    tokenize_threads: int
    image_marker: Callable[[int, str], str] | None

    def load(self) -> ModelInfo:
        """Load the model (model thread).

        Raises:
            ConfigError: missing or unusable model files, no chat template.
        """

    def close(self) -> None:
        """Free the model (model thread; no sequence is running)."""

    def tokenize(self, pieces: list[tuple[str, bool]], marks: ImageMarks | None) -> Prompt:
        """Tokenize a rendered prompt (tokenizing thread).

        Args:
            pieces: ``(text, is_client_text)`` from
                :func:`missive.chat_template.rendering.render_segments`: client text is
                tokenized as plain text (a typed ``<|im_end|>`` stays text),
                the template's with special tokens parsed.
            marks: the images the text's markers stand for, or None.

        Raises:
            InvalidRequestError: an image cannot be used.
            ApiError: the backend could not tokenize, or the prompt is empty.
        """

    def encode_special(self, text: str) -> list[int]:
        """Tokens of a text written by the engine (special tokens parsed, no
        BOS), e.g. the closing text of a reasoning block."""

    def reusable(self, prompt: Prompt) -> int:
        """Prompt tokens :meth:`begin` would take from the runner's cache now
        (0..len(prompt.tokens)), in the slot that would serve it best: the
        ``cache_read_input_tokens`` announced before the sequence is placed
        (the engine corrects it at the end if the sequence got another slot).
        Tokenizing thread."""

    def begin(self, seq: Sequence) -> None:
        """Start ``seq`` in ``seq.slot``: decode what its prompt adds to the
        cached state (a :class:`Batched` runner only plans it: its
        ``step_many`` reads the prompt) and prepare sampling (set
        ``seq.reused``). With ``seq.max_new == 0`` only the prompt is decoded.
        Model thread.

        Raises:
            Cancelled: ``seq.cancelled()`` turned true during the prompt.
        """

    def step(self, seq: Sequence) -> int | None:
        """Sample one token and decode it into the sequence; None at end of
        generation (an end-of-generation token, neither shown nor counted).
        Model thread.

        Raises:
            Cancelled: the backend decodes the prompt lazily here and was cancelled.
        """

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        """Write ``tokens`` (already at the end of ``seq.output``) into the
        sequence's context as if sampled, and continue sampling after them.
        Model thread.

        Raises:
            Cancelled: ``seq.cancelled()`` turned true while they were decoded.
        """

    def detokenizer(self, seq: Sequence) -> Detokenizer:
        """A detokenizer for ``seq``'s output (model thread)."""

    def end(self, seq: Sequence, ok: bool) -> None:
        """Finish ``seq`` (model thread, always called once after :meth:`begin`
        was entered). ``ok`` is False when it failed or was cancelled inside a
        prompt decode: its state is then incomplete and must not be reused."""


@runtime_checkable
class Batched(Protocol):
    """A runner decoding its running sequences together (``ModelInfo.slots > 1``).

    Its :meth:`Runner.begin` plans the prompt without decoding it, and
    :meth:`Runner.append` queues the tokens; the engine calls :meth:`step_many`
    (never :meth:`Runner.step`) with every running sequence, once per step.
    """

    def step_many(self, seqs: list[Sequence]) -> list[StepResult]:
        """One decode step for all ``seqs`` (each in its own slot): the
        prompts still being read advance by a chunk (all of them together at
        most ``n_batch`` tokens), the others decode their last token (and,
        with speculative decoding, a draft after it). Returns, per sequence
        in order, the token it sampled, None at the end of generation (an
        end-of-generation token, or the prompt read when ``max_new == 0``),
        :data:`PENDING`, or a list of tokens (a verified draft run, never
        past ``max_new - len(output)`` tokens, only for ``Sequence.draft``;
        its last item may be None). Model thread.

        Raises:
            ApiError: the backend failed the step (every sequence in it fails).
        """


@runtime_checkable
class Speculative(Protocol):
    """A :class:`Batched` runner that decodes speculatively (drafts tokens
    and verifies them in its step): its counters, for status and
    ``/metrics``."""

    def draft_counts(self) -> tuple[int, int]:
        """Draft tokens verified and draft tokens accepted since load (any thread)."""
