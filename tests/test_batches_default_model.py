"""Message Batches on the embedded default model (SmolLM2 on the llamacpp
driver), through the SDK: a batch of good and bad requests gives, request by
request, what each gives on its own (greedy: ``temperature: 0`` in the
params), and an interactive request preempts a batch request that holds
the slot it needs.

The server has two slots; batches may take one (``batches.max_slots = 1``),
so batch requests run one at a time, alone, and their greedy answers can be
compared exactly with the same requests sent one by one (answers decoded
beside another sequence may differ: docs/drivers.md, "Slots and continuous
batching").
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import ServerProcess, serve_process, wait_until
from missive_llamacpp.plugin import default_model_path

MODEL = "smollm2-135m"
DEADLINE = 600.0  # a hang guard on a slow machine

CONFIG: dict[str, Any] = {
    "server": {"delta_interval": 0},  # one streamed delta per decode step
    "batches": {"max_slots": 1},
    "models": {
        MODEL: {
            "driver": "llamacpp",
            "context_window": 512,
            "settings": {"model_path": str(default_model_path()), "parallel": 2},
        },
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    state = tmp_path_factory.mktemp("state")
    with serve_process(CONFIG, env={"MISSIVE_STATE_DIR": str(state)}, timeout=300) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


def params(text: str, max_tokens: int = 24, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


GOOD = {
    "colours": params("List three colours of the rainbow."),
    "capital": params("What is the capital of France?"),
    "haiku": params("Write a haiku about the sea.", system="You are a poet."),
    "short": params("Say hello.", max_tokens=3),
}
BAD = {
    "too-long": params("hello " * 700),
    "thinking": params("Think first.", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}),
    "no-model": {**params("x"), "model": "no-such-model"},
    "empty": {**params("x"), "messages": []},
}


def alone(client: anthropic.Anthropic, body: dict[str, Any]) -> Any:
    rest = dict(body)
    required = {key: rest.pop(key) for key in ("model", "max_tokens", "messages")}
    try:
        return client.messages.create(**required, extra_body=rest)
    except anthropic.APIStatusError as exc:
        return exc


def wait_ended(client: anthropic.Anthropic, batch_id: str) -> Any:
    assert wait_until(
        lambda: client.messages.batches.retrieve(batch_id).processing_status == "ended",
        DEADLINE,
        interval=0.2,
    )
    return client.messages.batches.retrieve(batch_id)


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    found = re.search(rf'^missive:{name}\{{model_name="{MODEL}"\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_mixed_batch_equals_the_requests_one_by_one(client: anthropic.Anthropic) -> None:
    items = [{"custom_id": k, "params": v} for k, v in {**GOOD, **BAD}.items()]
    batch = client.messages.batches.create(requests=items)
    ended = wait_ended(client, batch.id)
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (len(GOOD), len(BAD))
    got = {line.custom_id: line.result for line in client.messages.batches.results(batch.id)}
    assert set(got) == set(GOOD) | set(BAD)
    for custom_id, body in GOOD.items():
        result, single = got[custom_id], alone(client, body)
        assert result.type == "succeeded", (custom_id, result)
        message = result.message
        assert message.content[0].text == single.content[0].text, custom_id
        assert message.stop_reason == single.stop_reason
        assert message.usage.output_tokens == single.usage.output_tokens
        # The same prompt; how much of it came from the cache may differ.
        total = message.usage.input_tokens + message.usage.cache_read_input_tokens
        assert total == single.usage.input_tokens + single.usage.cache_read_input_tokens
    for custom_id, body in BAD.items():
        result, single = got[custom_id], alone(client, body)
        assert result.type == "errored", (custom_id, result)
        assert isinstance(single, anthropic.APIStatusError), custom_id
        assert result.error.error.type == single.body["error"]["type"], custom_id
        assert result.error.error.message == single.body["error"]["message"], custom_id
    assert got["too-long"].error.error.message.startswith("prompt is too long: ")


def test_an_interactive_request_waits_one_step_for_a_batch_slot(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    """Both slots busy (a batch request and an interactive stream): one more
    interactive request preempts the batch request. The stream's deltas
    (``delta_interval = 0``: one per decode step) count the steps the model
    made while that request was served: its own prompt and 5 tokens, plus
    the one step the batch request takes to stop, not the hundreds of steps
    left of the batch request's answer."""
    # Greedy output differs by CPU: "count from one to one thousand" ended within
    # a few tokens on an AVX-512 CPU; this prompt (the long answer of
    # benchmarks/bench_slots.py) ran to max_tokens there.
    long = params(
        "Write a very long story about a lighthouse keeper and the storm of the century, with many "
        "chapters, many characters and a lot of detail. Do not stop early.",
        max_tokens=400,
    )
    batch = client.messages.batches.create(
        requests=[{"custom_id": f"long{i}", "params": long} for i in range(2)]
    )
    assert wait_until(lambda: metric(server.url, "batch_requests_running") == 1, 120, interval=0.05)
    holder = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)
    steps: list[float] = []

    def hold() -> None:
        # Greedy, like the batch requests: sampled, the model may stop after a
        # few tokens, and the stream must outlast the measure.
        with holder.messages.stream(
            model=MODEL, max_tokens=400, messages=long["messages"], extra_body={"temperature": 0}
        ) as stream:
            for event in stream:
                if event.type == "content_block_delta":
                    steps.append(time.monotonic())

    thread = threading.Thread(target=hold)
    thread.start()
    assert wait_until(
        lambda: metric(server.url, "num_requests_running") == 2 and len(steps) > 2, 300, interval=0.05
    ), (
        f"{metric(server.url, 'num_requests_running')} running, {len(steps)} streamed, "
        f"{metric(server.url, 'batch_requests_running')} batch\n"
        + "\n".join(line for line in server.log().splitlines() if " GET " not in line)
    )
    # (Between two batch requests the slot is free for a moment, and a
    # request takes it without preempting: then it tries again.)
    during = None
    for _ in range(5):
        before = metric(server.url, "batch_preemptions_total")
        sent = time.monotonic()
        answer = client.messages.create(
            model=MODEL,
            max_tokens=5,
            messages=[{"role": "user", "content": "Hi"}],
            extra_body={"temperature": 0},
        )
        answered = time.monotonic()
        assert answer.content
        if metric(server.url, "batch_preemptions_total") == before + 1:
            during = sum(1 for t in steps if sent <= t <= answered)
            break
    assert during is not None, "no preemption in 5 tries"
    assert len(steps) < 395, "the stream ended before the measure was over"
    assert during <= 25, f"{during} decode steps while one short request was served"
    client.messages.batches.cancel(batch.id)
    ended = wait_ended(client, batch.id)
    assert ended.request_counts.succeeded + ended.request_counts.canceled == 2
    thread.join(DEADLINE)
