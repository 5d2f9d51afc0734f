"""The test kit's ports (core/missive/testing/servers.py): a backend that is
down holds its port (:class:`ClosedPort`), so no server a test starts later
(in this process or a parallel worker) answers in its place, and
:func:`serve_process` takes another port when the one it picked was taken
before its server bound it. Both were seen in CI: a module's "dead" backend
port was given to a later ``missive serve``, whose 401 replaced the expected
connection error, and the test that brings the backend up could not bind."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from tests.test_probes import Models  # a backend's health path

from missive.testing import closed_port, servers


def _refused(url: str) -> bool:
    try:
        httpx.get(url, timeout=5)
    except httpx.ConnectError:
        return True
    return False


def _can_bind(port: int, reuse: bool) -> bool:
    with socket.socket() as other:
        if reuse:  # as Hypercorn binds
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            other.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_closed_port_refuses_and_cannot_be_taken_until_released() -> None:
    with closed_port() as down:
        assert _refused(down.url)
        assert not _can_bind(down.port, reuse=False) and not _can_bind(down.port, reuse=True)
    assert _can_bind(down.port, reuse=True)  # released on exit


def test_a_closed_port_comes_up_on_the_same_port() -> None:
    with closed_port() as down:
        down.listen(Models)
        assert httpx.get(f"{down.url}/v1/models", timeout=5).json()["data"][0]["id"] == "remote"
    assert _refused(down.url)  # closed on exit


def test_serve_process_takes_another_port_when_its_port_was_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first port it picks is taken (a listening socket stands for a
    server a parallel test started meanwhile): the server that could not
    bind is replaced by one on another port, which is the one yielded."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        picks = iter([taken])
        real = servers.free_port
        monkeypatch.setattr(servers, "free_port", lambda: next(picks, None) or real())
        with servers.serve_process({"models": {"echo": {"driver": "echo"}}}) as proc:
            assert proc.url != f"http://127.0.0.1:{taken}"
            models = httpx.get(f"{proc.url}/v1/models", timeout=10).json()
            assert [m["id"] for m in models["data"]] == ["echo"], json.dumps(models)
