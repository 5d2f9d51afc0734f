"""Parallel slots with continuous batching in the llamacpp driver, through the SDK.

``parallel = N`` in ``[models.<id>.settings]`` decodes up to N sequences
together in one llama.cpp context: each request takes a slot, and requests
join and leave between decode steps. These tests run a live ``missive serve``
of the embedded SmolLM2-135M with ``parallel = 4`` and check, through the
official ``anthropic`` SDK, what a client must be able to rely on:

* a greedy answer is the same whether it ran alone or beside others (up to
  llama.cpp's rounding with another batch size: two answers may part only
  where the model's next tokens are tied, see :mod:`greedy_reference`), and
  its usage is exact (``input_tokens + cache_read_input_tokens`` equals
  ``count_tokens``);
* a short request finishes while a long stream is still running (the
  generations really overlap; ``/health`` counts both as generating);
* a client that leaves stops only its own generation;
* the prompt cache never serves one conversation's tokens to another;
* a full queue still answers 529 with ``retry-after``, and ``parallel``
  is the number of generations admitted before anything queues;
* a conversation restored from host memory while the slots are busy keeps
  exact usage and its greedy answer.

Ordering is checked with events (``threading.Event``, the order in which
threads record what they saw), never with timing thresholds. Every client
uses ``max_retries=0``: the SDK retries 529s, and a retried 529 would hide an
admission failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import anthropic
import httpx
import pytest
from greedy_reference import assert_same_greedy_answer

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0}
SHORT = 32  # max_tokens of the conversations compared with their alone answers
LONG = 200  # max_tokens of a stream that must still be running while others come and go
HOLD = 1000  # max_tokens of a stream held open to occupy a slot (closed by the test)
#: Seconds; a hang guard only (a 2-core machine shared with another llama.cpp
#: process can run the model 100x slower than alone).
DEADLINE = 600.0

#: Four conversations with different prompts (the chat template adds the same
#: default system prompt to each).
PROMPTS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "How do bees make honey?",
    "Give me one tip for learning the guitar.",
]
#: SmolLM2 writes on past 200 tokens without an end-of-turn.
STORY = "Write a long story about a dragon."


def model_entry(**extra: Any) -> dict[str, Any]:
    """The embedded SmolLM2 (n_threads unset: every CPU), 2048 tokens a slot."""
    settings = {"model_path": str(default_model_path()), **extra.pop("settings", {})}
    return {"driver": "llamacpp", "context_window": 2048, "settings": settings, **extra}


def sdk(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=DEADLINE)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """The server most tests share: one model with four slots."""
    with live_server({"models": {MODEL: model_entry(settings={"parallel": 4})}}) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return sdk(url)


@pytest.fixture(scope="module")
def second_url() -> Iterator[str]:
    """A second server: the same model as :func:`url` (a reference that has
    seen none of the shared server's requests), and two models that never
    queue, one with one slot and one with two."""
    config = {
        "models": {
            MODEL: model_entry(settings={"parallel": 4}),
            "solo": model_entry(queue_depth=0, settings={"parallel": 1}),
            "duo": model_entry(queue_depth=0, settings={"parallel": 2}),
        }
    }
    with live_server(config) as base:
        yield base


# -- helpers -------------------------------------------------------------------


def turn(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def params(
    prompt: str,
    *,
    max_tokens: int = SHORT,
    system: str | None = None,
    history: list[dict[str, Any]] | None = None,
    model: str = MODEL,
) -> dict[str, Any]:
    """A greedy request's keyword arguments (for ``create`` and ``stream``)."""
    p: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [*(history or []), turn(prompt)],
        "extra_body": GREEDY,
    }
    if system is not None:
        p["system"] = system
    return p


def create(client: anthropic.Anthropic, p: dict[str, Any]) -> anthropic.types.Message:
    return client.messages.create(**p)


