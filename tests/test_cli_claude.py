"""``missive claude``: Claude Code's environment for the running server."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from missive.testing import closed_port, dump_toml, live_server

CONFIG: dict[str, Any] = {
    "server": {"api_keys": ["sk-k1"]},
    "models": {
        "echo-big": {
            "driver": "echo",
            "context_window": 262144,
            "max_output_tokens": 8000,
            "aliases": ["claude-*"],
        },
        "echo-32k": {"driver": "echo", "context_window": 32768},
    },
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One server of ``CONFIG`` for the tests that read it (none changes it)."""
    with live_server(CONFIG) as url:
        yield url


def _missive_claude(
    config_file: Path | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``missive claude`` without the developer's Missive settings: no
    ``MISSIVE*`` variable of this process (``MISSIVE_API_KEY``,
    ``MISSIVE_CONFIG``...) and an empty ``XDG_CONFIG_HOME`` (no
    ``~/.config/missive/missive.toml``); ``env`` adds variables."""
    config = ["--config", str(config_file)] if config_file is not None else []
    with tempfile.TemporaryDirectory(prefix="missive-claude-") as home:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
        full_env["XDG_CONFIG_HOME"] = home
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "missive", "claude", *config, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=full_env,
        )


def _exports(stdout: str) -> dict[str, str]:
    env = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == "export" and len(words) == 2, line
        name, _, value = words[1].partition("=")
        env[name] = value
    return env


def test_prints_the_environment_for_the_running_server(url: str, tmp_path: Path) -> None:
    port = url.rsplit(":", 1)[1]
    config_file = tmp_path / "missive.toml"
    config_file.write_text(dump_toml({**CONFIG, "server": {**CONFIG["server"], "port": int(port)}}))
    first = _missive_claude(config_file)
    small = _missive_claude(config_file, "--model", "echo-32k", "--small-model", "echo-big")
    alias = _missive_claude(config_file, "--model", "claude-sonnet-4-5")
    assert first.returncode == 0, first.stderr
    assert _exports(first.stdout) == {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_AUTH_TOKEN": "sk-k1",
        "ANTHROPIC_MODEL": "echo-big",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "echo-big",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000",  # the model's cap
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "262144",
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "262144",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env = _exports(small.stdout)
    assert env["ANTHROPIC_MODEL"] == "echo-32k" and env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "echo-big"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"  # a quarter of the context
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in env  # under Claude Code's 100k minimum
    assert _exports(alias.stdout)["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"


def test_errors_name_the_problem(url: str, tmp_path: Path) -> None:
    nobody = tmp_path / "nobody.toml"
    with closed_port() as nothing:
        nobody.write_text(dump_toml({"server": {"port": nothing.port}}))
        down = _missive_claude(nobody)
    assert down.returncode == 1 and "no Missive server answers at http://127.0.0.1:" in down.stderr
    port = int(url.rsplit(":", 1)[1])
    bad_key = tmp_path / "bad.toml"
    bad_key.write_text(dump_toml({"server": {"port": port, "api_keys": ["wrong"]}}))
    refused = _missive_claude(bad_key)
    good = tmp_path / "good.toml"
    good.write_text(dump_toml({"server": {"port": port, "api_keys": ["sk-k1"]}}))
    unknown = _missive_claude(good, "--model", "nope")
    assert refused.returncode == 1 and "answered 401" in refused.stderr, refused.stderr
    assert "--api-key KEY" in refused.stderr and "MISSIVE_API_KEY" in refused.stderr
    assert unknown.returncode == 1 and "answered 404" in unknown.stderr and "nope" in unknown.stderr, (
        unknown.stderr
    )
    assert refused.stdout == unknown.stdout == ""


def test_readme_sequence_without_config_takes_the_key_from_the_option_or_environment(
    url: str, tmp_path: Path
) -> None:
    """The server reads its keys from missive.toml; ``missive claude`` run
    without ``--config`` gets the key from ``--api-key`` or MISSIVE_API_KEY,
    and without one says how to pass it."""
    without = _missive_claude(None, "--url", url)
    option = _missive_claude(None, "--url", url, "--api-key", "sk-k1")
    environment = _missive_claude(None, "--url", url, env={"MISSIVE_API_KEY": "sk-k1"})
    assert without.returncode == 1 and "answered 401" in without.stderr
    assert "sent no key" in without.stderr and "--api-key KEY" in without.stderr, without.stderr
    for done in (option, environment):
        assert done.returncode == 0, done.stderr
        env = _exports(done.stdout)
        assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-k1" and env["ANTHROPIC_MODEL"] == "echo-big"


def test_warns_when_the_context_is_too_small_for_claude_code(tmp_path: Path) -> None:
    """On stderr (stdout stays the exports): below 20,000 tokens Claude
    Code's first request does not fit; below 32,768 a session soon fills it."""
    config: dict[str, Any] = {
        "models": {
            "echo-8k": {"driver": "echo", "context_window": 8192},
            "echo-24k": {"driver": "echo", "context_window": 24000},
            "echo-32k": {"driver": "echo", "context_window": 32768},
            "echo-unknown": {"driver": "echo"},
        }
    }
    with live_server(config) as url:
        config_file = tmp_path / "missive.toml"
        config_file.write_text(dump_toml({**config, "server": {"port": int(url.rsplit(":", 1)[1])}}))
        runs = {m: _missive_claude(config_file, "--model", m) for m in config["models"]}
    for model, run in runs.items():
        assert run.returncode == 0, run.stderr
        assert _exports(run.stdout)["ANTHROPIC_MODEL"] == model
    assert (
        "warning: model 'echo-8k' has 8192 tokens of context, too few for Claude Code"
        in runs["echo-8k"].stderr
    )
    assert (
        "Prompt is too long" in runs["echo-8k"].stderr and "--context-window 65536" in runs["echo-8k"].stderr
    )
    assert (
        "warning: model 'echo-24k' has 24000 tokens of context: Claude Code's first request"
        in runs["echo-24k"].stderr
    )
    assert "warning" not in runs["echo-32k"].stderr and "warning" not in runs["echo-unknown"].stderr
