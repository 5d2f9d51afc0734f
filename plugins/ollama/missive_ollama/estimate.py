"""Prompt-token estimate for Ollama, which has no tokenize endpoint.

Ollama exposes no tokenizer (``/api/tokenize`` existed briefly in 2024 and was
removed); ``_debug_render_only`` returns the rendered prompt but not its
tokens, and the only exact count is ``prompt_eval_count`` in the last chunk of
an answer (the full prompt, cached part included: ollama/ollama PR #16428,
#17943). So ``count_tokens`` and ``Started`` carry an estimate, and the driver
corrects the final usage with the exact count.

The estimate is ``ceil(chars × tokens_per_char) + 768 × images``: the
characters of every message content, thinking, tool call, tool name and tool
definition (JSON) in the ``/api/chat`` body, plus a flat 768 per image (the
allowance Ollama's own history truncation uses for an image,
``server/routes.go`` ``truncateNativeChatMessages``). ``tokens_per_char``
starts at ``1 / settings.chars_per_token`` and follows the exact counts Ollama
reports (a moving average over prompts of at least 200 characters, where the
chat template's fixed overhead matters less).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["IMAGE_TOKENS", "TokenEstimator", "body_size"]

#: Tokens counted per image (Ollama's own allowance when truncating history).
IMAGE_TOKENS = 768

#: Weight of the newest observation in the moving average.
_ALPHA = 0.5
_MIN_CHARS = 200


def body_size(body: dict[str, Any]) -> tuple[int, int]:
    """``(characters, images)`` of an ``/api/chat`` body's prompt parts."""
    chars = 0
    images = 0
    for message in body.get("messages", []):
        chars += len(message.get("content") or "") + len(message.get("thinking") or "")
        chars += len(message.get("tool_name") or "")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            chars += len(function.get("name", "")) + len(
                json.dumps(function.get("arguments", {}), ensure_ascii=False)
            )
        images += len(message.get("images") or [])
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return chars, images


class TokenEstimator:
    """Estimates prompt tokens of ``/api/chat`` bodies for one model."""

    def __init__(self, chars_per_token: float) -> None:
        self.tokens_per_char = 1.0 / chars_per_token

    def estimate(self, body: dict[str, Any]) -> int:
        """Estimated prompt tokens of ``body`` (at least 1)."""
        chars, images = body_size(body)
        return max(1, math.ceil(chars * self.tokens_per_char) + IMAGE_TOKENS * images)

    def observe(self, body: dict[str, Any], prompt_tokens: int) -> None:
        """Learn from Ollama's exact ``prompt_eval_count`` for ``body``."""
        chars, images = body_size(body)
        text_tokens = prompt_tokens - IMAGE_TOKENS * images
        if chars < _MIN_CHARS or text_tokens <= 0:
            return
        ratio = min(1.5, max(0.05, text_tokens / chars))
        self.tokens_per_char = (1 - _ALPHA) * self.tokens_per_char + _ALPHA * ratio
