"""mlx-lm's model interface over an mlx-vlm language model, for
:mod:`missive_mlx.vision`: explicit M-RoPE positions (Qwen) and deepstack
rows (Qwen3-VL) for every forward pass, from the cache's offset, and
mlx-lm's cache classes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VisionLM"]


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
    """

    def __init__(self, vlm: Any, mrope: bool) -> None:
        self.vlm = vlm
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
