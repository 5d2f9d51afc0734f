"""A family's image rule for :mod:`missive_mlx.vision`: the base class each
family module (:mod:`missive_mlx.vision_qwen`, :mod:`missive_mlx.vision_gemma3`)
subclasses, and :class:`ImageSpan`, an image's place in a prompt.

Kept apart from :mod:`missive_mlx.vision` so the family modules import
this one only (no import circle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from missive.api import ApiError, InvalidRequestError

__all__ = ["Family", "ImageSpan"]


@dataclass(frozen=True)
class ImageSpan:
    """One image in a prompt: positions ``start .. start + n_tokens - 1``.

    Attributes:
        pixels: the processor's arrays for it (``pixel_values``, and Qwen's
            ``image_grid_thw``), as numpy or MLX arrays.
        layout: the token id the model gets at each of its positions when
            they are not all the family's image token (Mistral 3: ``[IMG]``
            rows, each closed by ``[IMG_BREAK]``, the last by
            ``[IMG_END]``); the image's features go, in order, to the
            positions holding the image token, the others are embedded as
            tokens. None: every position holds a feature.
    """

    start: int
    n_tokens: int
    pixels: dict[str, Any]
    layout: tuple[int, ...] | None = None

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


class Family:
    """One family's image rule (the base: a family module subclasses it).

    Attributes:
        image_token: the token id the model gets at an image's positions.
        before: token ids written before an image's tokens (its opening token).
        after: token ids written after them (its closing token).
        pad_text: text the family's processor writes on both sides of an
            image (outside ``before`` / ``after``); joined to the neighbouring
            text before it is tokenized, as the processor's expanded prompt is.
        mrope: whether the family takes explicit M-RoPE positions
            (:meth:`positions`).
        deepstack: whether its images have deepstack features
            (:meth:`features`).
        bidirectional: whether an image's tokens read each other both ways
            (:meth:`forward`); they are then read in one forward pass.
    """

    pad_text = ""
    mrope = False
    deepstack = False
    bidirectional = False

    def __init__(
        self, model_id: str, model_type: str, vlm: Any, image_processor: Any, token: Callable[[str], int]
    ) -> None:
        self.model_id = model_id
        self.model_type = model_type
        self.vlm = vlm
        self.image_processor = image_processor
        self.image_token = 0
        self.before: list[int] = []
        self.after: list[int] = []

    def preprocess(self, rgb: Any) -> tuple[int, dict[str, Any]]:
        """The number of tokens of an RGB Pillow image and the processor's
        arrays for it (:attr:`ImageSpan.pixels`; a ``layout`` entry, if
        any, is the span's :attr:`ImageSpan.layout`).

        Raises:
            InvalidRequestError: the processor refused the image.
        """
        raise NotImplementedError

    def features(self, span: ImageSpan, dtype: Any) -> tuple[Any, list[Any]]:
        """The image's features, ``(n_tokens, hidden_size)``, as they go in
        place of its tokens in the embeddings (of ``dtype``), and its
        deepstack features (Qwen3-VL: one ``(n_tokens, hidden_size)`` array
        a language model layer from the first, added to that layer's output
        at the image's positions), empty for other families."""
        raise NotImplementedError

    def positions(self, ids: Any, spans: list[ImageSpan]) -> tuple[Any, int]:
        """M-RoPE positions ``(3, 1, n)`` of the prompt ``ids`` ``(1, n)``
        holding ``spans``, and the position minus index past its end."""
        raise NotImplementedError

    def forward(self, embeds: Any, cache: list[Any], images: list[tuple[int, int]]) -> Any:
        """A bidirectional family's forward pass: the logits ``(1, n, vocab)``
        of the embeddings ``(1, n, hidden_size)`` read into ``cache``, the
        tokens of each of ``images`` (whole ``(first, end)`` position ranges
        among them) reading each other both ways."""
        raise NotImplementedError

    def preprocessed(self, rgb: Any, **kwargs: Any) -> Any:
        """The image processor's output for ``rgb``; its errors as a 400."""
        try:
            return self.image_processor(images=[rgb], **kwargs)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            raise InvalidRequestError(
                f"the model's image processor could not preprocess a {rgb.width}x{rgb.height} image: {exc}"
            ) from exc

    def checked(self, features: Any, span: ImageSpan) -> Any:
        n = span.n_tokens if span.layout is None else span.layout.count(self.image_token)
        if features.shape[0] != n:
            raise ApiError(f"the vision tower gave {features.shape[0]} features for an image of {n} tokens")
        return features
