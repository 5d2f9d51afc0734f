"""Real servers for tests: ``missive serve`` in a subprocess on a free
loopback port (:func:`live_server`, :func:`serve_process`), and small HTTP
servers in a thread for fake backends (:func:`start_http_server`)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    'free_port',
    'ClosedPort',
    'closed_port',
    'dump_toml',
    'ServerProcess',
    'tests_state_home',
    'serve_process',
    'live_server',
    'stop_process',
    'start_http_server',
    'stop_http_server',
]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a server about to bind it.

    Released at once, so another process may take it: for a port where
    nothing must listen for a while (a backend that is down), use
    :func:`closed_port`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ClosedPort:
    """A loopback port held bound but not listening: a connection to it is
    refused (Linux answers the SYN with a reset), and no other process can
    bind it meanwhile (the socket has no ``SO_REUSEADDR``), so a server that
    a parallel test starts never answers in place of a backend that is down.
    :meth:`listen` brings a backend up on the port (the bound socket starts
    listening: the port is never free in between) until :meth:`close`.

    Attributes:
        port: the port number.
        url: ``http://127.0.0.1:PORT``.
    """

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: ThreadingHTTPServer | None = None

    def listen(self, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
        """Serve ``handler`` on this port from a daemon thread."""
        if self._server is not None:
            raise RuntimeError(f"port {self.port} already listens")
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler, bind_and_activate=False)
        server.socket.close()
        server.socket = self._sock
        server.server_activate()
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._server = server
        return server

    def close(self) -> None:
        """Stop any server and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server = None
        self._sock.close()


@contextlib.contextmanager
def closed_port() -> Iterator[ClosedPort]:
    """A :class:`ClosedPort` for the ``with`` block: a backend that is down."""
    port = ClosedPort()
    try:
        yield port
    finally:
        port.close()


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


@dataclass
class ServerProcess:
    """A ``missive serve`` started by :func:`serve_process`.

    Attributes:
        url: its base URL (``http://127.0.0.1:PORT``).
        process: the child process (``process.returncode`` once it ended).
        log_path: the file its stdout and stderr go to.
    """

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """Everything it has logged so far."""
        return self.log_path.read_text(errors="replace")

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])


_STATE_HOME: Path | None = None


def tests_state_home() -> Path:
    """An ``XDG_STATE_HOME`` for the servers this process starts: one folder
    per process, made on first use and removed at its exit."""
    global _STATE_HOME
    if _STATE_HOME is None:
        import atexit
        import shutil

        _STATE_HOME = Path(tempfile.mkdtemp(prefix="missive-test-state-"))
        atexit.register(shutil.rmtree, _STATE_HOME, True)
    return _STATE_HOME


@contextlib.contextmanager
def serve_process(
    config: Mapping[str, Any] | None = None,
    *,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    python: str | Path | None = None,
) -> Iterator[ServerProcess]:
    """Run ``missive serve`` with ``config`` (None: no config file, the
    defaults) and yield it once ``/health`` answers, as a
    :class:`ServerProcess` (URL, process, log). ``MISSIVE*`` variables of this
    process are not passed on, ``XDG_CONFIG_HOME`` is an empty folder (no
    user configuration file is read), and ``XDG_STATE_HOME`` a folder of this
    test process (:func:`tests_state_home`: the servers of one test run share
    their state, the thinking key and the llama.cpp trial records, but not
    the user's own ``~/.local/state/missive``), the prompt cache's disk tier
    is in a folder of this server only (``MISSIVE_PROMPT_CACHE_DIR``); ``env`` adds or replaces
    variables (``MISSIVE_STATE_DIR`` for a state of the test's own, disk
    tier included).
    ``python``: the interpreter that runs it (default: this one), e.g. that
    of a virtual environment a distribution was installed into. The server's log is in
    the error if it fails to start; it is stopped on exit (:func:`stop_process`).
    """
    with tempfile.TemporaryDirectory(prefix="missive-test-") as tmp:
        config_args: list[str] = []
        if config is not None:
            config_path = Path(tmp) / "missive.toml"
            config_path.write_text(dump_toml(config))
            config_args = ["--config", str(config_path)]
        log_path = Path(tmp) / "server.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
        # No user configuration file (~/.config/missive/missive.toml) reaches a
        # test, nor the user's state folder.
        full_env["XDG_CONFIG_HOME"] = tmp
        full_env["XDG_STATE_HOME"] = str(tests_state_home())
        # The prompt cache's disk tier: the server's own (a state an earlier
        # test's server saved must not serve this one), unless the test
        # gives a state directory or the tier's folder.
        full_env["MISSIVE_PROMPT_CACHE_DIR"] = str(Path(tmp) / "prompt-cache")
        full_env.update(env or {})
        if "MISSIVE_STATE_DIR" in (env or {}) and "MISSIVE_PROMPT_CACHE_DIR" not in (env or {}):
            del full_env["MISSIVE_PROMPT_CACHE_DIR"]
        for attempt in range(_PORT_ATTEMPTS):
            # The free port is released before the server binds it: a server a
            # parallel test starts in between may take it. Another port, then.
            port = free_port()
            cmd = [str(python or sys.executable), "-m", "missive", "serve", "--port", str(port), *args]
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [*cmd, *config_args], stdout=log, stderr=subprocess.STDOUT, env=full_env
                )
            url = f"http://127.0.0.1:{port}"
            try:
                try:
                    _wait_healthy(url, proc, timeout, log_path)
                except RuntimeError:
                    if attempt + 1 < _PORT_ATTEMPTS and _port_taken(proc, log_path):
                        continue
                    raise
                yield ServerProcess(url, proc, log_path)
                return
            finally:
                stop_process(proc, log_path)


_PORT_ATTEMPTS = 3


def _port_taken(proc: subprocess.Popen[bytes], log_path: Path) -> bool:
    """Whether ``missive serve`` ended because its port was taken meanwhile."""
    return proc.poll() is not None and "Address already in use" in log_path.read_text(errors="replace")


@contextlib.contextmanager
def live_server(
    config: Mapping[str, Any] | None = None,
    *,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    python: str | Path | None = None,
) -> Iterator[str]:
    """Run ``missive serve`` with ``config`` (None: no config file, the defaults).

    Yields the base URL (``http://127.0.0.1:PORT``). The server's log is
    printed if it fails to start; it is stopped (SIGTERM, then SIGKILL) on exit.
    :func:`serve_process` gives the process and its log too; ``python`` is
    the interpreter to run it with (default: this one).
    """
    with serve_process(config, args=args, env=env, timeout=timeout, python=python) as server:
        yield server.url


def stop_process(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Stop a server started by a test: SIGTERM; after 5 s a second SIGTERM
    (``missive serve`` then ends the shutdown grace at once: answers still
    running get their ``error`` event, docs/deployment.md); SIGKILL 10 s
    later. Its log is written to stderr when ``MISSIVE_TEST_SHOW_LOGS`` is set."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if os.environ.get("MISSIVE_TEST_SHOW_LOGS"):
        sys.stderr.write(log_path.read_text(errors="replace"))


def start_http_server(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``handler`` on ``host`` and ``port`` (0: a free port) from a
    daemon thread, for fake backends in tests. Returns the server and its
    base URL (``http://HOST:PORT``); stop it with :func:`stop_http_server`."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def stop_http_server(server: ThreadingHTTPServer | None) -> None:
    """Stop a server from :func:`start_http_server` (None: nothing to do)."""
    if server is not None:
        server.shutdown()
        server.server_close()
