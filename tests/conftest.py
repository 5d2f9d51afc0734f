"""Shared fixtures: live Missive servers driven through the official SDK."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import InProcessApp, in_process_app, live_server, tests_state_home

#: The echo server's thinking-signature key, so tests can sign and verify blocks.
SIGNING_KEY = "test-signing-key-0123456789"

ECHO_CONFIG: dict[str, Any] = {
    "server": {"ping_interval": 0.3, "max_body_bytes": 200_000},
    "thinking": {"signing_key": SIGNING_KEY},
    "models": {
        "echo": {
            "driver": "echo",
            "context_window": 1000,
            "aliases": ["claude-local", "claude-*"],
            "display_name": "Echo",
        },
        "echo-b": {"driver": "echo", "context_window": 1000},
        "echo-c": {"driver": "echo", "context_window": 1000},
        "echo-small": {"driver": "echo", "context_window": 12},
        "echo-capped": {"driver": "echo", "context_window": 1000, "max_output_tokens": 2},
        "echo-hermes": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"tool_parser": "hermes", "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
        },
        "echo-serial": {"driver": "echo", "context_window": 1000, "settings": {"serialize": True}},
        "echo-think": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": ["auto", "none"], "thinking": True}},
        },
        "echo-think-tags": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"reasoning_parser": "think", "capabilities": {"thinking": True}},
        },
        "echo-harmony": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {
                "tool_parser": "harmony",
                "reasoning_parser": "harmony",
                "capabilities": {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True},
            },
        },
        "echo-tools": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
        },
    },
}


#: The test suite's own switches (``MISSIVE_TEST_SHOW_LOGS``,
#: ``MISSIVE_TEST_NODE_CACHE``, ``MISSIVE_FUZZ_EXAMPLES``) and the dev
#: scripts' ``MISSIVE_VENV``: kept, they do not configure Missive.
SUITE_VARIABLES = ("MISSIVE_TEST_", "MISSIVE_FUZZ_", "MISSIVE_VENV")


def _developer_settings() -> list[str]:
    """The ``MISSIVE*`` variables of this process that configure Missive."""
    return [name for name in os.environ
            if name.startswith("MISSIVE") and not name.startswith(SUITE_VARIABLES)]


@pytest.fixture(scope="session", autouse=True)
def _no_developer_settings_in_session() -> Iterator[None]:
    """The developer's own Missive settings (``MISSIVE_API_KEY``,
    ``MISSIVE_CONFIG``, ``MISSIVE_STATE_DIR``, ``MISSIVE__SERVER__...``,
    ``MISSIVE_PLUGINS``) reach no in-process code, session and module
    fixtures included (servers started by :func:`missive.testing.serve_process`
    never see them anyway), and in-process state (a thinking key, llama.cpp
    trial records) goes to the test run's state folder, like those servers',
    not to the user's ``~/.local/state/missive``."""
    with pytest.MonkeyPatch.context() as patch:
        for name in _developer_settings():
            patch.delenv(name)
        patch.setenv("XDG_STATE_HOME", str(tests_state_home()))
        # In-process models' prompt-cache disk tier: per test (below); a
        # module's or the session's model, started before, shares this one.
        patch.setenv("MISSIVE_PROMPT_CACHE_DIR", tempfile.mkdtemp(prefix="prompt-cache-", dir=tests_state_home()))
        yield


@pytest.fixture(autouse=True)
def _no_developer_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for each test: nothing a previous test left in
    ``os.environ`` outside ``monkeypatch`` reaches the next one."""
    for name in _developer_settings():
        monkeypatch.delenv(name)
    # A model a test starts in-process finds no state an earlier test saved.
    monkeypatch.setenv("MISSIVE_PROMPT_CACHE_DIR", tempfile.mkdtemp(prefix="prompt-cache-", dir=tests_state_home()))


@pytest.fixture(scope="session")
def signer() -> Any:
    """A :class:`missive.thinking.signing.Signer` with the echo server's key."""
    from missive.thinking.signing import Signer

    return Signer(SIGNING_KEY.encode())


@pytest.fixture(scope="session")
def echo_config() -> dict[str, Any]:
    """The echo server's configuration, for tests that start a variant of it."""
    return ECHO_CONFIG


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def echo_url() -> Iterator[str]:
    with live_server(ECHO_CONFIG) as url:
        yield url


@pytest.fixture(scope="session")
def echo(echo_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=echo_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def echo_app() -> Iterator[InProcessApp]:
    """The echo server's app in this process (the ``api`` tier: no socket)."""
    with in_process_app(ECHO_CONFIG) as app:
        yield app


@pytest.fixture(scope="session")
def echo_in_process(echo_app: InProcessApp) -> anthropic.Anthropic:
    """An SDK client of :func:`echo_app`; a module whose tests need no socket
    overrides ``echo`` with it."""
    return anthropic.Anthropic(base_url=echo_app.url, api_key="unused", max_retries=0,
                               http_client=echo_app.http_client())


@pytest.fixture(scope="session")
def default_url() -> Iterator[str]:
    """The README's server: ``missive serve`` with no config (SmolLM2 on CPU)."""
    with live_server(None) as url:
        yield url


@pytest.fixture(scope="session")
def smol(default_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=default_url, api_key="unused", max_retries=0, timeout=600)  # a hang guard
