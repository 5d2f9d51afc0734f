"""Gemma 3 images (``gemma3``), a :class:`~missive_mlx.vision_family.Family` of
:mod:`missive_mlx.vision`.

The rule of transformers' ``Gemma3Processor`` (`processing_gemma3.py
<https://github.com/huggingface/transformers/blob/main/src/transformers/models/gemma3/processing_gemma3.py>`_:
``full_image_sequence``) and of mlx-vlm 0.7.10's ``gemma3`` model
(``mlx_vlm/models/gemma3``):

* an image is ``"\\n\\n"``, ``<start_of_image>``, ``mm_tokens_per_image``
  (256 in Google's models) times ``<image_soft_token>``,
  ``<end_of_image>``, ``"\\n\\n"``: the same count for every image (the
  processor resizes it to the vision tower's ``image_size`` square; its
  pan-and-scan crops, off by default, are not made). The chat template
  writes ``<start_of_image>`` where the image goes and the processor
  replaces it by that sequence, tokenized with the text around it, so the
  two ``"\\n\\n"`` are joined to the neighbouring text here
  (:attr:`~missive_mlx.vision_family.Family.pad_text`);
* its features are the SigLIP tower's last hidden state, average-pooled to
  ``mm_tokens_per_image`` and projected (``multi_modal_projector``), divided
  by ``sqrt(hidden_size)`` (mlx-vlm's ``prepare_inputs_for_multimodal``):
  the language model multiplies all its input embeddings by
  ``sqrt(hidden_size)``, text and image alike;
* positions are the token's index (plain RoPE): nothing to set;
* attention: transformers' ``Gemma3Model`` lets an image's tokens attend to
  each other both ways during prefill (``token_type_ids``,
  ``create_masks_for_vision_model``: causal OR within the image's block).
  mlx-vlm 0.7.10 does not: ``get_input_embeddings`` builds an
  ``attention_mask_4d``, but its ``generate_step`` passes it to the language
  model as a keyword that ``LanguageModel.__call__`` ignores, so its Gemma 3
  attends causally (with the sliding window of its local layers) over
  images as over text. This module does as mlx-vlm does, so its output is
  mlx-vlm's for the same prompt, and a prompt-cache prefix may end inside
  an image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from missive.api import ConfigError

from .vision_family import Family, ImageSpan

__all__ = ["Gemma3"]


class Gemma3(Family):
    """Gemma 3's image rule (see the module documentation)."""

    pad_text = "\n\n"

    def __init__(
        self, model_id: str, model_type: str, vlm: Any, image_processor: Any, token: Callable[[str], int]
    ) -> None:
        super().__init__(model_id, model_type, vlm, image_processor, token)
        config = vlm.config
        self.image_token = int(config.image_token_index)
        self.before = [token("<start_of_image>")]
        self.after = [token("<end_of_image>")]
        # the projector's output: (image_size / patch_size)**2 patches pooled to tokens_per_side**2
        self.n_tokens = int(vlm.multi_modal_projector.tokens_per_side) ** 2
        expected = int(getattr(config.text_config, "mm_tokens_per_image", self.n_tokens))
        if self.n_tokens != expected:
            raise ConfigError(
                f"model '{model_id}': the projector gives {self.n_tokens} tokens an image, "
                f"mm_tokens_per_image is {expected}"
            )
        self.scale = float(config.hidden_size) ** 0.5

    def preprocess(self, rgb: Any) -> tuple[int, dict[str, Any]]:
        out = self.preprocessed(rgb, return_tensors="np", do_pan_and_scan=False)
        return self.n_tokens, {"pixel_values": out["pixel_values"]}

    def features(self, span: ImageSpan, dtype: Any) -> tuple[Any, list[Any]]:
        import mlx.core as mx

        vlm = self.vlm
        pixel_values = mx.array(np.asarray(span.pixels["pixel_values"]))
        hidden, _, _ = vlm.vision_tower(
            pixel_values.transpose(0, 2, 3, 1).astype(dtype), output_hidden_states=True
        )
        features = vlm.multi_modal_projector(hidden) / self.scale
        return features.reshape(-1, features.shape[-1]), []
