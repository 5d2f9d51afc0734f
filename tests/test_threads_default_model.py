"""Message threads on the embedded default model (SmolLM2-135M via llama.cpp),
which answers for real.

A continue renders exactly the prompt of the whole conversation: its usage
equals ``count_tokens`` of that conversation, and it reads at least the
previous prompt from the prefix cache (the thread changes nothing the cache
sees). Through the SDK's thread helper and its tool runner, both with their
default settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from sdk_turns import assert_counted_whole, captured, prompt

from missive.testing import live_server

#: Test tier (docs/contributing.md): live_server with no [models]: the default model
pytestmark = pytest.mark.model

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def smol_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[anthropic.Anthropic, Path]]:
    captures = tmp_path_factory.mktemp("captures")
    with live_server({"server": {"capture_dir": str(captures)}}) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=600), captures


@pytest.mark.parametrize("stream", [False, True])
def test_thread_helper_turns_cost_what_the_whole_conversation_counts(
    smol_server: tuple[anthropic.Anthropic, Path],
    stream: bool,
) -> None:
    client, _ = smol_server
    system = "You are a helpful assistant."
    # The helper takes no temperature (ThreadCreateParams): sent as an extra field every turn.
    thread = client.beta.messages.thread(
        model=MODEL, max_tokens=24, system=system, extra_body={"temperature": 0}
    )
    replies: list[Any] = []
    for question in ("Name a fruit.", "Name a colour.", "Name an animal."):
        if stream:
            with thread.stream({"role": "user", "content": question}) as events:
                replies.append(events.get_final_message())
        else:
            replies.append(thread.send({"role": "user", "content": question}))
        sent = list(thread.messages)[:-1]  # this turn's prompt: everything but its reply
        counted = client.beta.messages.count_tokens(model=MODEL, system=system, messages=sent)
        assert prompt(replies[-1]) == counted.input_tokens
    for before, after in zip(replies, replies[1:], strict=False):
        assert after.usage.cache_read_input_tokens >= prompt(before)


def test_three_tool_rounds_with_the_tool_runner(smol_server: tuple[anthropic.Anthropic, Path]) -> None:
    """The forced tool makes every reply a call; ``max_iterations`` stops the loop after the third."""
    client, captures = smol_server
    before = len(captured(captures))
    calls: list[str] = []

    @anthropic.beta_tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        calls.append(city)
        return f"It is 10:{len(calls)}0 in {city}."

    system = "You tell the time by calling get_time."
    choice = {"type": "tool", "name": "get_time"}
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=60,
        system=system,
        tools=[get_time],
        tool_choice=choice,
        max_iterations=3,
        messages=[{"role": "user", "content": "What time is it in Paris?"}],
        extra_body={"temperature": 0},
    )
    replies = list(runner)
    assert len(replies) == 3 and len(calls) == 3
    assert all(r.stop_reason == "tool_use" and r.content[-1].type == "tool_use" for r in replies)
    records = captured(captures)[before:]
    assert [(r["status"], r["body"]["thread"]["type"]) for r in records] == [
        (200, "create"),
        (200, "continue"),
        (200, "continue"),
    ]
    assert_counted_whole(
        client,
        records,
        replies,
        cached=True,
        model=MODEL,
        system=system,
        tools=records[0]["body"]["tools"],
        tool_choice=choice,
    )
