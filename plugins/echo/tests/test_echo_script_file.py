"""``settings.script_file``: scripts picked per request from a file, for
clients whose messages a test does not write (Claude Code, opencode)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import in_process_app
from missive_echo import script

TOOLS = [
    {"name": "Write", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}
]


@pytest.fixture(scope="module")
def script_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("echo-script") / "script.json"


@pytest.fixture(scope="module")
def client(script_path: Path) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 1000,
                "settings": {
                    "script_file": str(script_path),
                    "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]},
                },
            }
        }
    }
    with in_process_app(config) as app:
        yield app.sdk()


def _write(path: Path, entries: Any) -> None:
    path.write_text(json.dumps(entries))


def _text(msg: Any) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


def test_nth_script_by_assistant_turns(client: anthropic.Anthropic, script_path: Path) -> None:
    _write(
        script_path,
        [{"script": [{"text": "first"}]}, {"script": [{"text": "second"}], "stop_reason": "end_turn"}],
    )
    one = client.messages.create(
        model="echo", max_tokens=50, messages=[{"role": "user", "content": "anything"}]
    )
    assert _text(one) == "first"
    two = client.messages.create(
        model="echo",
        max_tokens=50,
        messages=[
            {"role": "user", "content": "anything"},
            {"role": "assistant", "content": "first"},
            {"role": "user", "content": "more"},
        ],
    )
    assert _text(two) == "second"


def test_past_the_end_echoes(client: anthropic.Anthropic, script_path: Path) -> None:
    _write(script_path, [{"script": [{"text": "only"}]}])
    msg = client.messages.create(
        model="echo",
        max_tokens=50,
        messages=[
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "only"},
            {"role": "user", "content": "echo these words"},
        ],
    )
    assert _text(msg) == "echo these words"


def test_tool_call_then_match_on_tool_result(client: anthropic.Anthropic, script_path: Path) -> None:
    args = json.dumps({"file_path": "/tmp/x"})
    _write(
        script_path,
        [
            {
                "script": [{"tool_call": {"name": "Write", "arguments": [args[:3], args[3:]]}}],
                "stop_reason": "tool_use",
            },
            {"match": "written ok", "script": [{"text": "saw the result"}]},
        ],
    )
    first = client.messages.create(
        model="echo", max_tokens=50, tools=TOOLS, messages=[{"role": "user", "content": "write it"}]
    )
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "Write" and call.input == {"file_path": "/tmp/x"}
    # The match entry wins over position (there is no second positional entry).
    second = client.messages.create(
        model="echo",
        max_tokens=50,
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "write it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call.id, "name": "Write", "input": call.input}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "file written ok"}],
            },
        ],
    )
    assert _text(second) == "saw the result"


def test_inline_script_wins_and_file_is_reread(client: anthropic.Anthropic, script_path: Path) -> None:
    _write(script_path, [{"script": [{"text": "from-file"}]}])
    inline = client.messages.create(
        model="echo", max_tokens=50, messages=[{"role": "user", "content": script({"text": "inline"})}]
    )
    assert _text(inline) == "inline"
    _write(script_path, [{"script": [{"text": "rewritten"}]}])
    again = client.messages.create(model="echo", max_tokens=50, messages=[{"role": "user", "content": "x"}])
    assert _text(again) == "rewritten"


@pytest.mark.parametrize(
    "content", ["not json", json.dumps({"script": []}), json.dumps([{"text": "no script"}])]
)
def test_broken_file_is_an_api_error(client: anthropic.Anthropic, script_path: Path, content: str) -> None:
    script_path.write_text(content)
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(model="echo", max_tokens=50, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "api_error"
    assert "script_file" in caught.value.body["error"]["message"]
