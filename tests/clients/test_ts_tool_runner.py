"""The TypeScript SDK's tool runner (``@anthropic-ai/sdk``, pinned) with its
default settings, which thread the conversation on the server, over three
tool rounds against the scripted echo model.

The SDK is installed like the CLIs (the ``ts_sdk`` fixture, once per
machine under ``~/.cache/missive-tests/node``); the test skips without
``node`` and ``npm``. The runner is ``ts_tool_runner.mjs`` beside this file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from missive_echo import tool_loop

if TYPE_CHECKING:  # fixtures' types (conftest modules are not imported by name)
    from tests.clients.conftest import Missive

RUNNER = Path(__file__).with_name("ts_tool_runner.mjs")
TIMEOUT = 120
#: The echo model calls ``lookup`` three times, then answers.
ROUNDS = tool_loop("lookup", [{"word": "tea"}, {"word": "milk"}, {"word": "sugar"}], "three lookups done")


@pytest.mark.parametrize("stream", ["stream", "create"])
def test_ts_tool_runner_three_rounds_on_one_thread(missive: Missive, ts_sdk: Path, stream: str) -> None:
    node = shutil.which("node")
    assert node is not None  # ts_sdk skips otherwise
    proc = subprocess.run(
        [node, str(RUNNER), missive.url, "echo", str(ts_sdk), stream, ROUNDS],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["calls"] == ["tea", "milk", "sugar"]
    replies = result["replies"]
    assert [r["stop_reason"] for r in replies] == ["tool_use", "tool_use", "tool_use", "end_turn"]
    assert replies[-1]["content"][0]["text"] == "three lookups done"
    records = missive.captures()
    assert [(r["status"], r["body"]["thread"]["type"]) for r in records] == [
        (200, "create"),
        (200, "continue"),
        (200, "continue"),
        (200, "continue"),
    ]
    for record, previous in zip(records[1:], replies, strict=False):
        body = record["body"]
        assert body["thread"]["previous_message_id"] == previous["id"]
        assert [m["content"][0]["type"] for m in body["messages"]] == ["tool_result"]
        assert "system" not in body and "tools" not in body
    assert all(r["ignored"] == [] for r in records), [r["ignored"] for r in records]
