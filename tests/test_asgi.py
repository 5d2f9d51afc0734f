"""``hypercorn missive.asgi:app`` serves the same app, configured from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx

from missive.testing import dump_toml, free_port, tcp_states, wait_until


def test_hypercorn_entry_point(tmp_path: Path, echo_config: dict) -> None:
    """Hypercorn serves ``missive.asgi:app`` with the config from the
    environment (API key enforced, models answering), and closes the
    connections its clients closed at once rather than after its
    ``--keep-alive`` timeout (missive.server.connections)."""
    config = tmp_path / "missive.toml"
    config.write_text(dump_toml(echo_config))
    port = free_port()
    # Nothing of the developer's Missive settings (MISSIVE_*, their config
    # and state folders) reaches this server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    env.update(
        {
            "MISSIVE_CONFIG": str(config),
            "MISSIVE_API_KEY": "sk-asgi",
            "MISSIVE_STATE_DIR": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        }
    )
    log_path = tmp_path / "hypercorn.log"
    with open(log_path, "wb") as log:  # a file, not a pipe nobody reads (a full pipe blocks the server)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hypercorn",
                "missive.asgi:app",
                "--bind",
                f"127.0.0.1:{port}",
                "--keep-alive",
                "75",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/health")
                break
            except httpx.TransportError:
                assert proc.poll() is None, log_path.read_text(errors="replace")
                assert time.monotonic() < deadline, "hypercorn never answered:\n" + log_path.read_text(
                    errors="replace"
                )
                time.sleep(0.1)
        client = anthropic.Anthropic(base_url=url, api_key="sk-asgi", max_retries=0)
        msg = client.messages.create(
            model="echo", max_tokens=5, messages=[{"role": "user", "content": "via asgi"}]
        )
        assert msg.content[0].text == "via asgi"
        assert httpx.post(f"{url}/v1/messages", json={}).status_code == 401
        assert httpx.head(f"{url}/api/hello").status_code == 200
        client.close()
        # Hypercorn serves from a worker process (--workers 1).
        children = [int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        worker = next(c for c in children if tcp_states(c).get("LISTEN"))
        sockets = lambda: tcp_states(worker)  # noqa: E731
        assert wait_until(lambda: not {"ESTABLISHED", "CLOSE_WAIT"} & set(sockets()), 20), (
            sockets()
        )  # not 75 s
    finally:
        proc.terminate()
        proc.wait(timeout=10)
