"""Reasoning formats per model family (issue 27): the parser chosen from the
template, the template switches mapped from ``thinking``, outputs in the
family's format parsed at every split point (the reasoning the prompt opened
included), and a multi-turn tool loop rendered with its thinking replayed as
the family's template expects. Templates: :mod:`reasoning_families`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from reasoning_families import FAMILIES, SEED_OSS, Family
from test_reasoning_parsers import run, splits

from missive.chat_template.rendering import render_prompt
from missive.driver.thinking import ThinkingPlan, plan_thinking
from missive.messages.conversation import build_conversation
from missive.reasoning.base import Gemma4ThinkParser, SeedThinkParser
from missive.reasoning.registry import reasoning_parser_class, reasoning_parser_for_template
from missive.testing import generation_request
from missive.tools.render import template_messages

IDS = [f.name for f in FAMILIES]
ENABLED = {"type": "enabled", "budget_tokens": 1024}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
T0, T1, T2 = "First I look up Paris.", "Paris is sunny, I answer.", "Now Rome: call the tool again."


def _render(family: Family, request: Any) -> str:
    messages, extra = template_messages(request, family.template)
    return render_prompt(
        family.template,
        messages,
        bos_token="<s>",
        eos_token="</s>",
        **{**request.thinking.template_kwargs(), **extra},
    )


def _prompt(family: Family, thinking: dict[str, Any] | None) -> str:
    fields: dict[str, Any] = {"tools": [WEATHER]}
    if thinking is not None:
        fields["thinking"] = thinking
    request = generation_request(
        [{"role": "user", "content": "Weather in Paris?"}], max_tokens=2048, **fields
    )
    return _render(family, request)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_parser_chosen_from_the_template(family: Family) -> None:
    assert reasoning_parser_for_template(family.template, {}) == family.parser


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_switch_opens_or_closes_the_reasoning(family: Family) -> None:
    """Thinking on: a template that opens the reasoning leaves the prompt
    inside it (the parser starts there); thinking off closes it or leaves it
    to the model."""
    cls = reasoning_parser_class({}, family.parser)
    on, off = _prompt(family, ENABLED), _prompt(family, None)
    assert (cls.prompt_prefix(on) != "") == family.opens
    # MiniMax-M2 always reasons; Seed-OSS's zero budget opens a reflection it closes at once (below)
    assert (cls.prompt_prefix(off) != "") == (family.name in ("minimax-m2", "seed-oss"))
    if family.name not in ("minimax-m2", "kimi-k2-thinking", "magistral"):  # no switch in these templates
        assert on != off


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_recorded_output_parses_at_every_split_point(family: Family) -> None:
    cls = reasoning_parser_class({}, family.parser)
    opened = cls.prompt_prefix(_prompt(family, ENABLED))
    for pieces in splits(family.output):
        reasoning, text, kinds = run(cls(), [opened, *pieces] if opened else pieces)
        assert (reasoning, text) == (family.reasoning, family.answer), pieces
        assert kinds == ["reasoning", "text"], pieces


def _tool_loop(family: Family) -> str:
    """A conversation of two user questions, each answered through a tool
    call, every assistant turn with kept (signature-verified) thinking, rendered
    with thinking on."""
    call = {"type": "tool_use", "name": "get_weather"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": T0, "signature": "s"},
                {"type": "text", "text": "Let me check."},
                {**call, "id": "toolu_1", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": T1, "signature": "s"},
                {"type": "text", "text": "It is sunny in Paris."},
            ],
        },
        {"role": "user", "content": "And in Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": T2, "signature": "s"},
                {**call, "id": "toolu_2", "input": {"city": "Rome"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "rainy"}]},
    ]
    request = generation_request(messages, max_tokens=2048, tools=[WEATHER], thinking=ENABLED)
    kept = {
        (1, 0): T0,
        (3, 0): T1,
        (5, 0): T2,
    }  # what replay.check_replayed_thinking keeps for valid signatures
    request = dataclasses.replace(request, conversation=build_conversation(request.request, kept))
    return _render(family, request)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_thinking_replayed_as_the_family_renders_it(family: Family) -> None:
    prompt = _tool_loop(family)
    assert "rainy" in prompt and "Rome" in prompt  # the whole loop is rendered
    if family.replayed is None:  # the template never renders past reasoning
        assert not any(t in prompt for t in (T0, T1, T2)), prompt
        return
    # The current tool loop's reasoning, in the family's own tags.
    assert family.replayed.format(R=T2) in prompt, prompt
    # Earlier turns: dropped by the family's default, kept where a switch
    # Missive sets (preserve_thinking, clear_thinking) or the template keeps them.
    assert (T0 not in prompt and T1 not in prompt) == family.earlier_dropped, prompt
    assert prompt.count(T2) == 1


def test_switches_mapped_from_the_request() -> None:
    """``thinking`` and ``output_config.effort`` as each family's variables."""
    off = plan_thinking(None, None).template_kwargs()
    assert off == {
        "enable_thinking": False,
        "thinking": False,
        "reasoning_effort": "low",
        "thinking_budget": 0,
        "preserve_thinking": True,
        "clear_thinking": False,
    }
    request = generation_request([{"role": "user", "content": "x"}], max_tokens=20000, thinking=ENABLED)
    assert request.thinking.template_kwargs()["thinking_budget"] == 1024
    enabled = generation_request(
        [{"role": "user", "content": "x"}],
        max_tokens=20000,
        thinking={"type": "enabled", "budget_tokens": 16384},
    ).thinking.template_kwargs()
    assert (enabled["enable_thinking"], enabled["thinking"], enabled["reasoning_effort"]) == (
        True,
        True,
        "high",
    )
    adaptive = generation_request(
        [{"role": "user", "content": "x"}],
        max_tokens=100,
        thinking={"type": "adaptive"},
        output_config={"effort": "low"},
    ).thinking.template_kwargs()
    assert (adaptive["thinking_budget"], adaptive["reasoning_effort"]) == (
        -1,
        "low",
    )  # -1: Seed-OSS's "unlimited"
    assert ThinkingPlan().template_kwargs() == off


