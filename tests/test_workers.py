"""Several worker processes on one port (``server.workers``, core/missive/workers.py).

Live ``missive serve --workers 2`` in front of the fake OpenAI-compatible
server (``missive_openai.testing.FakeChatServer``), through the official SDK;
the refusal of in-process models; the units of the per-worker shares.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from click.testing import CliRunner

from missive.cli.main import cli
from missive.config import Config, ConfigError, ModelEntry
from missive.server.workers import check, settle_batches
from missive.serving.admission import Admission, share
from missive.testing import ServerProcess, dump_toml, free_port, serve_process, until
from missive_openai.testing import FakeChatServer

DEADLINE = 30.0  # seconds; reached only when a test fails


def children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux ``/proc``)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(vllm=False) as server:
        yield server


def remote_config(fake: FakeChatServer, **server: Any) -> dict[str, Any]:
    return {
        "server": {"workers": 2, **server},
        "models": {
            "gen": {
                "driver": "openai",
                "context_window": 2048,
                "settings": {"base_url": fake.url, "model": "fake-model"},
            }
        },
    }


def worker_of_new_connection(server: ServerProcess) -> int:
    """The pid of the worker that answers a request on a fresh connection."""
    with httpx.Client(base_url=server.url, timeout=10) as http:
        return int(http.get("/v1/status").json()["worker"]["pid"])


def requests_counted(server: ServerProcess) -> float:
    """``missive:requests_total`` of ``/v1/messages`` 200s, as one scrape says."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("missive:requests_total{")
        and 'endpoint="/v1/messages"' in line
        and 'status="200"' in line
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_two_workers_answer_through_the_sdk_and_count_together(fake: FakeChatServer) -> None:
    with serve_process(remote_config(fake)) as server:
        workers = until(
            lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), "two workers"
        )
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, timeout=30)
        answered = set()
        for i in range(6):
            words = f"alpha beta {i}"
            message = client.messages.create(
                model="gen", max_tokens=16, messages=[{"role": "user", "content": words}]
            )
            assert message.content[0].text == words and message.stop_reason == "end_turn"
            with client.messages.stream(
                model="gen", max_tokens=16, messages=[{"role": "user", "content": words}]
            ) as stream:
                assert stream.get_final_message().content[0].text == words
        # The kernel spreads new connections over both workers (SO_REUSEPORT);
        # a worker answers once it listens, which may be a while after its
        # fork on a busy machine: new connections until both have answered.
        deadline = time.monotonic() + DEADLINE
        while not answered >= workers and time.monotonic() < deadline:
            answered.add(worker_of_new_connection(server))
        assert answered == workers, f"answered by {answered}, workers {workers}"
        # Every scrape, whichever worker answers it, counts the whole server.
        for _ in range(6):
            assert requests_counted(server) == 12
        status = httpx.get(f"{server.url}/v1/status", timeout=10).json()
        assert status["worker"]["count"] == 2 and status["models"]["gen"]["status"] == "ready"
        # Message Batches are off with several workers (one process owns their database).
        assert httpx.get(f"{server.url}/v1/messages/batches", timeout=10).status_code == 404
        assert "Message Batches are off with server.workers = 2" in server.log()
        # Each worker's lines name it; the request lines too.
        access = [
            line for line in server.log().splitlines() if "missive.access: POST /v1/messages 200" in line
        ]
        assert len(access) == 12 and all(re.search(r" INFO w[01] \[req_", line) for line in access), access
        assert {
            re.search(r" w([01]) \[", line).group(1)
            for line in server.log().splitlines()
            if " w0 [" in line or " w1 [" in line
        } == {"0", "1"}
        shown = CliRunner().invoke(cli, ["ps", "--url", server.url])
        assert shown.exit_code == 0, shown.output
        assert re.search(r"worker [12] of 2 \(pid (\d+)\) answered", shown.output), shown.output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_drains_every_worker_then_all_exit_0(fake: FakeChatServer) -> None:
    """A stream running on a worker when the supervisor gets SIGTERM ends
    normally (the grace), new connections are refused, every worker exits
    and the supervisor exits 0."""
    slow = json.dumps(
        {
            "script": [{"content": "one "}, {"sleep": 1.0}, {"content": "two"}],
            "finish_reason": "stop",
            "usage": True,
        }
    )
    with serve_process(remote_config(fake, shutdown_grace=20)) as server:
        workers = until(
            lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), "two workers"
        )
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, timeout=30)
        texts: list[str] = []
        started = threading.Event()

        def stream() -> None:
            with client.messages.stream(
                model="gen", max_tokens=16, messages=[{"role": "user", "content": slow}]
            ) as answer:
                for event in answer:
                    if event.type == "content_block_delta":
                        started.set()
                texts.append(answer.get_final_message().content[0].text)

        thread = threading.Thread(target=stream)
        thread.start()
        assert started.wait(DEADLINE)
        server.process.send_signal(signal.SIGTERM)
        thread.join(DEADLINE)
        assert texts == ["one two"], "the running stream finished within the grace"
        assert server.process.wait(DEADLINE) == 0, server.log()
        assert not any(alive(pid) for pid in workers), "every worker has exited"
        log = server.log()
        assert "passed on to 2 workers" in log and log.count("stopped: models closed") == 2, log
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_crashed_worker_stops_the_server_with_status_1(fake: FakeChatServer) -> None:
    with serve_process(remote_config(fake, shutdown_grace=5)) as server:
        workers = until(
            lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), "two workers"
        )
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        assert server.process.wait(DEADLINE) == 1
        assert not any(alive(pid) for pid in workers)
        assert f"(pid {victim}) exited with status -9 unasked: stopping the others" in server.log()


