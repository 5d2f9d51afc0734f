"""Faults of a remote backend, the same for every remote driver (the policy of
:mod:`missive.remote.transport`), through a live ``missive serve``:

* a backend process killed (SIGKILL) mid-stream: the client gets what was
  streamed, once, then an SSE ``error`` event and no ``message_stop``; the
  backend restarted on its port, the next request succeeds;
* a backend that accepts connections and never answers: ``timeout_error``
  (504) within the configured ``read_timeout``, streaming or not, and the
  server answers the next request;
* a backend that goes silent mid-answer: an SSE ``error`` event of type
  ``timeout_error`` after the text already sent;
* a client that disconnects: the backend sees its connection closed (the
  generation is aborted) and ``/health`` counts no generation left.

The fakes reproduce each backend's wire format (``missive_openai.testing``
for vLLM, ``missive_llamaserver.testing``, ``missive_ollama.testing``); the
killed one runs in its own process so that it can be killed for real.

One live server per kind (``servers``) serves every fault of its kind, each
a model of its own: ``m`` (the fake in this process), ``killed`` (the fake
in its own process) and ``hanging`` (a socket that never answers). The
faults need the server's socket (a stream read as it arrives, a client
leaving) but for the hanging backend's; it shares the servers rather than
run in process, where its two read timeouts would add seconds of waiting to
the fast tier.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import free_port, live_server, wait_until

KINDS = ("vllm", "llamaserver", "ollama")
READ_TIMEOUT = 1.5

#: Start one fake in a child process on a given port, print "ready", serve until killed.
FAKE_PROCESS = """
import sys, time
kind, port = sys.argv[1], int(sys.argv[2])
if kind == "vllm":
    from missive_openai.testing import FakeChatServer
    FakeChatServer(model="m", port=port).__enter__()
elif kind == "llamaserver":
    from missive_llamaserver.testing import FakeLlamaServer
    FakeLlamaServer(n_ctx=4096, port=port).__enter__()
else:
    from missive_ollama.testing import FakeModel, FakeOllama
    FakeOllama({"m:1b": FakeModel(context_length=4096)}, port=port).__enter__()
print("ready", flush=True)
time.sleep(3600)
"""


def model_entry(kind: str, url: str, **settings: Any) -> dict[str, Any]:
    """The ``[models.m]`` table serving the fake of ``kind`` at ``url``."""
    settings = {"base_url": url, "read_timeout": READ_TIMEOUT, "connect_timeout": 1.0, **settings}
    if kind == "vllm":
        return {"driver": "vllm", "settings": {"model": "m", "startup_probe": False, **settings}}
    if kind == "llamaserver":
        return {"driver": "llamaserver", "settings": {"start_wait": 0.2, **settings}}
    return {"driver": "ollama", "settings": {"model": "m:1b", "start_wait": 0.2, **settings}}


def scripted(kind: str, steps: list[dict[str, Any]]) -> str:
    """A user message making the fake of ``kind`` play ``steps`` (content and sleep steps)."""
    if kind == "ollama":
        return "FAKE:" + json.dumps({"steps": steps})
    return json.dumps({"script": steps})


class FakeProcess:
    """A fake backend in its own process, on a fixed port, killable."""

    def __init__(self, kind: str, port: int) -> None:
        self.kind, self.port = kind, port
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FAKE_PROCESS, self.kind, str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs of an SSE response, as they arrive."""
    event = None
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:") and event is not None:
            yield event, json.loads(line[len("data:") :])
            event = None


def stream_body(content: str, max_tokens: int = 200, model: str = "m") -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": content}],
    }


def read_until_error(
    response: httpx.Response, on_text: Any = None
) -> tuple[str, list[str], dict[str, Any] | None]:
    """The streamed text, the event names and the ``error`` event's data (None if none came)."""
    text, names = "", []
    for name, data in sse_events(response):
        names.append(name)
        if name == "content_block_delta" and data["delta"]["type"] == "text_delta":
            text += data["delta"]["text"]
            if on_text is not None:
                on_text(text)
        if name == "error":
            return text, names, data
    return text, names, None


@pytest.mark.parametrize("kind", KINDS)
def test_backend_killed_mid_stream_then_restarted(
    kind: str, killable: dict[str, FakeProcess], servers: dict[str, str]
) -> None:
    fake, base = killable[kind], servers[kind]
    steps = [{"content": "one"}, {"content": " two"}, {"sleep": 60}]
    killed = threading.Event()

    def kill_after_two_words(text: str) -> None:
        if text == "one two" and not killed.is_set():
            killed.set()
            fake.kill()

    body = stream_body(scripted(kind, steps), model="killed")
    with httpx.Client(base_url=base, headers={"x-api-key": "t"}, timeout=30) as http:
        with http.stream("POST", "/v1/messages", json=body) as response:
            assert response.status_code == 200
            text, names, error = read_until_error(response, kill_after_two_words)
    assert killed.is_set()
    assert text == "one two", "what was streamed before the crash is kept, once"
    assert error is not None and error["error"]["type"] == "api_error", names
    assert "lost the connection" in error["error"]["message"]
    assert "message_stop" not in names
    fake.start()  # the backend comes back on its port
    client = anthropic.Anthropic(base_url=base, api_key="t", max_retries=0)
    message = client.messages.create(
        model="killed", max_tokens=50, messages=[{"role": "user", "content": "back again"}]
    )
    assert message.stop_reason == "end_turn" and "back again" in message.content[0].text


