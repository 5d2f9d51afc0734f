"""Test helpers for Missive and for plugin authors.

:func:`live_server` runs a real ``missive serve`` in a subprocess on a free
loopback port, so tests talk to it through real clients (the official
``anthropic`` SDK, httpx) exactly as users do::

    with live_server({"models": {"echo": {"driver": "echo"}}}) as url:
        client = anthropic.Anthropic(base_url=url, api_key="test")
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["free_port", "dump_toml", "live_server"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dump_toml(data: Mapping[str, Any]) -> str:
    """Write a config mapping as TOML (tables of tables; values as inline TOML)."""
    lines: list[str] = []

    def table(prefix: list[str], mapping: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in mapping.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in mapping.items() if isinstance(v, Mapping)}
        if prefix and (scalars or not tables):
            lines.append("[" + ".".join(json.dumps(p) for p in prefix) + "]")
        for key, value in scalars.items():
            lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
        for key, value in tables.items():
            table([*prefix, key], value)

    table([], data)
    return "\n".join(lines) + "\n"


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"missive serve exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"missive serve not healthy after {timeout}s:\n{log_path.read_text()}")


@contextlib.contextmanager
def live_server(
    config: Mapping[str, Any] | None = None,
    *,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> Iterator[str]:
    """Run ``missive serve`` with ``config`` (None: no config file, the defaults).

    Yields the base URL (``http://127.0.0.1:PORT``). The server's log is
    printed if it fails to start; it is stopped (SIGTERM, then SIGKILL) on exit.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="missive-test-") as tmp:
        cmd = [sys.executable, "-m", "missive", "serve", "--port", str(port), *args]
        if config is not None:
            config_path = Path(tmp) / "missive.toml"
            config_path.write_text(dump_toml(config))
            cmd += ["--config", str(config_path)]
        log_path = Path(tmp) / "server.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
        full_env.update(env or {})
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, timeout, log_path)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if os.environ.get("MISSIVE_TEST_SHOW_LOGS"):
                sys.stderr.write(log_path.read_text(errors="replace"))
