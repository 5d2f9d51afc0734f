"""Mistral 3 and Pixtral images (``mistral3``: Mistral Small 3.1 / 3.2 and
the models built like them; ``pixtral``: Pixtral 12B), a
:class:`~missive_mlx.vision_family.Family` of :mod:`missive_mlx.vision`.

The rule of transformers' ``Mistral3Processor`` / ``PixtralProcessor``
(`processing_pixtral.py
<https://github.com/huggingface/transformers/blob/main/src/transformers/models/pixtral/processing_pixtral.py>`_)
and of mlx-vlm 0.7.10's ``mistral3`` model (its processor, its Pixtral
vision tower, its ``Mistral3MultiModalProjector``):

* the image processor (``PixtralImageProcessor``) resizes the image to fit
  ``size["longest_edge"]``, each side rounded up to a multiple of
  ``patch_size * spatial_merge_size`` (the processor passes that as the
  patch size); an image of ``h x w`` pixels after resizing is ``h / (patch
  * merge)`` rows of ``w / (patch * merge)`` ``[IMG]`` tokens, each row
  closed by ``[IMG_BREAK]``, the last by ``[IMG_END]`` instead; the chat
  template writes ``[IMG]`` where the image goes and the processor
  replaces it by that sequence. The whole sequence is the image's span
  (:attr:`~missive_mlx.vision_family.ImageSpan.layout`): its positions hold
  the image's synthetic id in the prompt cache, the model gets ``[IMG]``,
  ``[IMG_BREAK]``, ``[IMG_END]``;
* the features (one an ``[IMG]``) are the Pixtral tower's hidden state of
  ``vision_feature_layer`` (its own 2-D RoPE over the patches of the
  image's real size), merged ``merge x merge`` and projected
  (``multi_modal_projector(features, image_sizes)``); Pixtral 12B has no
  merger (``spatial_merge_size`` 1: a token a patch) and a plain two-layer
  projector (mlx-vlm's ``pixtral`` model); the break and end tokens keep
  their embeddings;
* positions are the token's index (plain RoPE), attention causal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .vision_family import Family, ImageSpan

__all__ = ["Mistral3"]


class Mistral3(Family):
    """Mistral 3's image rule (see the module documentation)."""

    def __init__(
        self, model_id: str, model_type: str, vlm: Any, image_processor: Any, token: Callable[[str], int]
    ) -> None:
        super().__init__(model_id, model_type, vlm, image_processor, token)
        config = vlm.config
        self.image_token = int(config.image_token_index)
        self.row_end = token("[IMG_BREAK]")
        self.image_end = token("[IMG_END]")
        self.merge = int(getattr(config, "spatial_merge_size", 1))  # Pixtral: none
        self.patch = int(config.vision_config.patch_size)

    def preprocess(self, rgb: Any) -> tuple[int, dict[str, Any]]:
        side = self.patch * self.merge
        out = self.preprocessed(rgb, patch_size=side)
        height, width = (int(v) for v in np.asarray(out["image_sizes"]).reshape(-1)[:2])
        rows, cols = height // side, width // side
        layout: list[int] = []
        for row in range(rows):
            layout += [self.image_token] * cols
            layout.append(self.row_end if row < rows - 1 else self.image_end)
        pixels = {
            "pixel_values": np.asarray(out["pixel_values"]),
            "image_sizes": np.asarray(out["image_sizes"]).reshape(1, 2),
            "layout": tuple(layout),
        }
        return len(layout), pixels

    def features(self, span: ImageSpan, dtype: Any) -> tuple[Any, list[Any]]:
        import mlx.core as mx

        vlm = self.vlm
        pixel_values = mx.array(np.asarray(span.pixels["pixel_values"]))
        sizes = mx.array(np.asarray(span.pixels["image_sizes"]))
        *_, hidden = vlm.vision_tower(
            pixel_values.transpose(0, 2, 3, 1), output_hidden_states=True, image_sizes=sizes
        )
        selected = hidden[vlm.vision_feature_layer]
        if selected.ndim == 3 and selected.shape[0] == 1:
            selected = selected.squeeze(0)
        if self.model_type == "pixtral":  # a token a patch: no merger
            features = vlm.multi_modal_projector(selected)
            return features.reshape(-1, features.shape[-1]), []
        return vlm.multi_modal_projector(selected, sizes), []