def counted(client: anthropic.Anthropic, p: dict[str, Any]) -> int:
    """``count_tokens`` of the request ``p``."""
    fields = {k: p[k] for k in ("model", "messages", "system") if k in p}
    return client.messages.count_tokens(**fields).input_tokens


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def prompt_size(message: anthropic.types.Message) -> int:
    return message.usage.input_tokens + message.usage.cache_read_input_tokens


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together (a barrier); their results,
    in order (the first exception is raised)."""
    barrier = threading.Barrier(len(calls))

    def released(call: Callable[[], Any]) -> Any:
        barrier.wait(DEADLINE)
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(released, call) for call in calls]
        return [future.result(DEADLINE) for future in futures]


def health(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/health", timeout=10).json()


def wait_idle(url: str) -> None:
    """Poll ``/health`` until nothing generates or waits (every slot given back)."""
    deadline = time.monotonic() + DEADLINE
    while (state := health(url))["generating"] or state["waiting"]:
        assert time.monotonic() < deadline, f"the server never became idle: {state}"
        time.sleep(0.02)


def hold(stack: ExitStack, client: anthropic.Anthropic, model: str) -> None:
    """Open a long stream on ``model`` and read it up to its first text delta:
    it then occupies a slot until ``stack`` closes it (the client leaves)."""
    stream = stack.enter_context(client.messages.stream(**params(STORY, max_tokens=HOLD, model=model)))
    for event in stream:
        if event.type == "text":
            return
    raise AssertionError("the held stream ended before its first text delta")


@pytest.fixture(scope="module")
def alone(client: anthropic.Anthropic) -> dict[str, tuple[anthropic.types.Message, int]]:
    """Each of :data:`PROMPTS` answered alone, one after the other, with its
    ``count_tokens``; its usage is exact."""
    answers = {}
    for prompt in PROMPTS:
        p = params(prompt)
        reply = create(client, p)
        n = counted(client, p)
        assert prompt_size(reply) == n, (prompt, reply.usage, n)
        answers[prompt] = (reply, n)
    return answers


def same_answer(
    got: anthropic.types.Message, wanted: anthropic.types.Message, p: dict[str, Any], n: int, what: str
) -> bool:
    """``got``'s text is ``wanted``'s, or parts from it only at a near tie
    (:func:`greedy_reference.assert_same_greedy_answer`; ``p`` the request,
    ``n`` its ``count_tokens``). True when the texts are equal."""
    return assert_same_greedy_answer(text_of(got), text_of(wanted), p["messages"], p.get("system"), n, what)


def check_as_alone(reply: anthropic.types.Message, solo: anthropic.types.Message, n: int, what: str) -> None:
    """``reply`` is the alone answer ``solo`` again (text, stop reason, output
    tokens; or a text that parts from it at a near tie) and its usage is
    exact (``n`` tokens from ``count_tokens``)."""
    assert prompt_size(reply) == n, (what, reply.usage, n)
    if same_answer(reply, solo, params(what), n, what):
        assert reply.stop_reason == solo.stop_reason, what
        assert reply.usage.output_tokens == solo.usage.output_tokens, what


# -- 1. batched greedy answers equal the alone ones ----------------------------


@pytest.mark.parametrize("n", [2, 4])
def test_concurrent_greedy_conversations_answer_as_they_do_alone(
    client: anthropic.Anthropic, alone: dict[str, tuple[anthropic.types.Message, int]], n: int
) -> None:
    """n different greedy conversations sent at once (n <= parallel, so each
    takes its own slot) give exactly the texts, stop reasons and output token
    counts each gives alone, and each one's usage is exact: sequences decoded
    in one batch never leak into each other's KV cache or sampling."""
    prompts = PROMPTS[:n]
    replies = concurrently(*(lambda p=p: create(client, params(p)) for p in prompts))
    for prompt, reply in zip(prompts, replies, strict=True):
        solo, tokens = alone[prompt]
        check_as_alone(reply, solo, tokens, prompt)


# -- 2. generations overlap ----------------------------------------------------