def test_seed_budget_is_announced_and_zero_opens_the_reflection() -> None:
    """Seed-OSS: a budget becomes the template's thinking_budget system turn;
    without thinking (budget 0) the prompt opens <seed:think> and a budget
    reflection, so the output starts inside the reasoning."""
    seed = next(f for f in FAMILIES if f.name == "seed-oss")
    assert "Your thinking budget is 1024 tokens." in _prompt(seed, ENABLED)
    assert "thinking budget" not in _prompt(seed, {"type": "adaptive"})  # -1: unlimited, nothing said
    off = _prompt(seed, None)
    opened = SeedThinkParser.prompt_prefix(off)
    assert opened == "<seed:think><seed:cot_budget_reflect>" and off.endswith(opened)
    output = "Answer at once.</seed:cot_budget_reflect>\n</seed:think>The weather is fine."
    for pieces in splits(output):
        reasoning, text, _ = run(SeedThinkParser(), [opened, *pieces])
        assert reasoning == "<seed:cot_budget_reflect>Answer at once.</seed:cot_budget_reflect>", pieces
        assert text == "The weather is fine.", pieces
    assert SEED_OSS  # the template the family row uses


def test_gemma4_thought_channel_only_before_the_answer() -> None:
    """The thought channel is reasoning only at the start; an empty channel
    (thinking off) yields no reasoning; a later channel marker stays text."""
    assert run(Gemma4ThinkParser(), ["<|channel>thought\n<channel|>Hi."]) == ("", "Hi.", ["text"])
    assert run(Gemma4ThinkParser(), ["Hi <|channel>thought\nx<channel|>"]) == (
        "",
        "Hi <|channel>thought\nx<channel|>",
        ["text"],
    )
    reasoning, text, _ = run(Gemma4ThinkParser(), ["<|channel>thought\nCut off by max_tok"])
    assert (reasoning, text) == ("Cut off by max_tok", "")
    # harmony's marker is not Gemma 4's, nor the other way round
    assert reasoning_parser_for_template("<|channel|>analysis", {}) == "harmony"
    assert reasoning_parser_for_template("<|channel>thought", {}) == "gemma4_thought"
