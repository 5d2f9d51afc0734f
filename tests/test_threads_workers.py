"""Message threads with ``server.workers = 2``: each worker holds its own
threads, so a continue that reaches the other worker is answered
``thread_not_found`` and the SDK's thread helper resends the whole
conversation (docs/api-compatibility.md, "Message threads").

The SDK's requests go through a transport that sends each on a fresh
connection to a chosen worker (found with ``GET /v1/status``, which names
the worker that answered), so which worker gets which request is decided by
the test, not by the kernel.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from missive.testing import serve_process, until
from missive_openai.testing import FakeChatServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="server.workers needs os.fork")


class ToWorkers(httpx2.BaseTransport):
    """Sends the Nth request to ``order[N % len(order)]`` (a worker pid), each
    on a new connection opened until one reaches that worker; records
    ``(thread type, status, pid, messages sent)`` per request."""

    def __init__(self, url: str, order: list[int]) -> None:
        self.url = url
        self.order = order
        self.log: list[tuple[str | None, int, int, int]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        wanted = self.order[len(self.log) % len(self.order)]
        for _ in range(200):
            transport = httpx2.HTTPTransport()
            try:
                status = transport.handle_request(httpx2.Request("GET", f"{self.url}/v1/status"))
                status.read()
                if json.loads(status.content)["worker"]["pid"] != wanted:
                    continue
                response = transport.handle_request(request)  # the same, kept-alive connection
                content = response.read()
            finally:
                transport.close()
            body = json.loads(request.content) if request.content else {}
            self.log.append(
                (
                    (body.get("thread") or {}).get("type"),
                    response.status_code,
                    wanted,
                    len(body.get("messages", [])),
                )
            )
            headers = [
                (k, v)
                for k, v in response.headers.items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
            ]
            return httpx2.Response(response.status_code, headers=headers, content=content)
        raise AssertionError(f"no connection reached worker {wanted}")


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[str, list[int]]]:
    with FakeChatServer(vllm=False) as fake:
        config = {
            "server": {"workers": 2},
            "models": {
                "gen": {
                    "driver": "openai",
                    "context_window": 4096,
                    "settings": {"base_url": fake.url, "model": "fake-model"},
                }
            },
        }
        with serve_process(config) as server:

            def both() -> list[int]:
                seen = set()
                for _ in range(20):
                    with httpx2.Client(base_url=server.url, timeout=10) as http:
                        seen.add(int(http.get("/v1/status").json()["worker"]["pid"]))
                return sorted(seen) if len(seen) == 2 else []

            yield server.url, until(both, "both workers answering", 60)


def client_through(url: str, transport: ToWorkers) -> anthropic.Anthropic:
    http = httpx2.Client(transport=transport, base_url=url, timeout=30)
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, http_client=http)


def turns(client: anthropic.Anthropic) -> list[Any]:
    thread = client.beta.messages.thread(model="gen", max_tokens=16)
    return [
        thread.send({"role": "user", "content": words}) for words in ("alpha beta", "gamma delta", "epsilon")
    ]


def test_a_continue_on_the_worker_holding_the_thread_continues(workers: tuple[str, list[int]]) -> None:
    url, (one, _) = workers
    transport = ToWorkers(url, [one])
    answers = turns(client_through(url, transport))
    assert [a.content[0].text for a in answers] == ["alpha beta", "gamma delta", "epsilon"]
    assert [(kind, status, sent) for kind, status, _, sent in transport.log] == [
        ("create", 200, 1),
        ("continue", 200, 1),
        ("continue", 200, 1),
    ]


def test_a_continue_on_the_other_worker_is_resent_whole_by_the_sdk(workers: tuple[str, list[int]]) -> None:
    url, (one, other) = workers
    transport = ToWorkers(url, [one, other])  # turns alternate: create on one, continue on the other...
    answers = turns(client_through(url, transport))
    assert [a.content[0].text for a in answers] == ["alpha beta", "gamma delta", "epsilon"]
    assert transport.log == [
        ("create", 200, one, 1),
        ("continue", 404, other, 1),
        ("create", 200, one, 3),  # not held there: the SDK resends it all
        ("continue", 404, other, 1),
        ("create", 200, one, 5),
    ]
