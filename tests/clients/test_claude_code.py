"""The real Claude Code CLI (pinned in conftest.py) against a live Missive.

The echo driver plays a script file per test (Claude Code writes the
messages, so the script cannot be a message). Every request Claude Code sends
is captured (``server.capture_dir``) and its shape asserted, so a Claude Code
release that changes what it sends fails here first.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anthropic
import pytest

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import ClaudeCode, Missive

BILLING_PREFIX = "x-anthropic-billing-header:"


def _count(url: str, body: dict[str, Any]) -> int:
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    return client.messages.count_tokens(
        model=body["model"], messages=body["messages"], system=body["system"], tools=body["tools"]
    ).input_tokens


def test_plain_answer_and_request_shape(missive: Missive, claude: ClaudeCode) -> None:
    missive.script({"script": [{"text": "Hello"}, {"text": " from"}, {"text": " Missive"}]})
    run = claude("say hello")
    assert run.returncode == 0, run.stderr
    result = run.json()
    assert result["is_error"] is False and result["result"] == "Hello from Missive"

    sent = missive.captures()
    assert len(sent) == 1
    req = sent[0]
    body, headers = req["body"], req["headers"]
    assert req["method"] == "POST" and req["query"] == "beta=true" and req["status"] == 200
    assert headers["x-api-key"] == "[redacted]"
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["user-agent"].startswith("claude-cli/")
    assert "claude-code-20250219" in headers["anthropic-beta"]
    assert body["stream"] is True and body["model"] == "echo"
    assert body["max_tokens"] == 32000
    assert body["thinking"]["type"] == "adaptive"
    assert (
        "context_management" in body and "context_management" not in req["ignored"]
    )  # applied: missive.context_management.editing
    names = {t["name"] for t in body["tools"]}
    assert {"Bash", "Write", "Read", "Edit"} <= names, names
    # Mid-conversation system messages: the prompt's environment section.
    assert any(m["role"] == "system" for m in body["messages"])
    assert body["messages"][0]["role"] == "user"
    user_text = " ".join(b["text"] for b in body["messages"][0]["content"] if b["type"] == "text")
    assert "say hello" in user_text

    # The billing header leads the system blocks, changes per build and is stripped:
    # the count is the same without it or with other text in it, and Claude
    # Code's usage equals Missive's count of the body it sent.
    assert body["system"][0]["text"].startswith(BILLING_PREFIX)
    counted = _count(missive.url, body)
    assert result["usage"]["input_tokens"] + result["usage"]["cache_read_input_tokens"] == counted
    without = copy.deepcopy(body)
    del without["system"][0]
    changed = copy.deepcopy(body)
    changed["system"][0]["text"] = BILLING_PREFIX + " cc_version=0.0.0; other words here;"
    renamed = copy.deepcopy(body)
    renamed["system"][0]["text"] = "not-a-billing-header: four words here"
    assert _count(missive.url, without) == counted == _count(missive.url, changed)
    assert _count(missive.url, renamed) == counted + 4  # the comparison above can fail


def test_tool_loop_writes_a_file(missive: Missive, claude: ClaudeCode) -> None:
    target = claude.work / "notes" / "hello.txt"
    content = 'héllo {"not": "json"}\nsecond line\n'
    args = json.dumps({"file_path": str(target), "content": content}, ensure_ascii=False)
    # Split inside the key, right after a backslash escape and inside a multibyte char's word.
    cut_key, cut_escape = args.index("path") + 2, args.index("\\n") + 1
    fragments = [args[:1], args[1:cut_key], args[cut_key:cut_escape], args[cut_escape:]]
    assert "".join(fragments) == args
    missive.script(
        {
            "script": [{"text": "Writing it."}, {"tool_call": {"name": "Write", "arguments": fragments}}],
            "stop_reason": "tool_use",
        },
        {"script": [{"text": "Wrote "}, {"text": "hello.txt"}]},
    )
    run = claude("write the notes file")
    assert run.returncode == 0, run.stderr
    result = run.json()
    assert result["is_error"] is False and result["result"] == "Wrote hello.txt"
    assert result["num_turns"] == 2
    assert target.read_text(encoding="utf-8") == content

    first, second = missive.captures()
    write = next(t for t in first["body"]["tools"] if t["name"] == "Write")
    schema = write["input_schema"]
    assert set(schema["required"]) == {"file_path", "content"}, schema
    assert schema["properties"]["file_path"]["type"] == "string"
    # The second request replays the call and carries the tool result.
    assistant = [m for m in second["body"]["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1
    call = next(b for b in assistant[0]["content"] if b["type"] == "tool_use")
    assert call["name"] == "Write" and call["input"] == {"file_path": str(target), "content": content}
    results = [
        b
        for m in second["body"]["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [r["tool_use_id"] for r in results] == [call["id"]]
    assert not results[0].get("is_error")


def test_tool_loop_runs_bash(missive: Missive, claude: ClaudeCode) -> None:
    args = json.dumps(
        {"command": "printf 'from bash' > out.txt && echo done-$((6*7))", "description": "write out.txt"}
    )
    missive.script(
        {
            "script": [{"tool_call": {"name": "Bash", "arguments": [args[:10], args[10:]]}}],
            "stop_reason": "tool_use",
        },
        {"match": "done-42", "script": [{"text": "The command said done-42."}]},
    )
    run = claude("run the command")
    assert run.returncode == 0, run.stderr
    assert run.json()["result"] == "The command said done-42."
    assert (claude.work / "out.txt").read_text() == "from bash"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"type": "api_error", "message": "scripted failure"}, 500),
        ({"type": "overloaded_error", "message": "scripted failure", "retry_after": 1}, 529),
    ],
)
def test_mid_stream_error_is_reported(
    missive: Missive, claude: ClaudeCode, error: dict[str, Any], status: int
) -> None:
    missive.script({"script": [{"text": "Partial"}, {"text": " answer"}, {"error": error}]})
    run = claude("this fails", env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    assert run.returncode != 0
    result = run.json()
    assert result["is_error"] is True
    assert result["api_error_status"] == status
    assert "scripted failure" in result["result"]
    sent = missive.captures()
    # The stream fails after its start (HTTP 200, then an SSE error event);
    # Claude Code then retries without streaming, which fails with the status.
    assert sent[0]["body"]["stream"] is True and sent[0]["status"] == 200
    assert 1 <= len(sent) <= 3
    assert all(r["status"] == status for r in sent[1:])


def test_prompt_too_long_is_shown(missive: Missive, claude: ClaudeCode) -> None:
    missive.script({"script": [{"text": "never played"}]})
    run = claude("hello", model="echo-small")
    assert run.returncode != 0
    result = run.json()
    assert result["is_error"] is True
    assert result["terminal_reason"] == "prompt_too_long"
    assert "too long" in result["result"].lower() and "999" in result["result"]
    sent = missive.captures()
    assert len(sent) == 1 and sent[0]["status"] == 400  # understood: no retry


def test_thinking_block_is_replayed(missive: Missive, claude: ClaudeCode) -> None:
    """A streamed, signed thinking block comes back with the tool result and
    reaches the model's prompt (the second answer echoes the replayed thinking)."""
    args = json.dumps({"command": "echo done-$((6*7))", "description": "compute"})
    missive.script(
        {
            "script": [
                {"thinking": "I should run"},
                {"thinking": " the command first."},
                {"tool_call": {"name": "Bash", "arguments": [args]}},
            ],
            "stop_reason": "tool_use",
        },
        {"match": "done-42", "script": [{"echo_thinking": True}]},
    )
    run = claude("run the command")
    assert run.returncode == 0, run.stderr
    assert run.json()["result"] == "replayed thinking: I should run the command first."

    first, second = missive.captures()
    # Claude Code's default: thinking allowed, its text not displayed ("omitted"),
    # so the block comes back empty and the sealed signature carries the reasoning.
    assert first["body"]["thinking"] == {"type": "adaptive", "display": "omitted"}
    assistant = [m for m in second["body"]["messages"] if m["role"] == "assistant"]
    thinking = [b for b in assistant[0]["content"] if b["type"] == "thinking"]
    assert [t["thinking"] for t in thinking] == [""]
    assert thinking[0]["signature"].startswith("msv1z.")
    assert second["dropped_thinking"] == []


def test_missive_claude_runs_claude_code(missive: Missive, claude: ClaudeCode) -> None:
    """``missive claude -- ARGS`` runs the ``claude`` on PATH with the environment it prints."""
    missive.script({"script": [{"text": "Through"}, {"text": " missive claude"}]})
    env = {
        "PATH": f"{claude.binary.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(claude.home),
        "CLAUDE_CONFIG_DIR": str(claude.home / ".claude"),
        "DISABLE_AUTOUPDATER": "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "missive",
            "claude",
            "--url",
            missive.url,
            "--model",
            "echo-100k",
            "--",
            "-p",
            "hello",
            "--output-format",
            "json",
        ],
        cwd=claude.work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["result"] == "Through missive claude"
    (req,) = missive.captures()
    assert req["headers"]["authorization"] == "[redacted]"  # ANTHROPIC_AUTH_TOKEN is sent as a bearer token
    assert "x-api-key" not in req["headers"]
    assert req["body"]["model"] == "echo-100k"  # ANTHROPIC_MODEL
    assert req["body"]["max_tokens"] == 25000  # CLAUDE_CODE_MAX_OUTPUT_TOKENS: a quarter of the context