def test_a_short_request_finishes_while_a_long_stream_runs(url: str, client: anthropic.Anthropic) -> None:
    """A short request (4 tokens) sent after a long stream's first text delta
    ends before the long stream's ``message_stop``: it took a free slot and
    was decoded beside the long one, not queued behind it. ``/health`` counts
    both as generating at some moment (polled while they run)."""
    seen: list[str] = []
    lock = threading.Lock()
    first_text, long_done = threading.Event(), threading.Event()

    def note(what: str) -> None:
        with lock:
            seen.append(what)

    def long_stream() -> anthropic.types.Message:
        try:
            with client.messages.stream(**params(STORY, max_tokens=LONG)) as stream:
                for event in stream:
                    if event.type == "text":
                        first_text.set()
                    elif event.type == "message_stop":
                        note("long: message_stop")
                return stream.get_final_message()
        finally:
            first_text.set()  # a failed stream must not leave the test waiting
            long_done.set()

    samples: list[dict[str, Any]] = []
    short_done, polling = threading.Event(), threading.Event()

    def poll() -> None:
        # While the short request is in flight (polling costs the server CPU).
        try:
            with httpx.Client(base_url=url, timeout=DEADLINE) as http:
                while not (short_done.is_set() or long_done.is_set()):
                    sample = http.get("/health").json()
                    status = http.get("/v1/status").json()
                    sample["slots_in_use"] = status["models"][MODEL]["driver_status"]["slots_in_use"]
                    samples.append(sample)
                    polling.set()  # the short request is sent once polling runs
                    time.sleep(0.01)
        finally:
            polling.set()

    with ThreadPoolExecutor(2) as pool:
        long_future = pool.submit(long_stream)
        assert first_text.wait(DEADLINE)
        poller = pool.submit(poll)
        assert polling.wait(DEADLINE)
        try:
            short = create(client, params("Say hello.", max_tokens=4))
            note("short: complete")
        finally:
            short_done.set()
        final = long_future.result(DEADLINE)
        poller.result(DEADLINE)

    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 4, short
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == LONG, final.usage
    loads = sorted({(s["generating"], s["waiting"]) for s in samples})
    assert seen == ["short: complete", "long: message_stop"], (
        f"the short request waited for the long stream: {seen}; /health (generating, waiting) seen: {loads}"
    )
    assert any(s["generating"] == 2 for s in samples), f"/health never showed 2 generating: {loads}"
    # /v1/status sees the same from the engine: two slots in use at once.
    assert any(s["slots_in_use"] == 2 for s in samples), samples


# -- 3. a client leaving stops only its own generation -------------------------


def test_closing_one_stream_leaves_the_others_running(
    url: str, client: anthropic.Anthropic, alone: dict[str, tuple[anthropic.types.Message, int]]
) -> None:
    """Three streams start together; one is closed by its client after three
    text deltas (its generation is cancelled mid-batch). The two others run
    to their end (``end_turn`` or ``max_tokens``) with their alone texts and
    exact usage, and every slot is given back afterwards."""

    def abandoned() -> int:
        deltas = 0
        with client.messages.stream(**params(STORY, max_tokens=LONG)) as stream:
            for event in stream:
                if event.type == "text":
                    deltas += 1
                    if deltas == 3:
                        break  # leaving the block closes the connection
        return deltas

    def finished(prompt: str) -> anthropic.types.Message:
        with client.messages.stream(**params(prompt)) as stream:
            return stream.get_final_message()

    kept = PROMPTS[:2]
    deltas, *replies = concurrently(abandoned, *(lambda p=p: finished(p) for p in kept))
    assert deltas == 3
    for prompt, reply in zip(kept, replies, strict=True):
        solo, tokens = alone[prompt]
        assert reply.stop_reason in ("end_turn", "max_tokens"), reply.stop_reason
        check_as_alone(reply, solo, tokens, prompt)
    wait_idle(url)


