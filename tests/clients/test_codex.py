"""The Codex CLI (pinned in conftest.py) against a live Missive, through the
``openai-api`` front door's ``POST /v1/responses``: a model provider whose
``base_url`` is Missive's ``/v1`` with ``wire_api = "responses"``, the key
from an environment variable; the scripted echo model drives it, so the
tool loop is deterministic."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive

TIMEOUT = 120


def codex_exec(
    binary: Path, missive: Missive, tmp_path: Path, prompt: str
) -> tuple[int, list[dict[str, Any]]]:
    """``codex exec --json PROMPT`` in ``tmp_path/work`` with a fresh
    ``CODEX_HOME`` configured for ``missive``; its exit code and JSON events."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        f"""model = "echo"
model_provider = "missive"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.missive]
name = "Missive"
base_url = "{missive.url}/v1"
env_key = "MISSIVE_API_KEY"
wire_api = "responses"
"""
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "MISSIVE_API_KEY": "sk-test",
    }
    proc = subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", "--json", prompt],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    print(
        f"$ codex exec {prompt!r} (exit {proc.returncode})\n"
        f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}"
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events


def _items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e.get("type") == "item.completed" and e["item"]["type"] == kind]


def test_plain_answer(codex_bin: Path, missive: Missive, tmp_path: Path) -> None:
    missive.script({"script": [{"text": "Hello"}, {"text": " from Missive"}]})
    code, events = codex_exec(codex_bin, missive, tmp_path, "say hello")
    assert code == 0
    assert [m["text"] for m in _items(events, "agent_message")] == ["Hello from Missive"]
    (req,) = missive.captures("/v1/responses")
    body = req["body"]
    assert req["status"] == 200 and body["stream"] is True and body["model"] == "echo"
    assert body["store"] is False and "reasoning.encrypted_content" in body["include"]
    assert {"exec_command"} <= {t.get("name") for t in body["tools"]}
    namespaces = [t for t in body["tools"] if t.get("type") == "namespace"]
    assert namespaces and not any("namespace" in i for i in req["ignored"])  # its functions are offered
    assert req["headers"]["authorization"] == "[redacted]"
    usage = next(e for e in events if e["type"] == "turn.completed")["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] == 2


def test_tool_loop_reads_a_file(codex_bin: Path, missive: Missive, tmp_path: Path) -> None:
    """Codex runs its shell tool on the scripted call; the file's text comes
    back as a function_call_output and the next answer plays on it."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("the secret word is marmalade\n")
    call = {"tool_call": {"name": "exec_command", "arguments": ['{"cmd": ', '"cat notes.txt"}']}}
    missive.script(
        {"script": [{"text": "Reading it."}, call], "stop_reason": "tool_use"},
        {"match": "marmalade", "script": [{"text": "The word is marmalade."}]},
    )
    code, events = codex_exec(codex_bin, missive, tmp_path, "read notes.txt")
    assert code == 0
    (command,) = _items(events, "command_execution")
    assert "cat notes.txt" in command["command"] and command["exit_code"] == 0
    assert "marmalade" in command["aggregated_output"]
    assert [m["text"] for m in _items(events, "agent_message")] == ["Reading it.", "The word is marmalade."]

    first, second = missive.captures("/v1/responses")
    # Codex keeps no server state (store: false): it sends the whole conversation again.
    replayed = second["body"]["input"]
    (fc,) = [i for i in replayed if i.get("type") == "function_call"]
    (output,) = [i for i in replayed if i.get("type") == "function_call_output"]
    assert fc["name"] == "exec_command" and json.loads(fc["arguments"]) == {"cmd": "cat notes.txt"}
    assert output["call_id"] == fc["call_id"] and "marmalade" in output["output"]
    assert "previous_response_id" not in second["body"]


def test_namespaced_call(codex_bin: Path, missive: Missive, tmp_path: Path) -> None:
    """A call of a function of Codex's ``multi_agent_v1`` namespace (offered
    as ``multi_agent_v1__close_agent``) reaches Codex as its own, named by
    ``namespace`` and ``name``: Codex runs it (an agent that does not
    exist: an error output) and sends the call back in that shape."""
    (tmp_path / "work").mkdir()
    call = {"tool_call": {"name": "multi_agent_v1__close_agent", "arguments": ['{"id": "nobody"}']}}
    missive.script(
        {"script": [call], "stop_reason": "tool_use"},
        {"script": [{"text": "Closed."}]},
    )
    code, events = codex_exec(codex_bin, missive, tmp_path, "close the agent")
    assert code == 0, events
    assert [m["text"] for m in _items(events, "agent_message")][-1:] == ["Closed."]
    first, second = missive.captures("/v1/responses")[:2]
    (fc,) = [i for i in second["body"]["input"] if i.get("type") == "function_call"]
    assert (fc.get("namespace"), fc["name"]) == ("multi_agent_v1", "close_agent")
    (output,) = [i for i in second["body"]["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == fc["call_id"] and second["status"] == 200
