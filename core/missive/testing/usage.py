"""A request through the SDK whose usage is checked against ``count_tokens``."""

from __future__ import annotations

from typing import Any

__all__ = ["ask_counted"]


def ask_counted(
    client: Any, model: str, messages: list[dict[str, Any]], system: str, max_tokens: int, **extra_body: Any
) -> tuple[Any, int]:
    """Send ``messages`` with ``client.messages.create`` (an ``anthropic.Anthropic``;
    ``extra_body`` such as ``temperature=0.0``) and count them with
    ``client.messages.count_tokens``.

    Returns:
        The message and the counted prompt tokens.

    Raises:
        AssertionError: the usage is not exact (``input_tokens +
            cache_read_input_tokens`` is not the count).
    """
    message = client.messages.create(
        model=model, max_tokens=max_tokens, system=system, messages=messages, extra_body=extra_body or None
    )
    counted: int = client.messages.count_tokens(model=model, system=system, messages=messages).input_tokens
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted, (usage, counted)
    return message, counted