# -- 4. the cache never crosses conversations ----------------------------------

#: Two system prompts of the same length that differ from their first
#: character: the prompts share only the chat template's opening
#: (``<|im_start|>system\n``, 3 tokens).
SYSTEM_A = "Garden notes. " + " ".join(
    f"Rule {i}: answer about plants, soil, water and light." for i in range(15)
)
SYSTEM_B = "Kitchen list. " + " ".join(
    f"Rule {i}: answer about bread, flour, yeast and ovens." for i in range(15)
)
SHARED_AT_MOST = 10  # tokens two prompts that differ from their first system character may share


def test_the_cache_never_serves_one_conversation_to_another(
    client: anthropic.Anthropic, second_url: str
) -> None:
    """Conversation A runs once, then again, and while its second run streams
    (after its first text delta) conversation B arrives, with a system prompt
    of the same length that differs from its first character and another user
    message. B is served no more from the cache than the template opening the
    two prompts share, its usage is exact, and its text is the one a server
    that never saw A's second run gives (same requests in the same order on a
    fresh server: A, then B)."""
    a = params("Which flowers like shade?", max_tokens=40, system=SYSTEM_A)
    b = params("How long should dough rise?", max_tokens=40, system=SYSTEM_B)
    assert len(SYSTEM_A) == len(SYSTEM_B)
    first_a = create(client, a)
    a_started = threading.Event()

    def second_a() -> anthropic.types.Message:
        try:
            with client.messages.stream(**a) as stream:
                for event in stream:
                    if event.type == "text":
                        a_started.set()
                return stream.get_final_message()
        finally:
            a_started.set()

    with ThreadPoolExecutor(1) as pool:
        a_future = pool.submit(second_a)
        assert a_started.wait(DEADLINE)
        b_reply = create(client, b)
        a_reply = a_future.result(DEADLINE)

    assert b_reply.usage.cache_read_input_tokens <= SHARED_AT_MOST, b_reply.usage
    assert prompt_size(b_reply) == counted(client, b), b_reply.usage
    assert prompt_size(a_reply) == counted(client, a), a_reply.usage
    same_answer(a_reply, first_a, a, counted(client, a), "A again")

    reference = sdk(second_url)
    create(reference, a)
    b_fresh = create(reference, b)
    assert b_fresh.usage.cache_read_input_tokens <= SHARED_AT_MOST, b_fresh.usage
    same_answer(b_reply, b_fresh, b, counted(client, b), "B beside A / B on a fresh server")


# -- 5. admission: parallel slots, then 529 --------------------------------------


@pytest.mark.parametrize(("model", "slots"), [("solo", 1), ("duo", 2)])
def test_slots_are_admitted_then_a_full_queue_answers_529(second_url: str, model: str, slots: int) -> None:
    """With ``queue_depth = 0``, ``parallel`` streams are admitted and
    generate at once (each held open after its first text delta); the next
    request gets 529 ``overloaded_error`` with a ``retry-after`` of 1..60 s
    (the SDK's retries are off) and a message naming the limits. Once the
    held clients leave, every slot is given back and the model answers
    again. (tests/test_admission.py covers the queue rules on the echo
    driver; this is the llamacpp driver's ``max_concurrency`` = ``parallel``.)"""
    client = sdk(second_url)
    with ExitStack() as stack:
        for _ in range(slots):
            hold(stack, client, model)
        assert health(second_url)["generating"] == slots
        with pytest.raises(anthropic.OverloadedError) as caught:
            create(client, params("Say hello.", max_tokens=4, model=model))
    error = caught.value
    assert error.status_code == 529
    retry_after = error.response.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60, retry_after
    body = error.response.json()
    assert body["error"]["type"] == "overloaded_error"
    for fragment in (f"model '{model}'", f"max_concurrency {slots}", "queue_depth 0"):
        assert fragment in body["error"]["message"], body["error"]["message"]
    wait_idle(second_url)
    again = create(client, params("Say hello.", max_tokens=4, model=model))
    assert again.usage.output_tokens == 4