def test_in_process_model_with_workers_is_a_config_error() -> None:
    """The documented coexistence rule: workers > 1 serves remote models
    only; an in-process model (echo runs inside the server) is refused at
    start-up, naming the model and the setting, before anything listens."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "missive.toml"
        path.write_text(dump_toml({"models": {"echo": {"driver": "echo"}}}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "missive",
                "serve",
                "--config",
                str(path),
                "--port",
                str(port),
                "--workers",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert done.returncode == 1
    assert "server.workers = 2: model 'echo' (driver 'echo') runs inside the server process" in done.stderr, (
        done.stderr
    )
    assert "server.workers = 1" in done.stderr


def test_shares_add_up_and_differ_by_at_most_one() -> None:
    for total in range(0, 20):
        for count in range(1, 6):
            parts = [share(total, i, count) for i in range(count)]
            assert sum(parts) == total and max(parts) - min(parts) <= 1


class _Driver:
    """Just what :class:`Admission` and :func:`check` read of a driver."""

    def __init__(self, max_concurrency: int | None, in_process: bool = False) -> None:
        from missive.driver.capabilities import Capabilities

        self.name = "fake"
        self.entry = ModelEntry(driver="fake")
        self.capabilities = Capabilities(max_concurrency=max_concurrency, in_process=in_process)


class _Models:
    def __init__(self, **drivers: _Driver) -> None:
        self.drivers = drivers


def test_each_worker_admits_its_share_of_slots_and_queue() -> None:
    config = Config.model_validate({"server": {"queue_depth": 5}})
    limits, depths = [], []
    for index in range(3):
        admission = Admission(config)
        admission.worker = (index, 3)
        gate = admission.gate("m", _Driver(max_concurrency=7))  # type: ignore[arg-type]
        limits.append(gate.limit)
        depths.append(gate.depth)
    assert limits == [3, 2, 2] and depths == [2, 2, 1]
    unbounded = Admission(config)
    unbounded.worker = (1, 3)
    assert unbounded.gate("m", _Driver(max_concurrency=None)).limit is None  # type: ignore[arg-type]


def test_check_refuses_in_process_models_and_too_few_slots() -> None:
    check(1, _Models(local=_Driver(None, in_process=True)))  # type: ignore[arg-type]  # one worker: anything goes
    check(4, _Models(remote=_Driver(None), bounded=_Driver(4)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="model 'local' .* runs inside the server process"):
        check(2, _Models(remote=_Driver(None), local=_Driver(None, in_process=True)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_concurrency = 2 generations at once, and each worker needs"):
        check(3, _Models(bounded=_Driver(2)))  # type: ignore[arg-type]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_thinking_block_signed_by_one_worker_is_accepted_by_the_other() -> None:
    """The signing key is read (here: created in the state directory) once,
    by the supervisor, before the workers are forked: a block one worker
    signed is verified by the other, and reaches the backend as
    ``reasoning_content``; a forged one does not."""
    with FakeChatServer() as fake, tempfile.TemporaryDirectory() as state:
        config = {
            "server": {"workers": 2},
            "models": {
                "vllm": {
                    "driver": "vllm",
                    "context_window": 2048,
                    "settings": {"base_url": fake.url, "model": "fake-model", "thinking": True},
                }
            },
        }
        with serve_process(config, env={"MISSIVE_STATE_DIR": state}) as server:
            until(lambda: len(children(server.process.pid)) == 2, "two workers")
            # Keep-alive connections stay with the worker that accepted them.
            pinned: dict[int, httpx.Client] = {}
            deadline = time.monotonic() + DEADLINE  # the second worker may listen a while after its fork
            while len(pinned) < 2 and time.monotonic() < deadline:
                http = httpx.Client(base_url=server.url, timeout=30)
                pid = int(http.get("/v1/status").json()["worker"]["pid"])
                if pid in pinned:
                    http.close()
                    time.sleep(0.02)
                    continue
                pinned[pid] = http
            assert len(pinned) == 2, "no connection reached the second worker"
            first, second = pinned.values()
            content = json.dumps(
                {
                    "script": [{"reasoning": "Let me think."}, {"content": "Four."}],
                    "finish_reason": "stop",
                    "usage": True,
                }
            )
            answer = first.post(
                "/v1/messages",
                json={
                    "model": "vllm",
                    "max_tokens": 2000,
                    "thinking": {"type": "enabled", "budget_tokens": 1024},
                    "messages": [{"role": "user", "content": content}],
                },
            ).json()
            thinking, text = answer["content"]
            assert thinking["type"] == "thinking" and thinking["signature"]
            assert int(first.get("/v1/status").json()["worker"]["pid"]) != int(
                second.get("/v1/status").json()["worker"]["pid"]
            )
            for block, expected in ((thinking, "Let me think."), ({**thinking, "thinking": "Forged."}, None)):
                reply = second.post(
                    "/v1/messages",
                    json={
                        "model": "vllm",
                        "max_tokens": 20,
                        "thinking": {"type": "adaptive"},
                        "messages": [
                            {"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": [block, text]},
                            {"role": "user", "content": "Sure?"},
                        ],
                    },
                )
                assert reply.status_code == 200, reply.text
                assert fake.requests[-1]["messages"][1].get("reasoning_content") == expected
                assert ("missive-dropped-thinking" in reply.headers) == (expected is None)
            for http in pinned.values():
                http.close()
        # One key for both workers; beside it only the usage both counted (missive.keys.usage).
        assert sorted(name for name in os.listdir(state) if not name.startswith("usage.sqlite3")) == [
            "thinking.key"
        ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_whose_supervisor_died_shut_down(fake: FakeChatServer) -> None:
    """SIGKILL leaves the supervisor no time to tell anyone: its pipes close,
    and each worker drains and exits as on a signal."""
    with serve_process(remote_config(fake, shutdown_grace=5)) as server:
        workers = until(
            lambda: len(children(server.process.pid)) == 2 and children(server.process.pid), "two workers"
        )
        server.process.kill()
        server.process.wait(DEADLINE)
        until(lambda: not any(alive(pid) for pid in workers), "the orphaned workers exited")
        assert "the supervisor of the workers is gone: shutting down" in server.log()


def test_batches_are_off_with_several_workers_unless_asked_for() -> None:
    one = Config.model_validate({"server": {"workers": 1}})
    settle_batches(one)
    assert one.batches.enabled
    default = Config.model_validate({"server": {"workers": 2}})
    settle_batches(default)
    assert not default.batches.enabled
    explicit = Config.model_validate({"server": {"workers": 2}, "batches": {"enabled": True}})
    with pytest.raises(ConfigError, match="server.workers = 2 and batches.enabled = true: one process owns"):
        settle_batches(explicit)
