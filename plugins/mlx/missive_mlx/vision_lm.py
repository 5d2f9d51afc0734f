"""mlx-lm's model interface over an mlx-vlm language model, for
:mod:`missive_mlx.vision`: explicit M-RoPE positions (Qwen) and deepstack
rows (Qwen3-VL) for every forward pass, from the cache's offset, images read
whole in one pass (Gemma 3: :class:`Plan`), and mlx-lm's cache classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from missive.api import ApiError

__all__ = ["Plan", "VisionLM"]


@dataclass
class Plan:
    """The prompt part handed to ``generate_step`` for a family whose image
    tokens read each other both ways, so each image is read in one pass.

    ``mlx_lm.generate_step`` cuts the prompt into chunks of
    ``prefill_step_size`` tokens wherever they fall: a chunk that ends inside
    an image is run on to the image's end (``ids`` and ``embeds`` hold those
    tokens), and the next chunk's tokens the cache holds already are skipped.

    Attributes:
        start: the position of ``ids[0]``.
        handed: the tokens handed to ``generate_step`` (``ids`` may run past
            them, to the end of the image they end inside).
        ids: token ids ``(m,)``; embeds: their embeddings ``(m, hidden_size)``.
        images: the prompt's images, ``(first, end)`` position ranges.
        cursor: the position of the next token ``generate_step`` hands over.
    """

    start: int
    handed: int
    ids: Any
    embeds: Any
    images: list[tuple[int, int]]
    cursor: int


class VisionLM:
    """mlx-lm's model interface (``model(tokens, cache=, input_embeddings=)``
    returning logits; ``layers``; ``make_cache``) over an mlx-vlm model's
    language model, with explicit M-RoPE positions for Qwen and Qwen3-VL's
    deepstack rows (see the module documentation).

    Attributes:
        positions: M-RoPE positions of the current prompt, ``(3, 1, n)``;
            None before a prompt with images (positions are then the index
            plus :attr:`delta`).
        delta: position minus index of the tokens past :attr:`positions`.
        visual: positions of the deepstack rows of the last prompt part
            read (Qwen3-VL), in order.
        deepstack: those rows, one ``(len(visual), hidden_size)`` array a
            layer from the first.
        plan: the prompt part being read, for a family whose images are read
            in one pass (:class:`Plan`), None otherwise and once read.
    """

    def __init__(self, vlm: Any, mrope: bool, forward: Callable[..., Any] | None = None) -> None:
        self.vlm = vlm
        self.forward = forward  # the family's forward pass with its images read both ways
        self.plan: Plan | None = None  # set by Vision.inputs for such a family
        self._empty: Any = None  # logits of no token, for a chunk read already
        self.language_model = vlm.language_model
        self.mrope = mrope
        self.positions: Any = None
        self.delta = 0
        self.prompt: list[int] | None = None  # the token list positions were set for
        self.visual: list[int] = []  # absolute positions of the deepstack rows below
        self.deepstack: list[Any] = []  # per layer: (len(visual), hidden_size)

    @property
    def layers(self) -> Any:
        return self.language_model.layers

    def make_cache(self) -> list[Any]:
        """The language model's caches (its ``make_cache``: Gemma 3's
        ``RotatingKVCache`` of its sliding-window layers), as mlx-lm's classes
        of the same kind, which the driver's prompt cache, KV quantization
        and memory probe know; ``KVCache`` a layer without one."""
        from mlx_lm.models.cache import KVCache, RotatingKVCache

        if not hasattr(self.language_model, "make_cache"):
            return [KVCache() for _ in self.language_model.layers]
        caches = []
        for cache in self.language_model.make_cache():
            kind = type(cache).__name__
            if kind == "KVCache":
                cache = KVCache()
            elif kind == "RotatingKVCache":
                cache = RotatingKVCache(max_size=cache.max_size, keep=cache.keep)
            caches.append(cache)
        return caches

    def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
        if self.plan is not None and cache:
            return self._planned(self.plan, int(inputs.shape[1]), cache)
        return self._call(inputs, cache, input_embeddings)

    def _planned(self, plan: Plan, length: int, cache: list[Any]) -> Any:
        """Logits of the next ``length`` tokens of ``plan``: from the cache's
        offset (past those it read ahead) to their end, or to the end of the
        image they end inside; the family's :attr:`forward` when an image is
        among them."""
        first = plan.cursor
        plan.cursor += length
        if plan.cursor >= plan.start + plan.handed:
            self.plan = None  # the last part: tokens after it are generated ones
        offset, end = int(cache[0].offset), first + length
        end = max([end] + [e for f, e in plan.images if f < end < e])
        if offset < first or any(f < offset < e for f, e in plan.images):  # never: an image is read whole
            raise ApiError(f"the cache holds {offset} tokens, the prompt part {first}: part of an image")
        if offset >= end:  # read ahead with the image the last part ended inside
            return self._empty
        ids = plan.ids[None, offset - plan.start : end - plan.start]
        embeds = plan.embeds[None, offset - plan.start : end - plan.start]
        images = [(f, e) for f, e in plan.images if f < end and e > offset]
        if images and self.forward is not None:
            logits = self.forward(embeds, cache, images)
        else:
            logits = self._call(ids, cache, embeds)
        import mlx.core as mx

        self._empty = mx.zeros((1, 0, int(logits.shape[-1])), logits.dtype)  # holds nothing of logits
        return logits

    def _call(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
        extra: dict[str, Any] = {}
        if self.mrope:
            offset = int(cache[0].offset) if cache else 0
            extra["position_ids"] = self._positions(offset, int(inputs.shape[1]))
        if self.visual:
            extra.update(self._deepstack(int(cache[0].offset) if cache else 0, int(inputs.shape[1])))
        out = self.language_model(inputs, inputs_embeds=input_embeddings, cache=cache, **extra)
        return out.logits

    def _deepstack(self, offset: int, length: int) -> dict[str, Any]:
        """Qwen3-VL's deepstack arguments for the tokens at ``offset ..``: the
        mask of their image positions ``(1, length)`` and the rows of each
        layer's deepstack features there; none when no image is among them."""
        import mlx.core as mx

        rows = [i for i, p in enumerate(self.visual) if offset <= p < offset + length]
        if not rows:
            return {}
        mask = [False] * length
        for i in rows:
            mask[self.visual[i] - offset] = True
        index = mx.array(rows)
        return {
            "visual_pos_masks": mx.array([mask]),
            "deepstack_visual_embeds": [layer[index] for layer in self.deepstack],
        }

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
