"""Claude Code's subagents (:mod:`missive.protocol.agents`): the
``x-claude-code-agent-id`` and ``x-claude-code-parent-agent-id`` headers,
through the SDK against the app of echo models in process.

* routing rules match them (``subagent``, ``agent_id``): a subagent's
  requests go to the rule's model, its parent's stay (the log line and the
  console name the model and the rule);
* the affinity key (the echo model's report of the request's ``session``)
  of a subagent is its own, shared by all its requests, not its parent's;
* the log line, the console's request list and ``GET /v1/usage`` show them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from click.testing import CliRunner

from missive.cli.main import cli
from missive.config.routing import RoutingRule
from missive.keys.usage import UsageStore
from missive.messages.session import session_of
from missive.protocol.schema.request import MessagesRequest
from missive.testing import InProcessApp, in_process_app, until

ADMIN = "sk-subagents-admin"
SESSION = "7fcde19a-f550-405c-adaf-d502f3483011"
REPORT = {"report": True}
CONFIG: dict[str, Any] = {
    "keys": {"ops": {"key_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(), "scope": "admin"}},
    "models": {
        "main": {"driver": "echo", "aliases": ["claude-*"], "settings": REPORT},
        "small": {"driver": "echo", "settings": REPORT},
        "explorer": {"driver": "echo", "settings": REPORT},
    },
    "routing": {
        "rules": [
            {"name": "explorers", "agent_id": ["explore-*"], "to": "explorer"},
            {"name": "subagents", "subagent": True, "to": "small"},
        ]
    },
}
#: The headers of Claude Code's main conversation, of a subagent it spawned,
#: and of a subagent that one spawned (ids as Claude Code sends them).
MAIN = {"x-claude-code-session-id": SESSION}
SUB = {**MAIN, "x-claude-code-agent-id": "a5d1f3e29b"}
NESTED = {**MAIN, "x-claude-code-agent-id": "c0ffee1234", "x-claude-code-parent-agent-id": "a5d1f3e29b"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessApp]:
    with in_process_app(CONFIG, state_dir=tmp_path_factory.mktemp("state")) as started:
        yield started


def ask(app: InProcessApp, headers: dict[str, str], text: str = "hello") -> tuple[str, dict[str, Any]]:
    """One request with ``headers``: its request id and the echo model's
    report of what it received (the affinity key as ``session``)."""
    client = app.sdk(api_key=ADMIN, default_headers=headers)
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": text}]
    )
    message = raw.parse()
    assert message.model == "claude-sonnet-4-5"  # the id the client sent, whichever model answered
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    return raw.headers["request-id"], json.loads(block.text)


def console(app: InProcessApp, **params: str) -> dict[str, Any]:
    with app.http_client(timeout=30) as http:
        answer = http.get("/console/api/requests", params=params, headers={"x-api-key": ADMIN})
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def entry(app: InProcessApp, request_id: str) -> dict[str, Any]:
    with app.http_client(timeout=30) as http:
        answer = http.get(f"/console/api/requests/{request_id}", headers={"x-api-key": ADMIN})
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_a_subagent_rule_sends_subagents_to_their_model_and_parents_stay(app: InProcessApp) -> None:
    parent, _ = ask(app, MAIN)
    sub, _ = ask(app, SUB)
    nested, _ = ask(app, NESTED)
    explorer, _ = ask(app, {**MAIN, "x-claude-code-agent-id": "explore-42"})
    seen = {rid: entry(app, rid) for rid in (parent, sub, nested, explorer)}
    assert seen[parent]["model"] == "main" and "rule" not in seen[parent]
    assert "agent_id" not in seen[parent] and "parent_agent_id" not in seen[parent]
    assert (seen[sub]["model"], seen[sub]["rule"], seen[sub]["agent_id"]) == (
        "small",
        "subagents",
        "a5d1f3e29b",
    )
    assert (seen[nested]["model"], seen[nested]["rule"]) == ("small", "subagents")
    assert seen[nested]["parent_agent_id"] == "a5d1f3e29b"
    assert (seen[explorer]["model"], seen[explorer]["rule"]) == ("explorer", "explorers")
    until(
        lambda: (
            "model=small key=ops rule=subagents agent_id=c0ffee1234 parent_agent_id=a5d1f3e29b" in app.log()
        ),
        "the nested subagent's log line",
    )


def test_count_tokens_follows_the_subagent_rule(app: InProcessApp) -> None:
    client = app.sdk(api_key=ADMIN, default_headers=SUB)
    raw = client.messages.with_raw_response.count_tokens(
        model="claude-sonnet-4-5", messages=[{"role": "user", "content": "hi"}]
    )
    found = entry(app, raw.headers["request-id"])
    assert (found["model"], found["rule"]) == ("small", "subagents")


def test_a_subagent_has_its_own_affinity_key_shared_by_its_requests(app: InProcessApp) -> None:
    _, parent = ask(app, MAIN)
    _, first = ask(app, SUB, "first turn")
    _, second = ask(app, SUB, "second turn")
    _, other = ask(app, NESTED)
    assert parent["session"] == SESSION
    assert first["session"] == second["session"] == f"{SESSION}/agent/a5d1f3e29b"
    assert other["session"] == f"{SESSION}/agent/c0ffee1234"
    assert len({parent["session"], first["session"], other["session"]}) == 3


def test_affinity_key_without_a_session_and_from_metadata() -> None:
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    plain = MessagesRequest.model_validate(body)
    assert session_of(plain, {"x-claude-code-agent-id": "a1"}) == "agent/a1"
    assert session_of(plain, {"x-claude-code-agent-id": "  "}) is None  # blank: no agent
    assert session_of(plain, None) is None
    with_metadata = MessagesRequest.model_validate(
        {**body, "metadata": {"user_id": json.dumps({"session_id": "s9"})}}
    )
    assert session_of(with_metadata, {"x-claude-code-agent-id": "a1"}) == "s9/agent/a1"
    assert session_of(with_metadata, {}) == "s9"


def test_the_console_filters_subagents(app: InProcessApp) -> None:
    parent, _ = ask(app, MAIN)
    sub, _ = ask(app, SUB)
    nested, _ = ask(app, NESTED)
    subagents = {e["request_id"] for e in console(app, subagent="true")["data"]}
    mains = {e["request_id"] for e in console(app, subagent="false")["data"]}
    assert {sub, nested} <= subagents and parent not in subagents
    assert parent in mains and not {sub, nested} & mains
    family = {e["request_id"] for e in console(app, agent_id="a5d1f3e29b")["data"]}
    assert {sub, nested} <= family and parent not in family
    with app.http_client(timeout=30) as http:
        bad = http.get("/console/api/requests", params={"subagent": "yes"}, headers={"x-api-key": ADMIN})
    assert bad.status_code == 400 and "subagent: expected true or false" in bad.json()["error"]["message"]


def usage(app: InProcessApp, **params: str) -> Any:
    with app.http_client(timeout=30) as http:
        return http.get("/v1/usage", params=params, headers={"x-api-key": ADMIN})


def test_usage_splits_subagents_when_asked(app: InProcessApp) -> None:
    before = usage(app, group_by="subagent").json()["totals"]
    ask(app, MAIN)
    ask(app, SUB)
    ask(app, NESTED)
    split = usage(app, group_by="subagent").json()["totals"]

    def requests(totals: list[dict[str, Any]], model: str, subagent: bool) -> int:
        return sum(r["requests"] for r in totals if r["model"] == model and r["subagent"] is subagent)

    assert requests(split, "main", False) - requests(before, "main", False) == 1
    assert requests(split, "small", True) - requests(before, "small", True) == 2
    assert requests(split, "main", True) == requests(split, "small", False) == 0
    whole = usage(app).json()["totals"]
    assert all("subagent" not in r for r in whole)  # not asked: one result per key and model
    assert {r["model"]: r["requests"] for r in whole} == {
        m: sum(r["requests"] for r in split if r["model"] == m) for m in {r["model"] for r in split}
    }
    bad = usage(app, group_by="agent")
    assert bad.status_code == 400 and "group_by: must be one of subagent" in bad.json()["error"]["message"]


def test_a_usage_database_written_before_the_subagent_column_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE usage (hour INTEGER NOT NULL, key_name TEXT NOT NULL, model TEXT NOT NULL, "
        "requests INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0, "
        "cache_creation_input_tokens INTEGER NOT NULL DEFAULT 0, "
        "cache_read_input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0, "
        "PRIMARY KEY (hour, key_name, model));"
        "INSERT INTO usage VALUES (3600, 'alice', 'm', 2, 10, 0, 5, 7);"
    )
    old.close()
    store = UsageStore(path)
    store.add({(3600, "alice", "m", 1): [1, 1, 0, 0, 1]})
    assert store.rows(0, 7200, None, None) == [
        (3600, "alice", "m", 0, 2, 10, 0, 5, 7),
        (3600, "alice", "m", 1, 1, 1, 0, 0, 1),
    ]
    store.close()


def test_rules_on_agents_are_checked_and_described() -> None:
    assert RoutingRule(name="main-only", subagent=False, to="m").describe() == "not a subagent -> m"
    rule = RoutingRule(name="x", agent_id=["explore-*"], subagent=True, to="m")
    assert rule.describe() == "a subagent and agent explore-* -> m"
    with pytest.raises(ValueError, match="subagent or agent_id"):
        RoutingRule(name="none", to="m")


def test_missive_usage_by_subagent(app: InProcessApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """``missive usage --by-subagent`` asks for ``group_by=subagent`` and
    prints a SUBAGENT column (the CLI's HTTP call sent to the app in process)."""
    ask(app, SUB)

    def get(base: str, path: str, key: str | None, params: dict[str, Any] | None = None) -> Any:
        with app.http_client(timeout=30) as http:
            return http.get(path, params=params, headers={"x-api-key": key}).json()

    monkeypatch.setattr("missive.cli.keys._get", get)
    args = ["usage", "--url", app.url, "--api-key", ADMIN]
    split = CliRunner().invoke(cli, [*args, "--by-subagent"])
    assert split.exit_code == 0, split.output
    assert split.output.splitlines()[1].split()[:3] == ["KEY", "MODEL", "SUBAGENT"]
    assert any(line.split()[1:3] == ["small", "yes"] for line in split.output.splitlines()[2:])
    whole = CliRunner().invoke(cli, args)
    assert whole.exit_code == 0 and "SUBAGENT" not in whole.output
