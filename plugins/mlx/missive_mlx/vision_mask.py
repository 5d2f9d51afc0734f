"""Attention masks that read each image's tokens both ways, for the families
of :mod:`missive_mlx.vision` trained so (Gemma 3: :mod:`missive_mlx.vision_gemma3`).

The rule is transformers' for Gemma 3 (`modeling_gemma3.py
<https://github.com/huggingface/transformers/blob/main/src/transformers/models/gemma3/modeling_gemma3.py>`_:
``token_type_ids_mask_function`` given as the ``or_mask_function`` of both
the full and the sliding-window causal masks): a query may read a key when
the causal mask allows it (the key is not after it, and, in a sliding-window
layer, less than ``window`` positions before it) *or* both are tokens of the
same image. llama.cpp does the same for Gemma 3 by decoding an image's chunk
with causal attention off (``mtmd_decode_use_non_causal``,
``tools/mtmd/mtmd.cpp``; its window still bounds how far back a token reads,
which only differs for an image longer than the window: 256 tokens against
Gemma 3's 512 and 1024).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["image_mask"]


def image_mask(
    start: int, n: int, key_start: int, images: Sequence[tuple[int, int]], window: int | None = None
) -> Any:
    """The boolean mask ``(n, start + n - key_start)`` of queries at positions
    ``start .. start + n - 1`` over keys at ``key_start .. start + n - 1``:
    causal (within ``window`` positions back when given), or both in one of
    ``images`` (``(first, end)`` position ranges)."""
    import mlx.core as mx

    queries = mx.arange(start, start + n)[:, None]
    keys = mx.arange(key_start, start + n)[None]
    allowed = keys <= queries
    if window is not None:
        allowed = allowed & (queries - keys < window)
    for first, end in images:
        allowed = allowed | ((queries >= first) & (queries < end) & (keys >= first) & (keys < end))
    return allowed
