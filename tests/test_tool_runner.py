"""The Python SDK's tool runner (``client.beta.messages.tool_runner``) with
its default settings, which thread the conversation on the server: the
first request creates a thread, each later one continues it with only the
tool results.

Three tool rounds against a scripted echo model, streaming and not; every
continue costs exactly what ``count_tokens`` says of the whole conversation.
The same on the real default model: tests/test_threads_default_model.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from sdk_turns import assert_counted_whole, captured

from missive.testing import in_process_app
from missive_echo import tool_loop

CAPS = {"tool_choice": ["auto", "any", "tool", "none"]}
#: The echo model calls ``lookup`` three times, then answers.
ROUNDS = tool_loop("lookup", [{"word": "tea"}, {"word": "milk"}, {"word": "sugar"}], "three lookups done")


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[anthropic.Anthropic, Path]]:
    captures = tmp_path_factory.mktemp("captures")
    models = {"echo": {"driver": "echo", "context_window": 20_000, "settings": {"capabilities": CAPS}}}
    with in_process_app({"server": {"capture_dir": str(captures)}, "models": models}) as app:
        yield app.sdk(timeout=60), captures


@pytest.mark.parametrize("stream", [False, True])
def test_three_tool_rounds_on_one_thread(echo_server: tuple[anthropic.Anthropic, Path], stream: bool) -> None:
    client, captures = echo_server
    before = len(captured(captures))
    calls: list[str] = []

    @anthropic.beta_tool
    def lookup(word: str) -> str:
        """Look a word up."""
        calls.append(word)
        return f"{word}: found"

    runner = client.beta.messages.tool_runner(
        model="echo",
        max_tokens=100,
        system="Use the tool.",
        tools=[lookup],
        messages=[{"role": "user", "content": ROUNDS}],
        **({"stream": True} if stream else {}),
    )
    replies = [item.get_final_message() if stream else item for item in runner]
    assert calls == ["tea", "milk", "sugar"]
    assert [r.stop_reason for r in replies] == ["tool_use", "tool_use", "tool_use", "end_turn"]
    assert replies[-1].content[0].text == "three lookups done"
    records = captured(captures)[before:]
    assert [(r["status"], r["body"]["thread"]["type"]) for r in records] == [
        (200, "create"),
        (200, "continue"),
        (200, "continue"),
        (200, "continue"),
    ]
    bodies = [r["body"] for r in records]
    # Each continue carries only the tool results: no system, no tools, no history.
    assert all(len(b["messages"]) == 1 and "system" not in b and "tools" not in b for b in bodies[1:])
    assert all(b["messages"][0]["content"][0]["type"] == "tool_result" for b in bodies[1:])
    assert_counted_whole(
        client, records, replies, model="echo", system="Use the tool.", tools=bodies[0]["tools"]
    )
