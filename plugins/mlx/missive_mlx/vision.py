"""Images in the prompt of MLX vision models, through mlx-vlm.

A vision model folder is an MLX model folder whose ``config.json`` has a
``vision_config`` (as written by ``mlx_vlm.convert`` or published by the
mlx-community organisation). mlx-lm loads only the language model of such a
folder (its ``models/qwen2_vl.py``, ``gemma3.py``... drop the vision tower's
weights); `mlx-vlm <https://github.com/Blaizzy/mlx-vlm>`_ (0.7.10) loads the
whole model (``mlx_vlm.utils.load_model``: vision tower, projector, language
model) and the family's processor (``mlx_vlm.utils.load_processor``: its
image preprocessing, from ``preprocessor_config.json``). This module uses
those two pieces and keeps everything else the driver's own (the chat
template, the tokenizer, ``mlx_lm.generate_step``, the prompt cache):

* the prompt is rendered with one marker text per image in its place (see
  :class:`missive.api.ImageMarks`; a nonce fresh for each prompt, so client
  text can never forge one); text between markers is tokenized as before;
* each marker becomes the family's image tokens: the processor preprocesses
  the image (resize, patches) at tokenizing time, which fixes how many
  tokens it takes, so ``count_tokens`` and the usage are exact:

  - Qwen2-VL and Qwen2.5-VL (``qwen2_vl``, ``qwen2_5_vl``; the
    transformers processors ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor``):
    ``<|vision_start|>``, then ``t * h * w / merge_size**2`` times
    ``<|image_pad|>`` (``image_grid_thw`` of the processor: patches of
    ``patch_size`` pixels after ``smart_resize`` to a multiple of
    ``patch_size * merge_size`` within ``min_pixels .. max_pixels``), then
    ``<|vision_end|>``;

* in the prompt's token list the image's positions hold a synthetic id
  (negative, from a SHA-256 of the image's bytes, as the llamacpp driver
  does), so the prompt cache's prefix comparison
  (:mod:`missive_mlx.prompt_cache`) reuses an image already in a cached
  prefix and stops at one that differs; the model gets the family's image
  token id there;
* at generation the part of the prompt past the cached prefix is embedded
  (the language model's ``embed_tokens``) with the vision tower's features
  of each image in it put in place of its image tokens (the family's
  ``get_input_embeddings`` rule: Qwen's ``vision_tower(pixel_values,
  grid_thw)``), and ``mlx_lm.generate_step`` reads
  those embeddings (its ``input_embeddings``) through :class:`VisionLM`,
  which gives mlx-lm's model interface to mlx-vlm's language model;
* Qwen's M-RoPE positions (three position ids a token: time, height, width;
  an image takes ``max(h, w) / merge_size`` positions for its
  ``h * w / merge_size**2`` tokens) come from the language model's
  ``get_rope_index`` on the whole prompt and are passed explicitly for
  every forward pass, prompt or generated token (a generated token's
  position is its index plus the prompt's ``rope_deltas``), so a cached
  prefix continues at the right positions and nothing depends on the state
  mlx-vlm's language model keeps between calls.

Families mlx-vlm loads but this module does not place images for yet
(Gemma 3's 256 soft tokens and bidirectional image attention, Qwen3-VL's
deepstack features, Mistral 3 / Pixtral's image break tokens, Llama 4's
tiles...) are served as text-only models through mlx-lm, with a warning at
load, as is every vision folder when mlx-vlm is not installed
(``missive-mlx[vision]``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from missive.api import ApiError, ConfigError, ImageInput, ImageMarks, InvalidRequestError, Prompt

__all__ = [
    "FAMILIES",
    "ImageSpan",
    "MediaPrompt",
    "Vision",
    "VisionLM",
    "image_id",
    "load_vision",
    "vision_capable",
    "vision_model_type",
]

log = logging.getLogger("missive.mlx")

#: The image media types the driver accepts: Pillow decodes all four.
VISION_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

#: ``model_type`` values of ``config.json`` whose images this module places.
FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl"})


def marker(index: int, nonce: str) -> str:
    """The text standing for image ``index`` in a prompt rendered with ``nonce``."""
    return f"<__missive_image_{nonce}_{index}__>"


def split(text: str, nonce: str) -> Iterator[str | int]:
    """``text`` cut at the image markers of ``nonce``: text pieces (possibly
    empty) and image indexes, in order."""
    pos = 0
    for match in re.finditer(rf"<__missive_image_{nonce}_(\d+)__>", text):
        yield text[pos : match.start()]
        yield int(match.group(1))
        pos = match.end()
    yield text[pos:]


def image_id(image: ImageInput) -> int:
    """The synthetic token id of an image's positions: negative (never a real
    token), from a SHA-256 of the image's bytes, so equal images compare equal
    in the prompt cache and different ones (all but surely) do not."""
    digest = hashlib.sha256(image.data).digest()
    return -1 - int.from_bytes(digest[:4], "big") % (2**31 - 2)


@dataclass(frozen=True)
class ImageSpan:
    """One image in a prompt: positions ``start .. start + n_tokens - 1``.

    Attributes:
        pixels: the processor's arrays for it (``pixel_values``, and Qwen's
            ``image_grid_thw``), as numpy or MLX arrays.
    """

    start: int
    n_tokens: int
    pixels: dict[str, Any]

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass
class MediaPrompt:
    """The images of one tokenized prompt (:attr:`missive.api.Prompt.media`)."""

    spans: list[ImageSpan] = field(default_factory=list)

    def close(self) -> None:
        """Nothing to free: the arrays go with the object."""


def vision_model_type(path: Path) -> str | None:
    """The ``model_type`` of a folder whose ``config.json`` has a
    ``vision_config`` (a vision model), else None."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not isinstance(config.get("vision_config"), dict):
        return None
    return str(config.get("model_type") or "")