class SilentBackend:
    """Accepts TCP connections and never answers (a hung process)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.parametrize("kind", KINDS)
def test_hanging_backend_is_timeout_error_within_read_timeout(kind: str, servers: dict[str, str]) -> None:
    base = servers[kind]
    client = anthropic.Anthropic(base_url=base, api_key="t", max_retries=0, timeout=30)
    started = time.monotonic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="hanging", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 504
    assert caught.value.body["error"]["type"] == "timeout_error"
    assert f"{READ_TIMEOUT:g} s" in caught.value.body["error"]["message"]
    assert elapsed < READ_TIMEOUT * 2 + 5.0, f"took {elapsed:.1f} s"  # not the client's 30 s

    # Streaming: a 504 before the message began, or an SSE error event after it.
    started = time.monotonic()
    with httpx.Client(base_url=base, headers={"x-api-key": "t"}, timeout=30) as http:
        with http.stream("POST", "/v1/messages", json=stream_body("hi", model="hanging")) as response:
            if response.status_code == 200:
                _, names, error = read_until_error(response)
                assert error is not None, names
            else:
                response.read()
                assert response.status_code == 504
                error = response.json()
    assert error["error"]["type"] == "timeout_error"
    assert time.monotonic() - started < READ_TIMEOUT * 2 + 5.0  # not the client's 30 s
    assert httpx.get(base + "/health").json()["generating"] == 0


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Any]]:
    from missive_llamaserver.testing import FakeLlamaServer
    from missive_ollama.testing import FakeModel, FakeOllama
    from missive_openai.testing import FakeChatServer

    with (
        FakeChatServer(model="m") as vllm,
        FakeLlamaServer(n_ctx=4096) as llama,
        FakeOllama({"m:1b": FakeModel(context_length=4096)}) as ollama,
    ):
        yield {"vllm": vllm, "llamaserver": llama, "ollama": ollama}


@pytest.fixture(scope="module")
def killable() -> Iterator[dict[str, FakeProcess]]:
    """A fake of each kind in its own process, started, on a port of its own."""
    started: dict[str, FakeProcess] = {}
    try:
        for kind in KINDS:
            started[kind] = FakeProcess(kind, free_port())
            started[kind].start()
        yield started
    finally:
        for fake in started.values():
            fake.stop()


@pytest.fixture(scope="module")
def silent() -> Iterator[SilentBackend]:
    backend = SilentBackend()
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="module")
def servers(
    fakes: dict[str, Any], killable: dict[str, FakeProcess], silent: SilentBackend
) -> Iterator[dict[str, str]]:
    """One Missive per kind (so that ``/health`` counts one kind's
    generations), serving its fakes: ``m`` (``fakes``), ``killed``
    (``killable``) and ``hanging`` (``silent``)."""
    import contextlib

    with contextlib.ExitStack() as stack:
        yield {
            kind: stack.enter_context(
                live_server(
                    {
                        "models": {
                            "m": model_entry(kind, fakes[kind].url),
                            "killed": model_entry(kind, killable[kind].url),
                            "hanging": model_entry(kind, silent.url),
                        }
                    },
                    timeout=60,
                )
            )
            for kind in KINDS
        }


@pytest.mark.parametrize("kind", KINDS)
def test_silent_mid_answer_is_a_timeout_error_event(kind: str, servers: dict[str, str]) -> None:
    steps = [{"content": "one"}, {"sleep": READ_TIMEOUT * 4}, {"content": " late"}]
    with httpx.Client(base_url=servers[kind], headers={"x-api-key": "t"}, timeout=30) as http:
        started = time.monotonic()
        with http.stream("POST", "/v1/messages", json=stream_body(scripted(kind, steps))) as response:
            assert response.status_code == 200
            text, names, error = read_until_error(response)
    assert text == "one"
    assert error is not None and error["error"]["type"] == "timeout_error", names
    assert time.monotonic() - started < READ_TIMEOUT * 3.5  # before the backend's late token (4 x)
    assert "message_stop" not in names


def disconnects(kind: str, fake: Any) -> int:
    if kind == "vllm":
        return len(fake.disconnects)
    if kind == "llamaserver":
        return int(fake.disconnects)
    return sum(1 for chat in fake.chats if chat.disconnected)


@pytest.mark.parametrize("kind", KINDS)
def test_client_disconnect_aborts_the_backend_generation(
    kind: str, fakes: dict[str, Any], servers: dict[str, str]
) -> None:
    fake = fakes[kind]
    before = disconnects(kind, fake)
    steps = [{"content": "tick"}] + [{"sleep": 0.2}, {"content": " tick"}] * 60  # 12 s
    with httpx.Client(base_url=servers[kind], headers={"x-api-key": "t"}, timeout=30) as http:
        with http.stream("POST", "/v1/messages", json=stream_body(scripted(kind, steps), 1000)) as response:
            assert response.status_code == 200
            for name, _ in sse_events(response):
                if name == "content_block_delta":
                    break  # leave mid-answer: the connection closes with the block
    assert wait_until(lambda: disconnects(kind, fake) > before, 10), "the backend never saw the disconnect"
    assert wait_until(lambda: httpx.get(servers[kind] + "/health").json()["generating"] == 0, 10)
