"""What the engine hands a runner: a prompt, its sampling, a sequence being decoded.

Values of the runner's interface (:mod:`missive.engine.runner` re-exports
them all), kept apart so that :mod:`missive.engine.states` can name them
without importing the runner protocol that names the states.
"""

from __future__ import annotations

import enum
import secrets
from collections import abc
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..driver.media import ImageInput
from ..sampling import NO_DEFAULTS, SamplingDefaults

__all__ = [
    "PENDING",
    "Pending",
    "Cancelled",
    "ImageMarks",
    "ModelInfo",
    "Prompt",
    "Sampling",
    "Sequence",
    "StepResult",
    "common_prefix",
    "same_cache",
]


class Pending(enum.Enum):
    """The type of :data:`PENDING`."""

    PENDING = "pending"


#: What :meth:`Batched.step_many` gives for a sequence that sampled nothing in
#: that step (its prompt, or tokens appended to it, are still being read).
PENDING = Pending.PENDING

#: What :meth:`Batched.step_many` gives for one sequence: the token it
#: sampled, None at the end of generation, :data:`PENDING`, or several tokens
#: at once (a runner that decodes speculatively verified a draft), in order,
#: the last possibly None (the end of generation came inside the run).
StepResult = int | None | Pending | list[int | None]


class Cancelled(Exception):
    """Raised by a runner in the model's thread when ``Sequence.cancelled()``
    turned true while it decoded a prompt (or appended tokens): the sequence's
    state is incomplete (the engine then ends it with ``ok=False``)."""


@dataclass(frozen=True)
class ModelInfo:
    """What :meth:`Runner.load` found out about the loaded model.

    Attributes:
        context_window: tokens of context, prompt + output (> 0).
        chat_template: the Jinja chat template to render prompts with (the
            settings' override or the model's own; compiled by the engine).
        bos_text, eos_text: the special tokens' texts the template may write
            (``bos_token``/``eos_token`` variables), "" when none.
        control_texts: texts of the special tokens a client's text must never
            become (:func:`missive.chat_template.rendering.render_segments`).
        input_media: media types the loaded model takes (images with a vision
            projector); empty: text only.
        slots: sequences the runner decodes together (>= 1; above 1 the
            runner implements :class:`Batched`). Each may use the whole
            ``context_window``.
        pool_tokens: cells of the KV pool the slots share when it is
            smaller than ``slots x context_window`` (the runner then
            implements :class:`SharedPool`); 0: each slot has its own.
        sampling: the model's default sampling, for requests that leave
            fields unset (:func:`missive.sampling.model_sampling` of what the
            model's files say); the API's defaults when not given.
    """

    context_window: int
    chat_template: str
    bos_text: str = ""
    eos_text: str = ""
    control_texts: tuple[str, ...] = ()
    input_media: frozenset[str] = frozenset()
    slots: int = 1
    pool_tokens: int = 0
    sampling: SamplingDefaults = NO_DEFAULTS


class _Tokens(NamedTuple):
    tokens: list[int]
    media: Any = None


class Prompt(_Tokens):
    """A tokenized prompt: ``(tokens, media)``.

    Attributes:
        tokens: token ids, one per context position (an image's positions may
            hold a runner-specific synthetic id).
        media: the runner's media objects for these positions (libmtmd image
            chunks...), or None; released by :meth:`close`.
        variant: the variant of the runner's model the prompt runs through
            (:attr:`missive.engine.local.LocalDriver.variant`: llama.cpp's
            LoRA adapter set of a model entry sharing another's load), set
            by :meth:`with_variant`; None: the model as loaded. A runner
            never reuses a cached prefix computed through another variant.
        cache_scope: the prompt-cache scope of the request's key
            (:attr:`missive.driver.interface.GenerationRequest.cache_scope`),
            set by :meth:`with_scope`; None: an open server's one scope.
            No cache serves it a state computed for a prompt of another
            scope (:func:`same_cache`). Kept apart from :attr:`variant`,
            which groups decode steps by adapter set: scopes never split
            a step.
            Neither is an item of the tuple, which still unpacks as ``tokens, media``.
    """

    variant: Hashable | None = None
    cache_scope: Hashable | None = None

    def with_variant(self, variant: Hashable | None) -> Prompt:
        """The same prompt, run through ``variant``."""
        prompt = Prompt(self.tokens, self.media)
        prompt.variant = variant
        prompt.cache_scope = self.cache_scope
        return prompt

    def with_scope(self, cache_scope: Hashable | None) -> Prompt:
        """The same prompt, for a request of ``cache_scope``."""
        prompt = self.with_variant(self.variant)
        prompt.cache_scope = cache_scope
        return prompt

    def close(self) -> None:
        """Release :attr:`media` now (idempotent; a no-op without media)."""
        if self.media is not None:
            self.media.close()


