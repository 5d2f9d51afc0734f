"""The image token estimate, for drivers that cannot count image tokens exactly.

``ceil(width x height / 750)``: the Messages API's documented approximation
for Claude models ("Vision" page, "Calculate image costs"), after the image
is fitted to the model (so a 1568 x 1568 image is about 3,279 tokens, a
1092 x 1092 one about 1,590). Local vision models differ (LLaVA 1.5: 576 per
image; Qwen2-VL: one token per 28 x 28 patch, about ``w x h / 784``; Gemma 3:
256), so a driver that declares ``count_tokens = "exact"`` and can ask its
backend (vLLM's ``/tokenize``) should; the others add this estimate and
their counts are approximate.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from ..driver.media import ImageInput

__all__ = ["PIXELS_PER_TOKEN", "estimate_image_tokens", "iter_images", "conversation_image_tokens"]

PIXELS_PER_TOKEN = 750


def estimate_image_tokens(width: int, height: int) -> int:
    """Estimated prompt tokens of a ``width`` x ``height`` image (at least 1)."""
    return max(1, math.ceil(width * height / PIXELS_PER_TOKEN))


def iter_images(conversation: Any) -> Iterator[ImageInput]:
    """Every :class:`ImageInput` of a conversation's turns, ``tool_result``
    contents included, in order."""
    for turn in conversation.turns:
        for block in turn.blocks:
            if isinstance(block, ImageInput):
                yield block
            content = getattr(block, "content", None)
            if getattr(block, "type", None) == "tool_result" and isinstance(content, list):
                for inner in content:
                    if isinstance(inner, ImageInput):
                        yield inner


def conversation_image_tokens(conversation: Any) -> int:
    """Sum of :func:`estimate_image_tokens` over :func:`iter_images`."""
    return sum(estimate_image_tokens(i.width, i.height) for i in iter_images(conversation))
