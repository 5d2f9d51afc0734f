"""``hypercorn missive.asgi:app`` serves the same app, configured from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx

from missive.testing import dump_toml, free_port


def test_hypercorn_entry_point(tmp_path: Path, echo_config: dict) -> None:
    config = tmp_path / "missive.toml"
    config.write_text(dump_toml(echo_config))
    port = free_port()
    env = {**os.environ, "MISSIVE_CONFIG": str(config), "MISSIVE_API_KEY": "sk-asgi"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "missive.asgi:app", "--bind", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(f"{url}/health")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        client = anthropic.Anthropic(base_url=url, api_key="sk-asgi", max_retries=0)
        msg = client.messages.create(model="echo", max_tokens=5, messages=[{"role": "user", "content": "via asgi"}])
        assert msg.content[0].text == "via asgi"
        assert httpx.post(f"{url}/v1/messages", json={}).status_code == 401
        assert httpx.head(f"{url}/api/hello").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
