"""Qwen2-VL and Qwen2.5-VL images (``qwen2_vl``, ``qwen2_5_vl``), a
:class:`~missive_mlx.vision_family.Family` of :mod:`missive_mlx.vision`.

The rule of transformers' ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor``
(`Qwen2-VL processor
<https://github.com/huggingface/transformers/blob/main/src/transformers/models/qwen2_vl/processing_qwen2_vl.py>`_)
and of mlx-vlm 0.7.10's ``qwen2_vl`` / ``qwen2_5_vl`` models:

* an image is ``<|vision_start|>``, then ``t * h * w / merge_size**2`` times
  ``<|image_pad|>`` (``image_grid_thw`` of the processor: patches of
  ``patch_size`` pixels after ``smart_resize`` to a multiple of
  ``patch_size * merge_size`` within ``min_pixels .. max_pixels``), then
  ``<|vision_end|>``;
* its features are the vision tower's ``vision_tower(pixel_values, grid_thw)``
  (the tower merges ``merge_size**2`` patches into one token);
* positions are M-RoPE (time, height, width a token), from the language
  model's ``get_rope_index``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .vision_family import Family, ImageSpan

__all__ = ["QwenVL"]


class QwenVL(Family):
    """Qwen2-VL's and Qwen2.5-VL's image rule (see the module documentation)."""

    mrope = True

    def __init__(
        self, model_id: str, model_type: str, vlm: Any, image_processor: Any, token: Callable[[str], int]
    ) -> None:
        super().__init__(model_id, model_type, vlm, image_processor, token)
        self.image_token = int(vlm.config.image_token_id)
        self.before = [token("<|vision_start|>")]
        self.after = [token("<|vision_end|>")]
        self.merge = int(getattr(image_processor, "merge_size", 2))

    def preprocess(self, rgb: Any) -> tuple[int, dict[str, Any]]:
        out = self.preprocessed(rgb)
        grid = [int(v) for v in np.asarray(out["image_grid_thw"]).reshape(-1)[:3]]
        n = grid[0] * grid[1] * grid[2] // (self.merge * self.merge)
        return n, {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def features(self, span: ImageSpan, dtype: Any) -> tuple[Any, list[Any]]:
        return self.tower(span), []

    def tower(self, span: ImageSpan) -> Any:
        """The vision tower's output for the image (Qwen2-VL: its features)."""
        import mlx.core as mx

        vlm = self.vlm
        pixel_values = mx.array(np.asarray(span.pixels["pixel_values"]))
        grid = mx.array(np.asarray(span.pixels["image_grid_thw"]))
        tower_dtype = vlm.vision_tower.patch_embed.proj.weight.dtype
        return vlm.vision_tower(pixel_values.astype(tower_dtype), grid, output_hidden_states=False)

    def positions(self, ids: Any, spans: list[ImageSpan]) -> tuple[Any, int]:
        import mlx.core as mx

        grids = mx.concatenate(
            [mx.array(np.asarray(s.pixels["image_grid_thw"])).reshape(1, 3) for s in spans]
        )
        positions, deltas = self.vlm.language_model.get_rope_index(ids, grids, None, None)
        return positions, int(mx.array(deltas).reshape(-1)[0].item())
