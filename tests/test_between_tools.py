"""``thinking: {"type": "between_tools"}`` through the official SDK
(core/missive/thinking/between_tools.py): thinking off, the text a model
writes before a tool call returned as a signed thinking block, the text
after the last call (or of an answer without calls) as text; the model's own
reasoning dropped but counted; replayed progress rendered as the text it
was; ``disabled`` where no tool call can happen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import in_process_app
from missive.thinking.signing import Signer
from missive_echo import script

KEY = "between-tools-test-key-012345"
TOOLS4 = ["auto", "any", "tool", "none"]
CONFIG: dict[str, Any] = {
    "thinking": {"signing_key": KEY},
    "models": {
        "echo": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {"capabilities": {"tool_choice": TOOLS4, "thinking": True}},
        },
        "hermes": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {"tool_parser": "hermes", "capabilities": {"tool_choice": TOOLS4}},
        },
        "report": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {"report": True, "capabilities": {"tool_choice": TOOLS4}},
        },
    },
}
BETWEEN = {"type": "between_tools"}
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    with in_process_app(CONFIG) as app:
        yield app.sdk(timeout=60)


def call(q: str) -> dict[str, Any]:
    return {"tool_call": {"name": "lookup", "id": f"call_{q}", "arguments": [json.dumps({"q": q})]}}


def ask(steps: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": steps}]


def test_progress_before_calls_is_thinking_and_the_rest_text(client: anthropic.Anthropic) -> None:
    steps = script(
        {"thinking": "my own reasoning", "tokens": 3},
        {"text": "Let me look "},
        {"text": "that up."},
        call("tea"),
        {"text": "\n"},
        call("coffee"),
    )
    kwargs: dict[str, Any] = dict(
        model="echo", max_tokens=200, tools=[LOOKUP], messages=ask(steps), thinking=BETWEEN
    )
    plain = client.beta.messages.create(**kwargs)
    with client.beta.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert streamed.model_dump(exclude={"id"}) == plain.model_dump(exclude={"id"})
    assert [b.type for b in plain.content] == ["thinking", "tool_use", "tool_use"]
    progress = plain.content[0]
    assert progress.type == "thinking" and progress.thinking == "Let me look that up."
    assert Signer(KEY.encode()).verify(progress.signature, progress.thinking, turn=0, block=0)
    assert plain.stop_reason == "tool_use"
    assert plain.usage.output_tokens == 3 + 2 + 1 + 1 + 1  # reasoning, progress, calls, newline: all counted


def test_text_after_the_last_call_or_without_calls_stays_text(client: anthropic.Anthropic) -> None:
    after = client.beta.messages.create(
        model="echo",
        max_tokens=200,
        tools=[LOOKUP],
        thinking=BETWEEN,
        messages=ask(script({"text": "Checking."}, call("x"), {"text": "Done, it means y."})),
    )
    assert [
        (b.type, getattr(b, "thinking", getattr(b, "text", None)))
        for b in after.content
        if b.type != "tool_use"
    ] == [
        ("thinking", "Checking."),
        ("text", "Done, it means y."),
    ]
    plain = client.beta.messages.create(
        model="echo",
        max_tokens=200,
        tools=[LOOKUP],
        thinking=BETWEEN,
        messages=ask(script({"text": "Just an answer."})),
    )
    assert [b.type for b in plain.content] == ["text"] and plain.content[0].text == "Just an answer."  # type: ignore[union-attr]


def test_without_tools_it_is_disabled(client: anthropic.Anthropic) -> None:
    for extra in ({}, {"tools": [LOOKUP], "tool_choice": {"type": "none"}}):
        msg = client.beta.messages.create(
            model="echo",
            max_tokens=200,
            thinking=BETWEEN,
            **extra,
            messages=ask(script({"thinking": "hidden"}, {"text": "Answer."})),
        )
        assert [b.type for b in msg.content] == ["text"] and msg.usage.output_tokens == 2


def test_tool_calls_written_as_text_by_the_model(client: anthropic.Anthropic) -> None:
    """A model whose calls are parsed out of its text (hermes markup)."""
    text = 'I will search.\n<tool_call>\n{"name": "lookup", "arguments": {"q": "tea"}}\n</tool_call>'
    msg = client.beta.messages.create(
        model="hermes",
        max_tokens=200,
        tools=[LOOKUP],
        thinking=BETWEEN,
        messages=ask(script({"text": text})),
    )
    assert [b.type for b in msg.content] == ["thinking", "tool_use"]
    assert msg.content[0].thinking == "I will search."  # type: ignore[union-attr]


def test_replayed_progress_is_rendered_as_the_text_it_was(client: anthropic.Anthropic) -> None:
    signer = Signer(KEY.encode())
    progress = "Let me look that up."
    history = [
        {"role": "user", "content": "What is tea?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": progress,
                    "signature": signer.sign(progress, turn=0, block=0),
                },
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "tea"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a drink"}],
        },
    ]
    msg = client.beta.messages.create(
        model="report", max_tokens=200, tools=[LOOKUP], thinking=BETWEEN, messages=history
    )
    turns = json.loads(msg.content[0].text)["turns"]  # type: ignore[union-attr]
    assert turns[1]["role"] == "assistant"
    assert turns[1]["blocks"][:2] == [
        {"type": "text", "text": progress},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "tea"}},
    ]
