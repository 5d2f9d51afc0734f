"""Claude Code 2.1.332 against a live Missive: an older Claude model id on a
model that does not reason, and a subagent routed to a model of its own.

* ``claude --model claude-sonnet-4-5`` (a pre-adaptive id) sends
  ``thinking: {"type": "enabled", "budget_tokens": ...}``; through the
  ``claude-*`` alias of a model without reasoning it is answered without
  thinking and reported (``missive.thinking.through_alias``), where it was a
  400 on every request.
* The ``Agent`` tool starts a subagent whose requests carry
  ``x-claude-code-agent-id`` (``missive.protocol.agents``): a routing rule
  ``subagent = true`` sends them to another model, the main conversation
  stays, and the subagent's affinity key is its own.

The echo driver plays the model (its script file matches what each
request's last user turn shows it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

#: Test tier (docs/contributing.md): a live server through scripted_missive (imported where it is
#: used, so not read)
pytestmark = pytest.mark.live

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive


@pytest.fixture
def plain_missive(tmp_path: Path) -> Iterator[Missive]:
    """Echo models that do not reason, ``echo`` behind ``claude-*``."""
    from tests.clients.conftest import scripted_missive

    with scripted_missive(tmp_path, reasons=False) as server:
        yield server


def test_an_older_claude_id_is_answered_without_thinking(
    claude_bin: Path, plain_missive: Missive, tmp_path: Path
) -> None:
    from tests.clients.conftest import claude_code_for

    claude = claude_code_for(claude_bin, plain_missive, tmp_path)
    plain_missive.script({"script": [{"thinking": "never shown"}, {"text": "Hello from Missive"}]})
    run = claude("say hello", model="claude-sonnet-4-5")
    assert run.returncode == 0, run.stderr
    result = run.json()
    assert result["is_error"] is False and result["result"] == "Hello from Missive"

    [sent] = plain_missive.captures()
    body = sent["body"]
    assert body["model"] == "claude-sonnet-4-5" and sent["status"] == 200
    assert body["thinking"]["type"] == "enabled"  # what Claude Code sends for this id
    [note] = [entry for entry in sent["ignored"] if entry.startswith("thinking")]
    assert "does not reason" in note and "claude-sonnet-4-5" in note
    # Naming the model itself keeps the 400 (tests/test_alias_thinking.py): Claude
    # Code sends `adaptive` for an id it does not know, which needs no reasoning.


@pytest.fixture
def routed_missive(tmp_path: Path) -> Iterator[Missive]:
    """Subagents on ``echo-100k``, the main conversation on ``echo``."""
    from tests.clients.conftest import scripted_missive

    rules = {"rules": [{"name": "subagents", "subagent": True, "to": "echo-100k"}]}
    with scripted_missive(tmp_path, routing=rules) as server:
        yield server


def test_a_subagent_is_routed_to_its_own_model(
    claude_bin: Path, routed_missive: Missive, tmp_path: Path
) -> None:
    from tests.clients.conftest import claude_code_for

    claude = claude_code_for(claude_bin, routed_missive, tmp_path)
    call = json.dumps(
        {
            "description": "count the letters",
            "prompt": "SUBTASK-7: say how many letters 'missive' has.",
            "subagent_type": "general-purpose",
            "run_in_background": False,
        }
    )
    routed_missive.script(
        # The subagent's own first request: its prompt is its user turn.
        {"match": "SUBTASK-7", "script": [{"text": "The word has seven letters, SEVEN-OK."}]},
        # The main conversation after the Agent tool's result.
        {"match": "SEVEN-OK", "script": [{"text": "The subagent says seven."}]},
        {"script": [{"tool_call": {"name": "Agent", "arguments": [call]}}], "stop_reason": "tool_use"},
    )
    run = claude("delegate the letter count")
    assert run.returncode == 0, run.stderr
    assert run.json()["result"] == "The subagent says seven."

    sent = routed_missive.captures()
    main = [c for c in sent if "x-claude-code-agent-id" not in c["headers"]]
    subagent = [c for c in sent if "x-claude-code-agent-id" in c["headers"]]
    assert main and subagent, [sorted(c["headers"]) for c in sent]
    assert all(c["status"] == 200 for c in sent)
    session = main[0]["headers"]["x-claude-code-session-id"]
    agent = subagent[0]["headers"]["x-claude-code-agent-id"]
    assert subagent[0]["headers"].get("x-claude-code-session-id") == session  # one session

    # The console's record of each: the subagent's requests went to the
    # rule's model, the parent's stayed on the model its id names.
    def served(query: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{routed_missive.url}/console/api/requests?{query}&limit=100", timeout=30)
        assert answer.status_code == 200, answer.text
        return [r for r in answer.json()["data"] if r["path"] == "/v1/messages"]

    by_subagent = served("subagent=true")
    assert len(by_subagent) == len(subagent)
    assert {(r["model"], r.get("rule"), r.get("agent_id")) for r in by_subagent} == {
        ("echo-100k", "subagents", agent)
    }
    by_main = served("subagent=false")
    assert len(by_main) == len(main) and {r["model"] for r in by_main} == {"echo"}
    assert all(r.get("rule") is None and r.get("agent_id") is None for r in by_main)
