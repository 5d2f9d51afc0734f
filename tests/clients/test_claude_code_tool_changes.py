"""Claude Code 2.1.332 adding a tool mid-conversation, against a live Missive.

With ToolSearch unavailable (``--disallowedTools ToolSearch``), a tool an MCP
server announces mid-conversation (``notifications/tools/list_changed``) is
not put into ``tools`` in place: Claude Code sends it as a ``tool_addition``
block naming it (the tool is in ``tools`` with ``defer_loading: true``)
in a ``role: "system"`` message (beta
``mid-conversation-tool-changes-2026-07-01``), and keeps that message where
it stands in every later request, so the prompt before it stays the cached
prefix. Missive renders the definition there (:mod:`missive.tools.changes`),
counts it, and lets the model call the tool.

What 2.1.332 does not send, found by this test's server: a tool the MCP server
withdraws stays in ``tools`` (no ``tool_removal``); tests/test_tool_changes.py
covers the removal through the SDK's tool runner.

The echo driver plays the model (its script file matches what each request's
last user turn shows it); the ``report`` model answers with the conversation
the driver received, to see where the definition was rendered.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

#: Test tier (docs/contributing.md): a live server through scripted_missive (imported where it is
#: used, so not read)
pytestmark = pytest.mark.live

pytest.importorskip("mcp")

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive

ADDED = "mcp__tides__harbour_master"
#: The fields count_tokens takes, of what Claude Code sends to /v1/messages.
COUNTED = ("model", "messages", "system", "tools", "tool_choice", "thinking", "context_management")


@pytest.fixture
def harbour_missive(tmp_path: Path) -> Iterator[Missive]:
    """The scripted echo models, and ``report``: an echo model answering with
    what it received, counting the offered tools' words."""
    from tests.clients.conftest import TOOL_CHOICES, scripted_missive

    settings = {"report": True, "count_tools": True, "capabilities": TOOL_CHOICES}
    report = {"driver": "echo", "context_window": 200_000, "settings": settings}
    with scripted_missive(tmp_path, extra_models={"report": report}) as server:
        yield server


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "script": [{"tool_call": {"name": name, "arguments": [json.dumps(arguments)]}}],
        "stop_reason": "tool_use",
    }


def uncached(value: Any) -> Any:
    """``value`` without its ``cache_control`` marks (Claude Code moves them
    to the newest turn)."""
    if isinstance(value, dict):
        return {k: uncached(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [uncached(v) for v in value]
    return value


def additions(body: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(message index, block) of each ``tool_addition`` in a request body."""
    return [
        (index, uncached(block))
        for index, message in enumerate(body["messages"])
        if message["role"] == "system" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_addition"
    ]


def test_a_tool_an_mcp_server_adds_is_offered_where_claude_code_adds_it(
    claude_bin: Path, harbour_missive: Missive, tmp_path: Path
) -> None:
    from tests.clients.conftest import claude_code_for

    claude = claude_code_for(claude_bin, harbour_missive, tmp_path)
    server = Path(__file__).with_name("mcp_harbour.py")
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"tides": {"command": sys.executable, "args": [str(server)]}}})
    )
    harbour_missive.script(
        {"match": "HARBOUR-OK", "script": [{"text": "The harbour master says the tide is in."}]},
        {"match": "WAITED-OK", **call(ADDED, {"question": "high tide?"})},
        # A turn between the list change and the call: Claude Code fetches the
        # new tool list when the notification arrives, in the background.
        {"match": "OPEN-OK", **call("Bash", {"command": "sleep 1; echo WAITED-OK", "description": "wait"})},
        call("mcp__tides__open_harbour", {}),
    )
    run = claude(
        "open the harbour and ask the harbour master",
        args=("--mcp-config", str(config), "--allowedTools", "mcp__tides", "--disallowedTools", "ToolSearch"),
    )
    assert run.returncode == 0, run.stderr
    assert run.json()["result"] == "The harbour master says the tide is in."

    sent = harbour_missive.captures()
    assert [c["status"] for c in sent] == [200] * len(sent)
    assert all(not any("tool_addition" in note for note in c["ignored"]) for c in sent)
    beta = sent[0]["headers"]["anthropic-beta"]
    assert "mid-conversation-tool-changes-2026-07-01" in beta
    assert not additions(sent[0]["body"]) and ADDED not in {t["name"] for t in sent[0]["body"]["tools"]}

    # From the first request that carries it, the addition stands at the
    # same place in every later request (the prefix before it unchanged).
    first = next(n for n, c in enumerate(sent) if additions(c["body"]))
    assert first < len(sent) - 1, "the model's call of the added tool came after it was added"
    [(where, block)] = additions(sent[first]["body"])
    # 2.1.332 lists the tool in `tools` deferred, and the addition names it.
    assert block["tool"] == {"type": "tool_reference", "name": ADDED}
    for later in sent[first + 1 :]:
        assert additions(later["body"]) == [(where, block)]
        assert uncached(later["body"]["messages"][:where]) == uncached(
            sent[first]["body"]["messages"][:where]
        )
    [listed] = [t for t in sent[first]["body"]["tools"] if t["name"] == ADDED]
    assert listed.get("defer_loading") is True

    # The same request, to the report model: the definition is rendered where
    # the system message stands, and counted.
    body = {**sent[first]["body"], "model": "report", "stream": False}
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": beta, "x-api-key": "sk-test"}
    answer = httpx.post(f"{harbour_missive.url}/v1/messages", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    seen = json.loads(answer.json()["content"][0]["text"])
    rendered = [
        b["text"]
        for turn in seen["turns"]
        for b in turn["blocks"]
        if b.get("type") == "text" and ADDED in b["text"]
    ]
    assert len(rendered) == 1 and "<tools>" in rendered[0], rendered
    assert listed["description"] in rendered[0]

    def counted(request: dict[str, Any]) -> int:
        fields = {key: request[key] for key in COUNTED if key in request}
        reply = httpx.post(
            f"{harbour_missive.url}/v1/messages/count_tokens",
            json={**fields, "model": "report"},
            headers=headers,
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        return int(reply.json()["input_tokens"])

    without = json.loads(json.dumps(sent[first]["body"]))
    system = without["messages"][where]
    system["content"] = [b for b in system["content"] if b["type"] != "tool_addition"]
    if not system["content"]:
        del without["messages"][where]
    assert counted(sent[first]["body"]) > counted(without)
