"""The core's 400 about the request a model's fallback would get
(``fallbacks.N: ...``, :mod:`missive.routing.chain`) reaches an OpenAI
client in its request's terms, through the official ``openai`` SDK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

CONFIG: dict[str, Any] = {
    "routing": {"default_fallbacks": True},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000},
        "echo-think": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"thinking": True}},
        },
        # a fallback thinking with a budget: the request's maximum must exceed it
        "echo-budget": {
            "driver": "echo",
            "context_window": 1000,
            "fallbacks": [{"model": "echo-think", "thinking": {"type": "enabled", "budget_tokens": 2000}}],
        },
        # a fallback with an effort the Messages API does not have
        "echo-effort": {
            "driver": "echo",
            "context_window": 1000,
            "fallbacks": [{"model": "echo", "output_config": {"effort": "extreme"}}],
        },
    },
}
USER = [{"role": "user", "content": "hi"}]


def test_fallback_errors_in_the_request_terms(
    client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]
) -> None:
    error = refused(
        client.chat.completions.create, model="echo-budget", messages=USER, max_completion_tokens=100
    )
    assert "fallbacks." not in error.message
    assert error.message.endswith(
        "the request as sent to the model's fallback 0: "
        "`max_completion_tokens` must be greater than `thinking.budget_tokens`"
    )
    error = refused(client.responses.create, model="echo-budget", input="hi", max_output_tokens=100)
    assert error.message.endswith(
        "fallback 0: `max_output_tokens` must be greater than `thinking.budget_tokens`"
    )
    error = refused(client.chat.completions.create, model="echo-effort", messages=USER)
    assert "fallbacks." not in error.message and error.param == "reasoning_effort"
    assert "the request as sent to the model's fallback 0: reasoning_effort: expected 'low'" in error.message
    error = refused(client.responses.create, model="echo-effort", input="hi")
    assert error.param == "reasoning.effort" and "fallback 0: reasoning.effort: expected" in error.message
