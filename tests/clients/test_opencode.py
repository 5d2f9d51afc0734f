"""opencode (pinned in conftest.py) against a live Missive, as its
``anthropic`` provider with Missive's URL as ``baseURL``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive, Opencode


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["part"]["text"] for e in events if e.get("type") == "text")


def test_plain_answer(missive: Missive, opencode: Opencode) -> None:
    missive.script({"script": [{"text": "Hello"}, {"text": " from"}, {"text": " Missive"}]})
    run, events = opencode("say hello")
    assert run.returncode == 0, run.stderr
    assert _text(events) == "Hello from Missive"
    finish = [e for e in events if e.get("type") == "step_finish"]
    assert finish and finish[-1]["part"]["reason"] == "stop"

    (req,) = missive.captures()
    body, headers = req["body"], req["headers"]
    assert req["status"] == 200 and req["query"] == ""
    assert headers["user-agent"].startswith("opencode/")
    assert headers["anthropic-version"] == "2023-06-01" and headers["x-api-key"] == "[redacted]"
    assert body["stream"] is True and body["model"] == "echo" and body["max_tokens"] == 4096
    assert body["tool_choice"] == {"type": "auto"}
    assert {"bash", "write", "read", "edit"} <= {t["name"] for t in body["tools"]}
    assert finish[-1]["part"]["tokens"]["input"] > 0


def test_tool_loop_writes_a_file(missive: Missive, opencode: Opencode) -> None:
    target = opencode.work / "out" / "oc.txt"
    args = json.dumps({"filePath": str(target), "content": "from opencode\nline 2\n"})
    missive.script(
        {
            "script": [{"tool_call": {"name": "write", "arguments": [args[:2], args[2:13], args[13:]]}}],
            "stop_reason": "tool_use",
        },
        {"script": [{"text": "Wrote"}, {"text": " oc.txt"}]},
    )
    run, events = opencode("write the file")
    assert run.returncode == 0, run.stderr
    assert target.read_text() == "from opencode\nline 2\n"
    assert _text(events) == "Wrote oc.txt"
    tools = [e["part"] for e in events if e.get("type") == "tool_use"]
    assert [t["tool"] for t in tools] == ["write"] and tools[0]["state"]["status"] == "completed"

    first, second = missive.captures()
    write = next(t for t in first["body"]["tools"] if t["name"] == "write")
    assert set(write["input_schema"]["required"]) == {"filePath", "content"}
    call = next(
        b
        for m in second["body"]["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    )
    assert call["name"] == "write" and call["input"] == json.loads(args)
    results = [
        b
        for m in second["body"]["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [r["tool_use_id"] for r in results] == [call["id"]]
