"""Per-model admission through a live server: ``max_concurrency`` slots, a
bounded FIFO queue, 529 ``overloaded_error`` with ``retry-after`` beyond it
(core/missive/admission.py).

Requests that must hold a slot, or wait for one, go over raw sockets: a test
sees the moment the server answers (the request was admitted) and can hang up
at any moment. ``/health`` reports how many requests generate and wait. No
check depends on how fast the machine is: every wait is for an event, under
a generous deadline; held slots are held by 120 s sleeps that the tests end
by hanging up. The SDK clients use ``max_retries=0`` (the SDK retries 529s).
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import anthropic
import httpx
import pytest

from missive.testing import ServerProcess, serve_process
from missive.testing import until as poll
from missive_echo import script

ONE_SLOT = {"capabilities": {"max_concurrency": 1}}

CONFIG: dict[str, Any] = {
    "server": {"ping_interval": 0.3, "queue_depth": 2},
    "models": {
        # queue_depth from [server]: 2
        "busy": {"driver": "echo", "context_window": 1000, "settings": ONE_SLOT},
        "fifo": {"driver": "echo", "context_window": 1000, "queue_depth": 5, "settings": ONE_SLOT},
        # no waiting at all: a slot that is not given back shows as a 529
        "one": {"driver": "echo", "context_window": 1000, "queue_depth": 0, "settings": ONE_SLOT},
        "brief": {"driver": "echo", "context_window": 1000, "queue_timeout": 1.0, "settings": ONE_SLOT},
        "open": {"driver": "echo", "context_window": 1000},  # no max_concurrency: unbounded
    },
}

DEADLINE = 60.0  # seconds; only reached when a test fails
HOLD = [{"text": "holding"}, {"sleep": 120}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process(CONFIG) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


def health(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/health", timeout=10).json()


def until(url: str, check: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """Poll ``/health`` until ``check`` holds (fails after :data:`DEADLINE`)."""
    last: dict[str, Any] = {}

    def holds() -> dict[str, Any] | None:
        last.update(health(url))
        return dict(last) if check(last) else None

    found: dict[str, Any] = poll(holds, what, DEADLINE, detail=lambda: f"/health: {last}")
    return found


class Raw:
    """One ``POST /v1/messages`` on its own socket."""

    def __init__(self, url: str, model: str, steps: list[dict[str, Any]], *, stream: bool = True) -> None:
        body = json.dumps(
            {
                "model": model,
                "max_tokens": 50,
                "stream": stream,
                "messages": [{"role": "user", "content": script(*steps)}],
            }
        ).encode()
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=DEADLINE)
        self.sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )

        self.received = b""

    def status(self) -> int:
        """The response's status (waits for it)."""
        while b"\r\n" not in self.received:
            chunk = self.sock.recv(4096)
            assert chunk, f"connection closed after {self.received!r}"
            self.received += chunk
        line = self.received.split(b"\r\n", 1)[0]
        assert line.startswith(b"HTTP/1.1 "), line
        return int(line.split()[1])

    def read_all(self) -> bytes:
        """Everything the server sends until it closes the connection."""
        while chunk := self.sock.recv(65536):
            self.received += chunk
        return self.received

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(server: ServerProcess) -> Iterator[Callable[..., Raw]]:
    """Open raw requests; all are hung up at the end, and the test waits
    until the server is idle again, so tests do not leak load into each other."""
    opened: list[Raw] = []

    def open_(model: str, steps: list[dict[str, Any]] = HOLD, **kwargs: Any) -> Raw:
        request = Raw(server.url, model, steps, **kwargs)
        opened.append(request)
        return request

    yield open_
    for request in opened:
        request.close()
    until(server.url, lambda h: h["generating"] == 0 and h["waiting"] == 0, "idle after the test")


def first_answered(requests: list[Raw]) -> Raw:
    """The first of ``requests`` the server starts answering."""
    ready, _, _ = select.select([r.sock for r in requests], [], [], DEADLINE)
    assert ready, "no request was answered"
    return next(r for r in requests if r.sock is ready[0])


def hold(raw: Callable[..., Raw], model: str) -> Raw:
    """A streaming request that holds a slot of ``model`` (admitted, then silent)."""
    holder = raw(model)
    assert holder.status() == 200
    return holder


def queue(raw: Callable[..., Raw], url: str, model: str, n: int, **kwargs: Any) -> list[Raw]:
    """``n`` requests queued, one after the other (each one seen waiting
    before the next is sent, so their arrival order is known)."""
    waiting = health(url)["waiting"]
    queued = []
    for i in range(n):
        queued.append(raw(model, **kwargs))
        until(url, lambda h, k=waiting + i + 1: h["waiting"] == k, f"{waiting + i + 1} waiting")
    return queued


