"""The toy backend as a real process for the tests (Missive's own fixtures
come from its pytest plugin: ``missive_server``, ``contract_url``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


def start_backend(*args: str) -> tuple[subprocess.Popen[str], str]:
    """``markov-backend --port 0 ARGS`` as a child process, and its base URL
    (read from the line it prints once listening)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "missive_markov.backend", "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("markov backend listening on "):
        proc.kill()
        raise RuntimeError(f"markov-backend did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[1].strip()


def stop_backend(proc: subprocess.Popen[str]) -> None:
    """Stop a backend from :func:`start_backend`."""
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def backend() -> Iterator[str]:
    """Base URL of a backend with a 64-token context, for the module."""
    proc, url = start_backend("--context", "64")
    try:
        yield url
    finally:
        stop_backend(proc)


@pytest.fixture
def slow_backend() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A backend writing a token every 50 ms, one generation at a time: the
    process (a test may kill it) and its base URL."""
    proc, url = start_backend("--delay", "0.05", "--parallel", "1")
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            stop_backend(proc)
