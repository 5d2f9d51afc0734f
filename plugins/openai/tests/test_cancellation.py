"""Answers left at random points close every async generator they opened, in
the task that ran it (issue 16).

A ``missive serve`` with the openai driver, in front of the fake
OpenAI-compatible server (:class:`missive_openai.testing.FakeChatServer`),
gets streams its clients leave at random points: before the answer, in the
middle of a slow one, after ``message_stop``; answers the server ends itself
(a stop sequence matched: it stops reading the backend's stream) or that
end normally; non-streaming requests whose client goes before the answer.

The server runs with :func:`missive.testing.watch_async_generators`: every
async generator the garbage collector finalizes is logged. A generator left
suspended is finalized by asyncio in a task of its own, possibly while
another task still runs it; under the fuzz this logged ``aclose():
asynchronous generator is already running`` and ``generator didn't stop
after athrow()`` as never-retrieved task exceptions. Afterwards no generator
of Missive or of a plugin may have been finalized that way (libraries'
internal generators, httpx's, are theirs), the log holds none of those
errors, and the next request is answered.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import (
    GENERATOR_ERRORS,
    ServerProcess,
    finalized_generators,
    serve_process,
    wait_until,
    watch_async_generators,
)
from missive_openai.testing import FakeChatServer

REPO = Path(__file__).resolve().parents[3]
#: Where Missive's and its plugins' code lies: their generators must be closed by their tasks.
OWN_CODE = (REPO / "core", REPO / "plugins")
ROUNDS = 48
SEED = 16


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(vllm=False, max_model_len=8192) as server:
        yield server


@pytest.fixture(scope="module")
def server(fake: FakeChatServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    settings = {"base_url": fake.url, "model": "fake-model"}
    config = {
        "server": {"ping_interval": 0.05},
        "models": {"gen": {"driver": "openai", "context_window": 8192, "settings": settings}},
    }
    env = watch_async_generators(tmp_path_factory.mktemp("watch"))
    with serve_process(config, env=env) as server:
        yield server


def slow_script(steps: int = 30) -> str:
    """A backend answer of ``steps`` words with pauses: still running when the client leaves."""
    script = []
    for i in range(steps):
        script.append({"content": f" word{i}"})
        if i % 3 == 0:
            script.append({"sleep": 0.02})
    return json.dumps({"script": script})


def request_bytes(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = (
        "POST /v1/messages HTTP/1.1\r\nhost: missive\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def one_round(port: int, kind: str, seed: int) -> str:
    """One client: sends a request of ``kind``, reads as much as the kind
    says (a random amount for ``leave_mid``), closes its connection."""
    rng = random.Random(seed)
    words = " ".join(f"w{i}" for i in range(40))
    body: dict[str, Any] = {
        "model": "gen",
        "max_tokens": 200,
        "stream": True,
        "messages": [{"role": "user", "content": slow_script()}],
    }
    if kind == "stop_sequence":
        body["messages"][0]["content"] = words
        body["stop_sequences"] = [f"w{rng.randrange(2, 38)}"]
    elif kind == "complete":
        body["messages"][0]["content"] = words
    elif kind == "non_stream_left":
        body["stream"] = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_bytes(body))
        if kind in ("leave_before", "non_stream_left"):
            return kind
        want = rng.randrange(1, 4000) if kind == "leave_mid" else 1 << 20
        got = b""
        while len(got) < want and b"event: message_stop" not in got:
            chunk = sock.recv(min(4096, want - len(got)))
            if not chunk:
                break
            got += chunk
        if kind != "leave_mid":
            assert b"event: message_stop" in got, got[-300:]
    return kind


def test_streams_left_at_random_points_close_their_generators(server: ServerProcess) -> None:
    """48 clients (8 at a time) leave openai-driver answers at random points,
    or read them to their end, or have the server end them on a stop
    sequence; afterwards no Missive or plugin async generator was finalized
    by the garbage collector, the log holds no never-retrieved task exception,
    no ``already running`` and no ``didn't stop after athrow``, and the next
    request is answered."""
    rng = random.Random(SEED)
    kinds = [
        "leave_before",
        "leave_mid",
        "leave_mid",
        "leave_after",
        "stop_sequence",
        "complete",
        "non_stream_left",
    ]
    plan = [(rng.choice(kinds), rng.randrange(1 << 30)) for _ in range(ROUNDS)]
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda p: one_round(server.port, *p), plan))
    assert sorted(done) == sorted(kind for kind, _ in plan)
    client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, timeout=30)
    # Every answer has ended (each one's log line is written when it ends).
    assert wait_until(lambda: server.log().count("POST /v1/messages") >= ROUNDS, 10), server.log()[-2000:]
    message = client.messages.create(
        model="gen", max_tokens=8, messages=[{"role": "user", "content": "one two"}]
    )
    assert message.content[0].text == "one two"
    log = server.log()
    assert finalized_generators(log, under=OWN_CODE) == []
    for error in GENERATOR_ERRORS:
        assert error not in log, log[-4000:]