def simple(model: str, text: str = "hello there") -> dict[str, Any]:
    return {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": text}]}


def check_overloaded(error: anthropic.APIStatusError, *fragments: str) -> None:
    assert error.status_code == 529
    retry_after = error.response.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60, retry_after
    assert error.response.headers["request-id"].startswith("req_")
    body = error.response.json()
    assert body["type"] == "error" and body["request_id"].startswith("req_")
    assert body["error"]["type"] == "overloaded_error"
    for fragment in fragments:
        assert fragment in body["error"]["message"], body["error"]["message"]


@pytest.mark.parametrize("mode", ["create", "create-stream", "stream-helper"])
def test_a_full_queue_answers_529_with_retry_after(
    server: ServerProcess, client: anthropic.Anthropic, raw: Callable[..., Raw], mode: str
) -> None:
    hold(raw, "busy")
    queue(raw, server.url, "busy", 2)  # queue_depth 2 (the [server] default)
    with pytest.raises(anthropic.OverloadedError) as caught:
        if mode == "create":
            client.messages.create(**simple("busy"))
        elif mode == "create-stream":
            client.messages.create(**simple("busy"), stream=True)
        else:
            with client.messages.stream(**simple("busy")) as stream:
                stream.get_final_message()
    check_overloaded(caught.value, "model 'busy'", "queue_depth 2", "models.busy.queue_depth")
    assert health(server.url) == {"status": "ok", "generating": 1, "waiting": 2}  # not queued


def test_queue_timeout_answers_529(
    server: ServerProcess, client: anthropic.Anthropic, raw: Callable[..., Raw]
) -> None:
    hold(raw, "brief")  # holds its slot for 120 s; the queue_timeout is 1 s
    with pytest.raises(anthropic.OverloadedError) as caught:
        client.messages.create(**simple("brief"))
    check_overloaded(caught.value, "model 'brief'", "within 1 s", "models.brief.queue_timeout")
    assert health(server.url)["waiting"] == 0


def test_waiters_are_served_in_arrival_order(server: ServerProcess, raw: Callable[..., Raw]) -> None:
    """Each waiter, once admitted, holds the slot until the test hangs up, so
    exactly one is answered at a time: which one shows the order. Hanging up
    mid-stream also frees the slot for the next."""
    holder = hold(raw, "fifo")
    waiters = queue(raw, server.url, "fifo", 3)
    holder.close()
    for i, expected in enumerate(waiters):
        answered = first_answered(waiters[i:])
        assert answered is expected, f"waiter {waiters.index(answered)} was answered before waiter {i}"
        assert answered.status() == 200
        assert health(server.url) == {"status": "ok", "generating": 1, "waiting": 2 - i}
        answered.close()


@pytest.mark.parametrize("stream", [True, False])
def test_a_waiter_whose_client_left_is_dropped(
    server: ServerProcess, raw: Callable[..., Raw], stream: bool
) -> None:
    holder = hold(raw, "busy")
    gone, stays = queue(raw, server.url, "busy", 2, steps=[{"text": "served"}], stream=stream)
    gone.close()
    until(server.url, lambda h: h["waiting"] == 1, "the gone client's request left the queue")
    assert health(server.url)["generating"] == 1  # it did not take the slot either
    assert "left the queue of model busy (client gone)" in server.log()
    holder.close()
    assert first_answered([stays]).status() == 200  # the next in line gets the slot
    assert b"served" in stays.read_all()


def test_count_tokens_never_waits(
    server: ServerProcess, client: anthropic.Anthropic, raw: Callable[..., Raw]
) -> None:
    hold(raw, "busy")
    queue(raw, server.url, "busy", 2)
    with pytest.raises(anthropic.OverloadedError):  # the model is busy and its queue full
        client.messages.create(**simple("busy"))
    counted = client.messages.count_tokens(
        model="busy", messages=[{"role": "user", "content": "one two three"}]
    )
    assert counted.input_tokens == 3


def _after_error_before_start(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(**simple("one", script(error_before_start={"type": "api_error"})))


def _after_prompt_too_long(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        client.messages.create(**simple("one", "word " * 1200))


def _after_error_mid_generation(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(**simple("one", script({"text": "a"}, {"error": {"type": "api_error"}})))


def _after_error_mid_stream(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(
            **simple("one", script({"text": "a"}, {"error": {"type": "api_error"}}))
        ) as s:
            s.get_final_message()


def _after_a_stream(client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]) -> None:
    with client.messages.stream(**simple("one", "a b c d")) as s:
        assert s.get_final_message().content[0].text == "a b c d"


def _after_a_stop_sequence(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    with client.messages.stream(
        **simple("one", script({"text": "a STOP"}, {"sleep": 120})), stop_sequences=["STOP"]
    ) as s:
        assert s.get_final_message().stop_reason == "stop_sequence"


def _after_hanging_up_mid_stream(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    hold(raw, "one").close()
    until(server.url, lambda h: h["generating"] == 0, "the slot freed after the client hung up")


def _after_hanging_up_mid_answer(
    client: anthropic.Anthropic, server: ServerProcess, raw: Callable[..., Raw]
) -> None:
    request = raw("one", stream=False)
    until(server.url, lambda h: h["generating"] == 1, "the request generating")
    request.close()
    until(server.url, lambda h: h["generating"] == 0, "the slot freed after the client hung up")


@pytest.mark.parametrize(
    "before",
    [
        _after_error_before_start,
        _after_prompt_too_long,
        _after_error_mid_generation,
        _after_error_mid_stream,
        _after_a_stream,
        _after_a_stop_sequence,
        _after_hanging_up_mid_stream,
        _after_hanging_up_mid_answer,
    ],
    ids=lambda f: f.__name__.removeprefix("_after_"),
)
def test_the_slot_is_given_back(
    server: ServerProcess, client: anthropic.Anthropic, raw: Callable[..., Raw], before: Callable[..., None]
) -> None:
    """Model "one" lets nobody wait: a slot not given back makes the next request a 529."""
    before(client, server, raw)
    msg = client.messages.create(**simple("one", "next please"))
    assert msg.content[0].text == "next please"
    with client.messages.stream(**simple("one", "and again")) as s:
        assert s.get_final_message().content[0].text == "and again"


def test_a_model_without_max_concurrency_never_queues(server: ServerProcess, raw: Callable[..., Raw]) -> None:
    for _ in range(3):
        hold(raw, "open")  # each one is answered while the others hold the model
    assert health(server.url) == {"status": "ok", "generating": 3, "waiting": 0}