def vision_capable(path: Path) -> bool:
    """Whether the folder at ``path`` loads as a vision model (a family of
    :data:`FAMILIES`, mlx-vlm installed); read without loading anything."""
    import importlib.util

    return vision_model_type(path) in FAMILIES and importlib.util.find_spec("mlx_vlm") is not None


class VisionLM:
    """mlx-lm's model interface (``model(tokens, cache=, input_embeddings=)``
    returning logits; ``layers``; ``make_cache``) over an mlx-vlm model's
    language model, with explicit M-RoPE positions for Qwen (see the module
    documentation).

    Attributes:
        positions: M-RoPE positions of the current prompt, ``(3, 1, n)``;
            None before a prompt with images (positions are then the index
            plus :attr:`delta`).
        delta: position minus index of the tokens past :attr:`positions`.
    """

    def __init__(self, vlm: Any, mrope: bool) -> None:
        self.vlm = vlm
        self.language_model = vlm.language_model
        self.mrope = mrope
        self.positions: Any = None
        self.delta = 0
        self.prompt: list[int] | None = None  # the token list positions were set for

    @property
    def layers(self) -> Any:
        return self.language_model.layers

    def make_cache(self) -> list[Any]:
        if hasattr(self.language_model, "make_cache"):
            return list(self.language_model.make_cache())
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in self.language_model.layers]

    def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
        extra: dict[str, Any] = {}
        if self.mrope:
            offset = int(cache[0].offset) if cache else 0
            extra["position_ids"] = self._positions(offset, int(inputs.shape[1]))
        out = self.language_model(inputs, inputs_embeds=input_embeddings, cache=cache, **extra)
        return out.logits

    def _positions(self, offset: int, length: int) -> Any:
        """M-RoPE positions ``(3, 1, length)`` of the tokens at ``offset ..``."""
        import mlx.core as mx

        parts = []
        known = 0 if self.positions is None else int(self.positions.shape[-1])
        if offset < known:
            parts.append(self.positions[:, :, offset : min(known, offset + length)])
        rest = offset + length - max(offset, known)
        if rest > 0:
            start = max(offset, known) + self.delta
            parts.append(mx.broadcast_to(mx.arange(start, start + rest)[None, None, :], (3, 1, rest)))
        return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-1)


