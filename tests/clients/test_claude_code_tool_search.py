"""Claude Code's deferred tools, ToolSearch and WebSearch against a live Missive.

Claude Code 2.1.332 sends its web tools deferred: the model calls
``ToolSearch`` (``select:WebSearch``), Claude Code answers with a
``tool_reference`` block and adds the tool to ``tools`` with
``defer_loading: true``; the model then calls ``WebSearch``, for which Claude
Code sends a request of its own offering the ``web_search_20250305`` server
tool. Missive runs that search through its ``searxng`` provider against a
stand-in SearXNG (:mod:`web_standins`), and the model answers after the
results. The echo driver plays the model (its script file matches what each
request's last user turn shows it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from web_standins import StandIn, server_tools_config

#: Test tier (docs/contributing.md): a live server through scripted_missive (imported where it is
#: used, so not read)
pytestmark = pytest.mark.live

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive

IGNORED_BY_DESIGN: set[str] = (
    set()
)  # context_management is applied (issue 26 part B); the betas are only reported


@pytest.fixture
def web() -> Iterator[StandIn]:
    with StandIn().running() as standin:
        standin.results = [
            {"url": "https://tides.example/port", "title": "Port tides", "content": "High tide 06:42"}
        ]
        yield standin


@pytest.fixture
def web_missive(tmp_path: Path, web: StandIn) -> Iterator[Missive]:
    from tests.clients.conftest import scripted_missive

    with scripted_missive(tmp_path, **server_tools_config(web, web_fetch=False)) as server:
        yield server


def test_tool_search_loads_web_search_which_the_server_runs(
    claude_bin: Path, web_missive: Missive, web: StandIn, tmp_path: Path
) -> None:
    from tests.clients.conftest import claude_code_for

    claude = claude_code_for(claude_bin, web_missive, tmp_path)
    search = json.dumps({"query": "tide times port missive"})
    web_missive.script(
        {
            "script": [{"tool_call": {"name": "ToolSearch", "arguments": ['{"query": "select:WebSearch"}']}}],
            "stop_reason": "tool_use",
        },
        # The loaded definition stands in ToolSearch's result: the model calls the tool.
        {
            "match": '"name": "WebSearch"',
            "stop_reason": "tool_use",
            "script": [{"tool_call": {"name": "WebSearch", "arguments": [search]}}],
        },
        # Claude Code's own WebSearch request: the model calls the server tool,
        # Missive searches, and the model answers after the results.
        {
            "match": "Perform a web search for the query",
            "script": [{"tool_call": {"name": "web_search", "arguments": [search]}}],
        },
        {"match": "High tide 06:42", "script": [{"text": "Port tides says high tide is at 06:42."}]},
        {"match": "tides.example/port", "script": [{"text": "High tide is at 06:42 (tides.example)."}]},
    )
    run = claude("When is high tide at Port Missive?", args=("--allowedTools", "WebSearch"))
    assert run.returncode == 0, run.stderr
    assert run.json()["result"] == "High tide is at 06:42 (tides.example)."
    assert web.searched() == ["tide times port missive"]

    sent = web_missive.captures()
    assert all(r["status"] == 200 for r in sent)
    first = sent[0]["body"]
    assert any(t.get("defer_loading") for t in first["tools"])  # Claude Code defers tools
    loaded = next(r for r in sent if any(t["name"] == "WebSearch" for t in r["body"]["tools"]))
    assert next(t for t in loaded["body"]["tools"] if t["name"] == "WebSearch")["defer_loading"] is True
    assert any(
        b.get("type") == "tool_reference"
        for m in loaded["body"]["messages"]
        if isinstance(m["content"], list)
        for r in m["content"]
        if r.get("type") == "tool_result" and isinstance(r.get("content"), list)
        for b in r["content"]
    )
    searching = next(r for r in sent if r["body"]["tools"][0].get("type", "").startswith("web_search_"))
    assert [t["name"] for t in searching["body"]["tools"]] == ["web_search"]
    # What Claude Code 2.1.332 still makes Missive ignore: nothing that changes the prompt.
    for record in sent:
        fields = {i for i in record["ignored"] if not i.startswith("anthropic-beta=")}
        assert fields <= IGNORED_BY_DESIGN, fields
