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
* attention: an image's soft tokens read each other both ways during
  prefill, every other token reads causally (:mod:`missive_mlx.vision_mask`:
  transformers' ``Gemma3Model``, ``token_type_ids``, the image blocks OR-ed
  into the full and sliding-window causal masks; llama.cpp's
  ``mtmd_decode_use_non_causal``). mlx-vlm 0.7.10 does not: its language
  model takes one ``mask`` for all its layers, and its ``generate_step``
  gives it none (the ``attention_mask_4d`` of ``get_input_embeddings``, the
  outer product of the padding mask, goes as a keyword the model ignores), so
  its Gemma 3 reads images causally. :meth:`Gemma3.forward` runs the
  language model's layers itself with one mask a kind of layer: the global
  layers' (``KVCache``: keys from position 0) and the sliding-window
  layers' (``RotatingKVCache``: the window, and keys from the last
  ``max_size - 1`` positions before the pass, which mlx-lm's
  ``RotatingKVCache`` keeps for a pass of several tokens). An image's tokens
  must be in one forward pass: :class:`~missive_mlx.vision_lm.VisionLM` runs a
  prefill chunk that ends inside an image on to its end, and the prompt
  cache cuts a reused prefix back to the start of an image it ends inside
  (:func:`missive_mlx.prompt_cache.image_start`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from missive.api import ConfigError

from .vision_family import Family, ImageSpan
from .vision_mask import image_mask

__all__ = ["Gemma3"]


class Gemma3(Family):
    """Gemma 3's image rule (see the module documentation)."""

    pad_text = "\n\n"
    bidirectional = True

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

    def forward(self, embeds: Any, cache: list[Any], images: list[tuple[int, int]]) -> Any:
        """Logits ``(1, n, vocab)`` of the embeddings ``embeds`` ``(1, n,
        hidden_size)`` read into ``cache`` from its
        offset, the tokens of each of ``images`` (whole ``(first, end)``
        position ranges among them) reading each other both ways.

        mlx-vlm 0.7.10's ``Gemma3Model.__call__`` and ``LanguageModel.__call__``
        (``mlx_vlm/models/gemma3/language.py``: the input scale, layer ``i``
        global when ``i % sliding_window_pattern == sliding_window_pattern - 1``,
        the final norm, ``lm_head``) with the masks of
        :func:`~missive_mlx.vision_mask.image_mask`; each layer's attention
        keeps the last columns of a mask wider than its keys."""
        import mlx.core as mx

        lm = self.vlm.language_model
        model = lm.model
        h = embeds
        if getattr(model, "scale_inputs_embeds", True):
            h = h * mx.array(model.config.hidden_size**0.5, mx.bfloat16).astype(h.dtype)
        start, n = int(cache[0].offset), int(h.shape[1])
        pattern = int(model.sliding_window_pattern)
        full = image_mask(start, n, 0, images)
        sliding = full
        if pattern > 1:  # layer 0 is a sliding-window layer: what its RotatingKVCache keeps
            kept = min(start, int(cache[0].max_size) - 1)
            sliding = image_mask(start, n, start - kept, images, window=int(model.window_size))
        for i, (layer, c) in enumerate(zip(model.layers, cache, strict=True)):
            h = layer(h, full if i % pattern == pattern - 1 else sliding, c)
        return lm.lm_head(model.norm(h))
