"""Where ``missive`` finds its configuration when none is given: the user's
``$XDG_CONFIG_HOME/missive/missive.toml``, then ``/etc/missive/missive.toml``
(the order and the system file are unit-tested in test_config.py); the file
used is in the start-up log and in ``missive plugins``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic

from missive.testing import dump_toml, serve_process


def _user_config(home: Path, model: str) -> Path:
    path = home / "missive" / "missive.toml"
    path.parent.mkdir(parents=True)
    path.write_text(dump_toml({"models": {model: {"driver": "echo", "context_window": 100}}}))
    return path


def _plugins(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    return subprocess.run(
        [sys.executable, "-m", "missive", "plugins", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
    )


def test_missive_plugins_reads_the_user_file_unless_one_is_given(tmp_path: Path) -> None:
    found = _user_config(tmp_path / "xdg", "from-user-file")
    given = tmp_path / "given.toml"
    given.write_text(dump_toml({"models": {"from-option": {"driver": "echo"}}}))
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    data = json.loads(_plugins(env, "--json").stdout)
    assert data["config"] == str(found) and list(data["models"]) == ["from-user-file"]
    assert f"configuration file {found}" in _plugins(env).stdout

    data = json.loads(_plugins(env, "--json", "--config", str(given)).stdout)
    assert data["config"] == str(given) and list(data["models"]) == ["from-option"]
    data = json.loads(_plugins({**env, "MISSIVE_CONFIG": str(given)}, "--json").stdout)
    assert data["config"] == str(given)

    empty = {"XDG_CONFIG_HOME": str(tmp_path / "empty")}
    text = _plugins(empty).stdout
    if not Path("/etc/missive/missive.toml").exists():
        assert f"none of {tmp_path / 'empty' / 'missive' / 'missive.toml'}, /etc/missive/missive.toml" in text


def test_serve_uses_the_user_file_and_says_so(tmp_path: Path) -> None:
    found = _user_config(tmp_path / "xdg", "from-user-file")
    with serve_process(None, env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="unused")
        assert [m.id for m in client.models.list().data] == ["from-user-file"]
        reply = client.messages.create(
            model="from-user-file", max_tokens=10, messages=[{"role": "user", "content": "hello there"}]
        )
        assert reply.content[0].type == "text" and reply.content[0].text == "hello there"
        assert f"configuration file {found}" in server.log()