class Vision:
    """Images for one loaded vision model (see the module documentation).

    Args:
        model_id: for messages.
        model_type: one of :data:`FAMILIES` (M-RoPE models all).
        vlm: the mlx-vlm model.
        image_processor: the family's image processor (mlx-vlm's).
        tokenizer: the driver's tokenizer (mlx-lm's ``TokenizerWrapper``).
    """

    marker = staticmethod(marker)

    def __init__(
        self, model_id: str, model_type: str, vlm: Any, image_processor: Any, tokenizer: Any
    ) -> None:
        self.model_id = model_id
        self.model_type = model_type
        self.vlm = vlm
        self.image_processor = image_processor
        self.lm = VisionLM(vlm, mrope=True)
        config = vlm.config
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else tokenizer.vocab

        def token(text: str) -> int:
            if text not in vocab:
                raise ConfigError(
                    f"model '{model_id}': the tokenizer has no {text} token "
                    f"({model_type} vision models need it)"
                )
            return int(vocab[text])

        # Qwen2-VL, Qwen2.5-VL: <|vision_start|>, the image's <|image_pad|>, <|vision_end|>
        self.image_token = int(config.image_token_id)
        self.before = [token("<|vision_start|>")]
        self.after = [token("<|vision_end|>")]
        self.merge = int(getattr(image_processor, "merge_size", 2))

    # -- tokenizing thread ---------------------------------------------------

    def tokenize(
        self, encode: Callable[[str, bool], list[int]], pieces: list[tuple[str, bool]], marks: ImageMarks
    ) -> Prompt:
        """Token ids of the rendered pieces with each marker's image tokens
        (``encode(text, is_client_text)`` tokenizes text), and the images
        (:class:`MediaPrompt`).

        Raises:
            InvalidRequestError: an image cannot be used, or the template left
                one out.
            ApiError: the prompt is empty or ends with an image.
        """
        images = marks.images
        tokens: list[int] = []
        media = MediaPrompt()
        rendered: set[int] = set()
        for text, client in pieces:
            for part in split(text, marks.nonce) if not client else (text,):
                if isinstance(part, int):
                    if part >= len(images):
                        raise ApiError(
                            f"the rendered prompt names image {part}; the request has {len(images)}"
                        )
                    rendered.add(part)
                    self._append_image(images[part], tokens, media)
                elif part:
                    tokens += encode(part, client)
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        if len(rendered) < len(images):
            raise InvalidRequestError(
                f"the model's chat template left out {len(images) - len(rendered)} of the request's "
                f"{len(images)} images (it does not render every message); they would not reach the model: "
                "send the images in the last user message, or use a model whose template renders them"
            )
        if media.spans and media.spans[-1].end == len(tokens):
            raise ApiError(
                "the chat template rendered a prompt ending with an image; nothing would sample after it"
            )
        return Prompt(tokens, media)

    def _append_image(self, image: ImageInput, tokens: list[int], media: MediaPrompt) -> None:
        rgb = _rgb(image)
        try:
            out = self.image_processor(images=[rgb])
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            raise InvalidRequestError(
                f"the model's image processor could not preprocess a {rgb.width}x{rgb.height} image: {exc}"
            ) from exc
        grid = [int(v) for v in _numpy(out["image_grid_thw"]).reshape(-1)[:3]]
        n = grid[0] * grid[1] * grid[2] // (self.merge * self.merge)
        pixels = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
        tokens += self.before
        media.spans.append(ImageSpan(start=len(tokens), n_tokens=n, pixels=pixels))
        tokens += [image_id(image)] * n
        tokens += self.after

    # -- model thread ----------------------------------------------------------

    def inputs(self, prompt: Prompt, start: int, tokens: list[int]) -> tuple[Any, Any]:
        """The model's input for ``tokens`` (a part of the prompt from
        ``start``, or tokens appended after it): the token ids (image
        positions as the family's image token) and their embeddings with the
        images' features in place, or None when no image is among them.
        Sets the M-RoPE positions of ``prompt`` (:class:`VisionLM`)."""
        import mlx.core as mx

        ids = [self.image_token if t < 0 else t for t in tokens]
        media: MediaPrompt | None = prompt.media if isinstance(prompt.media, MediaPrompt) else None
        spans = media.spans if media is not None else []
        self._set_positions(prompt, spans)
        end = start + len(tokens)
        inside = [s for s in spans if s.start < end and s.end > start]
        if not inside:  # text only (appended tokens start past the prompt's images)
            return mx.array(ids), None
        lm = self.vlm.language_model
        embeds = lm.model.embed_tokens(mx.array(ids))
        parts = []
        pos = start
        for span in inside:
            lo, hi = max(span.start, start), min(span.end, end)
            if lo > pos:
                parts.append(embeds[pos - start : lo - start])
            features = self._features(span).astype(embeds.dtype)
            parts.append(features[lo - span.start : hi - span.start])
            pos = hi
        if pos < end:
            parts.append(embeds[pos - start :])
        return mx.array(ids), mx.concatenate(parts, axis=0)

    def _features(self, span: ImageSpan) -> Any:
        """The image's features, ``(n_tokens, hidden_size)``."""
        import mlx.core as mx

        vlm = self.vlm
        pixel_values = mx.array(_numpy(span.pixels["pixel_values"]))
        grid = mx.array(_numpy(span.pixels["image_grid_thw"]))
        dtype = vlm.vision_tower.patch_embed.proj.weight.dtype
        features = vlm.vision_tower(pixel_values.astype(dtype), grid, output_hidden_states=False)
        if features.shape[0] != span.n_tokens:
            raise ApiError(
                f"the vision tower gave {features.shape[0]} features for an image of {span.n_tokens} tokens"
            )
        return features

    def _set_positions(self, prompt: Prompt, spans: list[ImageSpan]) -> None:
        import mlx.core as mx

        lm = self.lm
        if lm.prompt is prompt.tokens:  # set for this prompt already (an append)
            return
        lm.prompt = prompt.tokens
        if not spans:
            lm.positions, lm.delta = None, 0
            return
        ids = mx.array([[self.image_token if t < 0 else t for t in prompt.tokens]])
        grids = mx.concatenate([mx.array(_numpy(s.pixels["image_grid_thw"])).reshape(1, 3) for s in spans])
        positions, deltas = self.vlm.language_model.get_rope_index(ids, grids, None, None)
        lm.positions = positions
        lm.delta = int(mx.array(deltas).reshape(-1)[0].item())


