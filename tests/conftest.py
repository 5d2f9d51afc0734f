"""Shared fixtures: live Missive servers driven through the official SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import InProcessApp, in_process_app, live_server

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
            "settings": {
                "tool_parser": "hermes",
                "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]},
            },
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
    return anthropic.Anthropic(
        base_url=echo_app.url, api_key="unused", max_retries=0, http_client=echo_app.http_client()
    )


@pytest.fixture(scope="session")
def default_url() -> Iterator[str]:
    """The README's server: ``missive serve`` with no config (SmolLM2 on CPU)."""
    with live_server(None) as url:
        yield url


@pytest.fixture(scope="session")
def smol(default_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=default_url, api_key="unused", max_retries=0, timeout=600
    )  # a hang guard
