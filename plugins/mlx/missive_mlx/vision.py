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
  tokens it takes, so ``count_tokens`` and the usage are exact. Each
  family is a :class:`~missive_mlx.vision_family.Family` in a module of its
  own (its processor's expansion, its features, its positions):

  - Qwen2-VL and Qwen2.5-VL (``qwen2_vl``, ``qwen2_5_vl``;
    :mod:`missive_mlx.vision_qwen`): ``<|vision_start|>``, one
    ``<|image_pad|>`` per merged patch, ``<|vision_end|>``; M-RoPE;
  - Qwen3-VL (``qwen3_vl``, ``qwen3_vl_moe``;
    :mod:`missive_mlx.vision_qwen3`): Qwen2.5-VL's tokens and positions,
    plus deepstack features added to the first language layers' outputs
    at the image's positions (:class:`VisionLM` gives each forward pass
    the rows of the image positions among its tokens);
  - Mistral 3 and Pixtral (``mistral3``, ``pixtral``;
    :mod:`missive_mlx.vision_mistral3`): rows
    of ``[IMG]``, each closed by ``[IMG_BREAK]``, the last by
    ``[IMG_END]``, all the image's span (:attr:`ImageSpan.layout`: the
    features go to the ``[IMG]`` positions only); plain positions;
  - Gemma 3 (``gemma3``; :mod:`missive_mlx.vision_gemma3`): ``"\\n\\n"``,
    ``<start_of_image>``, ``mm_tokens_per_image`` soft tokens,
    ``<end_of_image>``, ``"\\n\\n"`` (``Family.pad_text``: the
    newlines are joined to the text around the image before it is
    tokenized, as the processor's expanded prompt is); plain positions;
    an image's soft tokens attend to each other both ways
    (:mod:`missive_mlx.vision_mask`), so each image is read in one forward
    pass (:class:`~missive_mlx.vision_lm.Plan`) and a cached prefix is cut
    back to the start of an image it ends inside;

* in the prompt's token list the image's positions hold a synthetic id
  (negative, from a SHA-256 of the image's bytes, as the llamacpp driver
  does), so the prompt cache's prefix comparison
  (:mod:`missive_mlx.prompt_cache`) reuses an image already in a cached
  prefix and stops at one that differs; the model gets the family's image
  token id there (or the span's layout: Mistral 3's break tokens);
* at generation the part of the prompt past the cached prefix is embedded
  (the language model's ``embed_tokens``) with the vision tower's features
  of each image in it put in place of its image tokens (the family's
  ``get_input_embeddings`` rule: ``Family.features``), and
  ``mlx_lm.generate_step`` reads
  those embeddings (its ``input_embeddings``) through :class:`VisionLM`,
  which gives mlx-lm's model interface to mlx-vlm's language model;
* Qwen's M-RoPE positions (three position ids a token: time, height, width;
  an image takes ``max(h, w) / merge_size`` positions for its
  ``h * w / merge_size**2`` tokens) come from the language model's
  ``get_rope_index`` on the whole prompt and are passed explicitly for
  every forward pass, prompt or generated token (a generated token's
  position is its index plus the prompt's ``rope_deltas``), so a cached
  prefix continues at the right positions and nothing depends on the state
  mlx-vlm's language model keeps between calls;
* the caches are mlx-lm's classes of the kinds the language model's
  ``make_cache`` makes (Gemma 3's sliding-window layers: a
  ``RotatingKVCache``), so the prompt cache, KV quantization and the memory
  probe treat them as for a text model.

Families mlx-vlm loads but this module does not place images for yet
(Llama 4's tiles, SmolVLM...) are served
as text-only models through mlx-lm, with a warning at load, as is every
vision folder when mlx-vlm is not installed (``missive-mlx[vision]``).
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

from .vision_family import Family, ImageSpan
from .vision_lm import Plan, VisionLM

__all__ = [
    "FAMILIES",
    "Family",
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
FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "gemma3", "qwen3_vl", "qwen3_vl_moe", "mistral3", "pixtral"})


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


def family_rule(model_type: str) -> type[Family]:
    """The :class:`Family` of a ``model_type`` of :data:`FAMILIES`."""
    if model_type == "gemma3":
        from .vision_gemma3 import Gemma3

        return Gemma3
    if model_type in ("mistral3", "pixtral"):
        from .vision_mistral3 import Mistral3

        return Mistral3
    if model_type in ("qwen3_vl", "qwen3_vl_moe"):
        from .vision_qwen3 import Qwen3VL

        return Qwen3VL
    from .vision_qwen import QwenVL

    return QwenVL


class Vision:
    """Images for one loaded vision model (see the module documentation).

    Args:
        model_id: for messages.
        model_type: one of :data:`FAMILIES`.
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
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else tokenizer.vocab

        def token(text: str) -> int:
            if text not in vocab:
                raise ConfigError(
                    f"model '{model_id}': the tokenizer has no {text} token "
                    f"({model_type} vision models need it)"
                )
            return int(vocab[text])

        self.family = family_rule(model_type)(model_id, model_type, vlm, image_processor, token)
        self.image_token = self.family.image_token
        family = self.family
        self.lm = VisionLM(vlm, mrope=family.mrope, forward=family.forward if family.bidirectional else None)

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
            for part in (
                _padded(list(split(text, marks.nonce)), self.family.pad_text) if not client else [text]
            ):
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
        n, pixels = self.family.preprocess(_rgb(image))
        layout = pixels.pop("layout", None)
        tokens += self.family.before
        media.spans.append(ImageSpan(start=len(tokens), n_tokens=n, pixels=pixels, layout=layout))
        tokens += [image_id(image)] * n
        tokens += self.family.after

    # -- model thread ----------------------------------------------------------

    def inputs(self, prompt: Prompt, start: int, tokens: list[int]) -> tuple[Any, Any]:
        """The model's input for ``tokens`` (a part of the prompt from
        ``start``, or tokens appended after it): the token ids (image
        positions as the family's image token) and their embeddings with the
        images' features in place, or None when no image is among them.
        Sets the M-RoPE positions of ``prompt``, the deepstack rows of the
        images among ``tokens``, and, for a family whose image tokens read each
        other both ways, the :class:`~missive_mlx.vision_lm.Plan` that reads
        each image in one pass (:class:`VisionLM`)."""
        import mlx.core as mx

        media: MediaPrompt | None = prompt.media if isinstance(prompt.media, MediaPrompt) else None
        spans = media.spans if media is not None else []
        if self.family.mrope:
            self._set_positions(prompt, spans)
        handed = len(tokens)
        end = start + handed
        if self.family.bidirectional:  # an image is read in one pass: on to the end of one the tokens cut
            end = max([end] + [s.end for s in spans if s.start < end < s.end])
            tokens = tokens if end == start + handed else prompt.tokens[start:end]
        ids = self.model_ids(tokens, start, spans)
        inside = [s for s in spans if s.start < end and s.end > start]
        self.lm.visual, self.lm.deepstack, self.lm.plan = [], [], None  # set below for the images here
        if not inside:  # text only (appended tokens start past the prompt's images)
            return mx.array(ids), None
        lm = self.vlm.language_model
        embeds = lm.model.embed_tokens(mx.array(ids))
        parts = []
        deep: list[list[Any]] = []
        pos = start
        for span in inside:
            lo, hi = max(span.start, start), min(span.end, end)
            if lo > pos:
                parts.append(embeds[pos - start : lo - start])
            features, deepstack = self.family.features(span, embeds.dtype)
            rows = self._rows(span, self.family.checked(features, span).astype(embeds.dtype))
            parts.append(rows[lo - span.start : hi - span.start])
            if self.family.deepstack:
                deep.append([layer[lo - span.start : hi - span.start] for layer in deepstack])
                self.lm.visual += range(lo, hi)
            pos = hi
        if pos < end:
            parts.append(embeds[pos - start :])
        if self.family.deepstack:
            self.lm.deepstack = [mx.concatenate(layers, axis=0) for layers in zip(*deep, strict=True)]
        model_ids, embeddings = mx.array(ids), mx.concatenate(parts, axis=0)
        if self.family.bidirectional:
            images = [(s.start, s.end) for s in spans]
            self.lm.plan = Plan(start, handed, model_ids, embeddings, images, cursor=start)
        return model_ids[:handed], embeddings[:handed]

    def model_ids(self, tokens: list[int], start: int, spans: list[ImageSpan]) -> list[int]:
        """The token ids the model gets for ``tokens`` (from position
        ``start`` of a prompt holding ``spans``): an image's positions hold
        the family's image token, or its :attr:`ImageSpan.layout`."""
        ids = [self.image_token if t < 0 else t for t in tokens]
        for span in spans:
            if span.layout is not None and span.start < start + len(tokens) and span.end > start:
                lo, hi = max(span.start, start), min(span.end, start + len(tokens))
                ids[lo - start : hi - start] = span.layout[lo - span.start : hi - span.start]
        return ids

    def _rows(self, span: ImageSpan, features: Any) -> Any:
        """The embeddings of the span's positions: ``features`` where its
        layout holds the image token (all of them without a layout), the
        token's embedding elsewhere."""
        import mlx.core as mx

        if span.layout is None:
            return features
        layout = mx.array(span.layout)
        image = layout == self.image_token
        order = mx.maximum(mx.cumsum(image.astype(mx.int32)) - 1, 0)
        embeds = self.vlm.language_model.model.embed_tokens(layout).astype(features.dtype)
        return mx.where(image[:, None], features[order], embeds)

    def _set_positions(self, prompt: Prompt, spans: list[ImageSpan]) -> None:
        import mlx.core as mx

        lm = self.lm
        if lm.prompt is prompt.tokens:  # set for this prompt already (an append)
            return
        lm.prompt = prompt.tokens
        if not spans:
            lm.positions, lm.delta = None, 0
            return
        ids = mx.array([self.model_ids(prompt.tokens, 0, spans)])
        lm.positions, lm.delta = self.family.positions(ids, spans)


def _padded(parts: list[str | int], pad: str) -> list[str | int]:
    """``parts`` (from :func:`split`: text, image, text...) with ``pad``
    joined to the text on both sides of each image."""
    if not pad:
        return parts
    out = list(parts)
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out[i - 1] = f"{out[i - 1]}{pad}"
            out[i + 1] = f"{pad}{out[i + 1]}"
    return out


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