def _numpy(value: Any) -> Any:
    import numpy as np

    return np.asarray(value)


def _rgb(image: ImageInput) -> Any:
    """The image as an RGB Pillow image (:func:`missive.api.rgb_image`)."""
    from missive.api import rgb_image

    return rgb_image(image)


def load_vision(model_id: str, path: Path, model_type: str) -> tuple[VisionLM, Any, Vision] | None:
    """Load a vision model folder with mlx-vlm: the language model as
    mlx-lm's model interface, mlx-lm's tokenizer of the folder, the
    :class:`Vision` that places images. None (after a warning) when mlx-vlm
    is not installed or the family is not one of :data:`FAMILIES`: the
    caller serves the folder as a text-only model.

    Raises:
        ConfigError: mlx-vlm could not load the folder or its processor.
    """
    if model_type not in FAMILIES:
        log.warning(
            "model %s: a %s vision model; images are placed only for %s: served as text only",
            model_id,
            model_type or "(no model_type)",
            ", ".join(sorted(FAMILIES)),
        )
        return None
    try:
        import mlx_vlm.utils as vlm_utils
    except ImportError:
        log.warning(
            "model %s: a vision model, but mlx-vlm is not installed (pip install 'missive-mlx[vision]'): "
            "served as text only",
            model_id,
        )
        return None
    from mlx_lm.utils import load_config, load_tokenizer

    try:
        vlm = vlm_utils.load_model(path)
        processor = vlm_utils.load_processor(path, add_detokenizer=False)
        image_processor = vlm_utils.load_image_processor(path) or getattr(processor, "image_processor", None)
        config = load_config(path)
        eos = config.get("eos_token_id", (config.get("text_config") or {}).get("eos_token_id"))
        tokenizer = load_tokenizer(path, eos_token_ids=eos)
    except (ValueError, OSError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"model '{model_id}': mlx-vlm could not load {path}: {exc}") from exc
    if image_processor is None:
        raise ConfigError(
            f"model '{model_id}': mlx-vlm found no image processor in {path} (preprocessor_config.json)"
        )
    vision = Vision(model_id, model_type, vlm, image_processor, tokenizer)
    return vision.lm, tokenizer, vision
