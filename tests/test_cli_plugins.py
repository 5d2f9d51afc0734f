"""``missive plugins``: each configured model's effective capabilities,
before start-up and, with ``--start``, after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from missive.testing import dump_toml
from missive_openai.testing import FakeChatServer


def _plugins(config: dict[str, Any], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "missive.toml"
    path.write_text(dump_toml(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    return subprocess.run(
        [sys.executable, "-m", "missive", "plugins", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_effective_capabilities_per_model_before_and_after_start_up(tmp_path: Path) -> None:
    with FakeChatServer(auto_tools=False) as bare:
        config = {
            "models": {
                "narrow": {"driver": "echo", "settings": {"capabilities": {"tool_choice": ["auto"]}}},
                "bare": {"driver": "vllm", "settings": {"base_url": bare.url, "model": "fake-model"}},
                "ghost": {"driver": "nope"},
            }
        }
        before = _plugins(config, tmp_path, "--json")
        after = _plugins(config, tmp_path, "--json", "--start")
        text = _plugins(config, tmp_path)
    assert before.returncode == 0, before.stderr
    models = json.loads(before.stdout)["models"]
    assert models["narrow"]["capabilities"]["tool_choice"] == [
        "auto"
    ]  # settings.capabilities narrowed echo's
    assert models["narrow"]["started"] is False and models["narrow"]["driver"] == "echo"
    assert models["bare"]["capabilities"]["tool_choice"] == ["any", "auto", "none", "tool"]  # the spec's
    assert "no loaded plugin provides" in models["ghost"]["error"]
    started = json.loads(after.stdout)["models"]
    assert started["bare"]["started"] is True
    assert started["bare"]["capabilities"]["tool_choice"] == ["any", "none", "tool"]  # the probe's refusal
    assert "model narrow (driver echo), capabilities before start-up" in text.stdout
    assert "model ghost (driver nope): FAILED:" in text.stdout


def test_a_plugin_that_fails_to_load_is_reported_once(tmp_path: Path) -> None:
    """The CLI builds a kernel for its commands and one for the command run;
    a broken ``MISSIVE_PLUGINS`` module is logged once, and listed once."""
    path = tmp_path / "missive.toml"
    path.write_text(dump_toml({"models": {"echo": {"driver": "echo"}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    env["MISSIVE_PLUGINS"] = "no_such_missive_plugin_module"
    run = subprocess.run(
        [sys.executable, "-m", "missive", "plugins", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("plugin no_such_missive_plugin_module not loaded") == 1, run.stderr
    assert run.stdout.count("no_such_missive_plugin_module (MISSIVE_PLUGINS): FAILED") == 1, run.stdout
    assert "No module named 'no_such_missive_plugin_module'" in run.stdout
