"""Plugin loading in isolation: one broken plugin is reported, never fatal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from missive.kernel.plugins import Kernel

TESTS = Path(__file__).parent
BROKEN = "plugins.broken_import,plugins.unknown_hook,plugins.raising_hook,plugins.wrong_type"


@pytest.fixture
def broken_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("MISSIVE_PLUGINS", BROKEN)


def test_broken_plugins_are_reported(broken_env: None) -> None:
    kernel = Kernel()
    errors = {p.name: p.error for p in kernel.plugins}
    assert "this plugin is broken on purpose" in errors["plugins.broken_import"]
    assert "register_spaceships" in errors["plugins.unknown_hook"]
    assert "cannot register" in errors["plugins.raising_hook"]
    assert "expected DriverSpec" in errors["plugins.wrong_type"]
    # the good plugins still loaded
    assert "echo" in kernel.drivers
    assert errors["missive-echo"] is None


def test_block_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MISSIVE_BLOCK_PLUGINS", "missive-echo")
    assert "echo" not in Kernel().drivers


def test_config_block_list() -> None:
    assert "echo" not in Kernel(block=["missive-echo"]).drivers
    assert "echo" in Kernel().drivers


def test_missive_plugins_command_lists_capabilities_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PYTHONPATH": str(TESTS), "MISSIVE_PLUGINS": BROKEN, "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-m", "missive", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["drivers"]["echo"]["capabilities"]["count_tokens"] == "exact"
    failed = {p["name"] for p in data["plugins"] if p["error"]}
    assert failed == set(BROKEN.split(","))
    text = subprocess.run(
        [sys.executable, "-m", "missive", "plugins"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "plugins.broken_import (MISSIVE_PLUGINS): FAILED" in text
    assert "driver echo:" in text


def test_installed_plugins_replace_built_in_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    from missive.tools.parsers.selection import select_parser

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("MISSIVE_PLUGINS", "plugins.custom_parser")
    kernel = Kernel()
    assert kernel.tool_parsers["hermes"].description == "a replacement, for the test"
    assert list(kernel.tool_parsers)[0] == "hermes"  # its markers are tried first
    assert select_parser("... <tool_call> ...", kernel.tool_parsers) == "hermes"
    assert "llama3" in kernel.tool_parsers  # the other built-ins stay
