"""Qwen3-VL images (``qwen3_vl``, ``qwen3_vl_moe``), a
:class:`~missive_mlx.vision_family.Family` of :mod:`missive_mlx.vision`.

The rule of transformers' ``Qwen3VLProcessor`` and ``Qwen3VLModel``
(`modeling_qwen3_vl.py
<https://github.com/huggingface/transformers/blob/main/src/transformers/models/qwen3_vl/modeling_qwen3_vl.py>`_)
and of mlx-vlm 0.7.10's ``qwen3_vl`` / ``qwen3_vl_moe`` models:

* an image is Qwen2-VL's (:mod:`missive_mlx.vision_qwen`):
  ``<|vision_start|>``, ``t * h * w / merge_size**2`` times
  ``<|image_pad|>`` (patches of 16 pixels in Qwen3-VL), ``<|vision_end|>``;
* the vision tower gives the image's features and its deepstack features:
  the outputs of the blocks ``deepstack_visual_indexes``, each merged to
  one row a token; the row of deepstack feature ``i`` is added to the
  output of the language model's layer ``i`` at the image's positions
  (``_deepstack_process``), so the driver gives them, with the mask of the
  image positions in each forward pass's tokens, to every pass that reads
  image positions (:class:`~missive_mlx.vision_lm.VisionLM`);
* positions are M-RoPE from the language model's ``get_rope_index`` (the
  same three position ids a token as Qwen2.5-VL; the language model
  interleaves their frequencies, ``mrope_interleaved``).
"""

from __future__ import annotations

from typing import Any

from .vision_family import ImageSpan
from .vision_qwen import QwenVL

__all__ = ["Qwen3VL"]


class Qwen3VL(QwenVL):
    """Qwen3-VL's image rule (see the module documentation)."""

    deepstack = True

    def features(self, span: ImageSpan, dtype: Any) -> tuple[Any, list[Any]]:
        features, deepstack = self.tower(span)
        return features, list(deepstack)