# -- 6. host-memory restores under load ----------------------------------------

SYSTEM_HISTORY = "History tutor. " + " ".join(
    f"Rule {i}: answer about kings, wars, cities and trade, in plain words." for i in range(12)
)


def test_usage_stays_exact_when_a_conversation_is_restored_while_slots_are_busy(
    client: anthropic.Anthropic,
) -> None:
    """Conversation A's first turn; then four other new conversations at once
    (every slot taken, so A's state leaves the context and is kept in host
    memory); then A's second turn. It is served from the restored state (at
    least A's first prompt read from the cache) with exact usage, and sent
    again it gives the same greedy text with its whole prompt but the last
    token read from the cache."""
    question = "Who built the pyramids?"
    one = create(client, params(question, max_tokens=24, system=SYSTEM_HISTORY))
    first_prompt = prompt_size(one)

    others = [
        params(prompt, max_tokens=24, system=f"Helper {i}. Answer briefly.")
        for i, prompt in enumerate(PROMPTS)
    ]
    replies = concurrently(*(lambda p=p: create(client, p) for p in others))
    for p, reply in zip(others, replies, strict=True):
        assert prompt_size(reply) == counted(client, p), reply.usage

    history = [turn(question), {"role": "assistant", "content": text_of(one)}]
    second = params("And why?", max_tokens=24, system=SYSTEM_HISTORY, history=history)
    tokens = counted(client, second)
    two = create(client, second)
    assert prompt_size(two) == tokens, two.usage
    assert two.usage.cache_read_input_tokens >= first_prompt - 1, (two.usage, first_prompt)
    again = create(client, second)
    assert prompt_size(again) == tokens, again.usage
    assert again.usage.cache_read_input_tokens >= tokens - 1, (again.usage, tokens)
    same_answer(again, two, second, tokens, "the second turn again")


# -- 7. each sequence keeps its own grammar and stop sequences ------------------

WEATHER = {
    "name": "get_weather",
    "description": "Get the weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_a_forced_tool_call_and_free_answers_decoded_together(client: anthropic.Anthropic) -> None:
    """A forced tool call (a grammar in its sampler) decoded in the same steps
    as free answers and one with a stop sequence: the call is a valid
    ``tool_use`` with its schema's input, the free answers equal their alone
    texts up to near ties (no grammar leaked into them), the stop sequence ends only its own
    answer."""
    forced = {
        **params("What is the weather in Paris?", max_tokens=64),
        "tools": [WEATHER],
        "tool_choice": {"type": "any"},
    }
    free = [params(p) for p in PROMPTS[:2]]
    alone = [text_of(create(client, p)) for p in free]
    stop_at = alone[0].split()[2]  # a word the first answer reaches
    stopped = {**free[0], "stop_sequences": [stop_at]}
    call, first, second, cut = concurrently(
        *(lambda p=p: create(client, p) for p in (forced, *free, stopped))
    )
    assert call.stop_reason == "tool_use", call
    use = next(block for block in call.content if block.type == "tool_use")
    assert use.name == "get_weather" and isinstance(use.input.get("city"), str), use
    for got, wanted, p in zip((first, second), alone, free, strict=True):
        assert_same_greedy_answer(
            text_of(got), wanted, p["messages"], None, counted(client, p), "beside a grammar"
        )
    if cut.stop_reason == "stop_sequence":
        assert cut.stop_sequence == stop_at
        assert alone[0].startswith(text_of(cut)) and stop_at not in text_of(cut)
    else:
        # Decoded beside others, it parted from its alone answer at a near
        # tie before the stop word (assert_same_greedy_answer raises for any
        # other parting), so the stop sequence never came.
        assert stop_at not in text_of(cut)
        assert not assert_same_greedy_answer(
            text_of(cut), alone[0], free[0]["messages"], None, counted(client, free[0]), "the stopped answer"
        )