@dataclass
class ImageMarks:
    """The images met while rendering one prompt, each replaced in the
    rendered text by a marker (:attr:`Runner.image_marker` of its index and
    :attr:`nonce`); the runner's :meth:`Runner.tokenize` cuts the text at the
    markers. The nonce is fresh per prompt, so client text cannot forge one."""

    marker: Callable[[int, str], str]
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))
    images: list[ImageInput] = field(default_factory=list)

    def mark(self, image: ImageInput) -> str:
        """Record ``image``; the marker text that stands for it."""
        self.images.append(image)
        return self.marker(len(self.images) - 1, self.nonce)


@dataclass(frozen=True)
class Sampling:
    """How a sequence samples; None means the API's default.

    The engine fills in the model's defaults (:attr:`ModelInfo.sampling`)
    for what the request leaves unset.

    Attributes:
        temperature: 1.0 by default; 0 is greedy.
        top_p: no nucleus cut by default.
        top_k: no top-k cut by default.
        constraint: a backend object constraining the output (a compiled
            llama.cpp grammar), or None.
        min_p: no min-p cut by default (the API has no such field: only a
            model's defaults set it).
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    constraint: Any = None
    min_p: float | None = None


@dataclass
class Sequence:
    """One generation, as the runner sees it.

    Attributes:
        prompt: the tokenized prompt.
        max_new: output tokens allowed (>= 0; 0 decodes the prompt only: the
            API's cache warm-up).
        sampling: sampling parameters.
        cancelled: true once the consumer has gone; checked by the runner
            between prompt batches (raise :class:`Cancelled`).
        output: tokens produced so far (sampled or appended), kept by the engine.
        reused: prompt tokens the runner took from its cache in :meth:`Runner.begin`.
        state: the runner's own per-sequence state (generator, KV cache...).
        slot: the slot it runs in, ``0 .. ModelInfo.slots - 1``, chosen by
            the engine before :meth:`Runner.begin` (llama.cpp: its ``seq_id``).
        session: the client's session id (:mod:`missive.messages.session`): among
            slots and saved states that serve the prompt equally, the
            engine prefers those of this session.
        draft: whether a :class:`Batched` runner may give several tokens in
            one step (speculative decoding); False when the engine may
            :meth:`Runner.append` tokens between steps (the thinking budget),
            whose place a verified run could not leave room for.
    """

    prompt: Prompt
    max_new: int
    sampling: Sampling
    cancelled: Callable[[], bool]
    output: list[int] = field(default_factory=list)
    reused: int = 0
    state: Any = None
    slot: int = 0
    session: str | None = None
    draft: bool = True


def same_cache(
    variant: Hashable | None,
    cache_scope: Hashable | None,
    prompt_variant: Hashable | None,
    prompt_scope: Hashable | None,
) -> bool:
    """Whether a state computed through ``variant`` for ``cache_scope`` may
    serve a prompt of ``prompt_variant`` and ``prompt_scope``: both the same
    (another adapter set's keys and values are other numbers; another
    scope's are another key's, :attr:`Prompt.cache_scope`)."""
    return variant == prompt_variant and cache_scope == prompt_scope


def common_prefix(a: abc.Sequence[int], b: abc.Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (the
    measure every prompt cache of the engine and its runners uses)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
