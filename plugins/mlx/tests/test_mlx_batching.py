"""Continuous batching of the MLX driver (``settings.parallel``), served for real.

Through a live server and the official ``anthropic`` SDK, on SmolLM2-135M
converted to MLX with ``parallel = 3``:

* three streams sent together are decoded together (each one's first text
  comes before any of them ends) and give, greedy, the answers each gives
  alone;
* two conversations at once: each second turn reads its first turn
  (prompt and answer) from the cache its slot kept;
* cancelled streams free their slots within a step: ``/v1/status`` shows
  none in use, and a request after them is served;
* ``max_tokens: 0`` warms a slot; the thinking budget's close is written
  into a running sequence of the batch (its tokens equal those of the
  one-at-a-time runner);
* the tiny hybrid (LFM2) and sliding-window (Gemma 3) models, whose caches
  cannot always be trimmed: a two-turn conversation sent three at a time
  answers as ``parallel = 1`` answers it;
* ``parallel`` is validated (the errors name the setting).

Greedy through SDK 2.16, which lacks the ``temperature`` keyword:
``extra_body={"temperature": 0}``. No timing is asserted.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.config import ConfigError, ModelEntry
from missive.driver.events import Finished, TextDelta
from missive.testing import (
    THINKING_CHATML,
    ServerProcess,
    ask_counted,
    check_order,
    generation_request,
    serve_process,
)
from missive.testing import collect_events as collect

MODEL = "m"
GREEDY = {"temperature": 0.0}
DEADLINE = 600.0
QUESTIONS = [
    "Count from one to twenty in words.",
    "Write a short poem about the sea.",
    "List the days of the week.",
]


def serve(path: Path, parallel: int, **settings: Any) -> Any:
    entry = {
        "driver": "mlx",
        "context_window": 2048,
        "settings": {"model_path": str(path), "parallel": parallel, **settings},
    }
    return serve_process({"models": {MODEL: entry}}, timeout=300)


def sdk(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


@dataclasses.dataclass
class Streamed:
    text: str = ""
    usage: Any = None
    first: float = 0.0  # when its first text came
    end: float = 0.0


def stream(client: anthropic.Anthropic, messages: list[dict[str, Any]], max_tokens: int = 24) -> Streamed:
    out = Streamed()
    with client.messages.stream(
        model=MODEL, max_tokens=max_tokens, messages=messages, extra_body=GREEDY
    ) as s:
        for piece in s.text_stream:
            if not out.first and piece:
                out.first = time.monotonic()
            out.text += piece
        out.usage = s.get_final_message().usage
    out.end = time.monotonic()
    return out


def together(client: anthropic.Anthropic, conversations: list[list[dict[str, Any]]], **kw: Any) -> list[Any]:
    """Stream every conversation at once (one thread each, released together)."""
    results: list[Any] = [None] * len(conversations)
    gate = threading.Barrier(len(conversations))

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = stream(client, conversations[i], **kw)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conversations))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    for r in results:
        assert isinstance(r, Streamed), r
    return results


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def status(server: ServerProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.url}/v1/status", timeout=30) as r:
        body = json.load(r)
    models = body["models"] if "models" in body else body
    entry = models[MODEL] if isinstance(models, dict) else next(m for m in models if m.get("id") == MODEL)
    return entry


def find(tree: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a JSON tree (the status nests it)."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        tree = list(tree.values())
    if isinstance(tree, list):
        for item in tree:
            found = find(item, key)
            if found is not None:
                return found
    return None


@pytest.fixture(scope="module")
def batched(mlx_model_dir: Path) -> Iterator[ServerProcess]:
    with serve(mlx_model_dir, 3) as server:
        yield server


# -- SmolLM2, parallel = 3 ---------------------------------------------------


def test_streams_sent_together_are_decoded_together_and_answer_as_alone(batched: ServerProcess) -> None:
    client = sdk(batched)
    alone = [stream(client, user(q)) for q in QUESTIONS]
    both = together(client, [user(q) for q in QUESTIONS])
    assert [r.text for r in both] == [r.text for r in alone]
    assert [r.usage.output_tokens for r in both] == [r.usage.output_tokens for r in alone]
    assert all(r.text.strip() for r in alone)
    # decoded together: every one had its first text before any of them ended
    assert max(r.first for r in both) < min(r.end for r in both)
    assert "3 slots decoded together" in batched.log()


WEATHER = {
    "name": "get_weather",
    "description": "Get the weather in a city for some days",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}


def test_forced_calls_in_a_batch_are_the_calls_made_alone(batched: ServerProcess) -> None:
    """Each sequence of a batch samples under its own grammar (a logits
    processor per sequence): forced calls and a free answer sent together
    equal each sent alone."""
    client = sdk(batched)
    cities = ["Paris", "Oslo"]

    def forced(city: str) -> Any:
        return client.messages.create(
            model=MODEL,
            max_tokens=60,
            tools=[WEATHER],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            messages=user(f"Weather in {city} for 3 days?"),
            extra_body=GREEDY,
        )

    alone = [forced(c) for c in cities]
    free = stream(client, user(QUESTIONS[0]))
    results: list[Any] = [None] * 3
    gate = threading.Barrier(3)

    def run(i: int) -> None:
        gate.wait()
        results[i] = forced(cities[i]) if i < 2 else stream(client, user(QUESTIONS[0]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    for before, after in zip(alone, results[:2], strict=True):
        assert before.stop_reason == after.stop_reason == "tool_use", (before.content, after.content)
        assert [b.input for b in before.content] == [b.input for b in after.content]
    assert results[2].text == free.text


def test_a_vision_model_needs_parallel_1(request: pytest.FixtureRequest) -> None:
    """Images enter as embeddings one sequence at a time: ``parallel > 1`` on
    a vision folder is a start-up error naming the setting."""
    from missive.api import ConfigError
    from missive_mlx.batched import BatchedMlxRunner
    from missive_mlx.settings import parse_settings

    path = request.getfixturevalue("qwen_vl_dir")
    runner = BatchedMlxRunner("vl", parse_settings("vl", {"model_path": str(path), "parallel": 2}), 2048)
    with pytest.raises(ConfigError, match=r"settings\.parallel = 2 is not supported for a vision model"):
        runner.load()


def test_each_second_turn_reads_its_first_from_its_slot(batched: ServerProcess) -> None:
    client = sdk(batched)
    firsts = [user("What is the capital of France?"), user("What is the capital of Italy?")]
    turn1 = together(client, firsts, max_tokens=32)
    seconds = [
        first + [{"role": "assistant", "content": r.text}, {"role": "user", "content": "And of Spain?"}]
        for first, r in zip(firsts, turn1, strict=True)
    ]
    turn2 = together(client, seconds, max_tokens=8)
    for first, second, r1, r2 in zip(firsts, seconds, turn1, turn2, strict=True):
        prompt1 = client.messages.count_tokens(model=MODEL, messages=first).input_tokens
        prompt2 = client.messages.count_tokens(model=MODEL, messages=second).input_tokens
        assert r2.usage.input_tokens + r2.usage.cache_read_input_tokens == prompt2  # usage exact
        # the first prompt and (as far as it tokenizes back the same) its answer
        # come from the cache its sequence left (its end, EOS, is the template's <|im_end|>)
        assert prompt1 < r2.usage.cache_read_input_tokens <= prompt1 + r1.usage.output_tokens + 1, (r1, r2)
    # the two conversations are kept in two slots
    held = [s.get("tokens_cached", 0) for s in find(status(batched), "slot_states")]
    assert sum(1 for n in held if n > 0) >= 2, held


def test_cancelled_streams_free_their_slots(batched: ServerProcess) -> None:
    client = sdk(batched)
    gate = threading.Barrier(3)
    got: list[int] = [0, 0, 0]

    def cancel_after_a_few(i: int) -> None:
        gate.wait()
        with client.messages.stream(
            model=MODEL, max_tokens=1500, messages=user(f"Tell a long story about dragon {i}.")
        ) as s:
            for piece in s.text_stream:
                got[i] += 1 if piece else 0
                if got[i] >= 3:
                    break  # leaving the block closes the stream: the request is cancelled

    threads = [threading.Thread(target=cancel_after_a_few, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert got == [3, 3, 3]
    deadline = time.monotonic() + 30  # within a step of each, far less than 1500 tokens
    while (in_use := find(status(batched), "slots_in_use")) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert in_use == 0
    message, _ = ask_counted(client, MODEL, user("What is the capital of France?"), "s", 8, **GREEDY)
    assert message.usage.output_tokens > 0


def test_max_tokens_zero_warms_a_slot(batched: ServerProcess) -> None:
    client = sdk(batched)
    messages = user("Warm this prompt up, then answer: what is two plus two?")
    warm, counted = ask_counted(client, MODEL, messages, "warm-up", 0, **GREEDY)
    assert warm.stop_reason == "max_tokens" and warm.usage.output_tokens == 0
    hot, _ = ask_counted(client, MODEL, messages, "warm-up", 2, **GREEDY)
    # generation needs the logits of the last prompt token: it is read again
    assert hot.usage.cache_read_input_tokens == counted - 1 and hot.usage.input_tokens == 1


# -- the thinking budget inside a batch (in process) ---------------------------


async def thinking_run(model_dir: Path, parallel: int) -> tuple[list[Any], list[int], int]:
    """The budget's run (5 reasoning tokens, then the close); with ``parallel
    > 1`` beside another sequence. Its events, the tokens its cache was kept
    with (its slot's, else the store's newest entry), its prompt's count."""
    import anyio

    from missive.thinking.plan import ThinkingPlan
    from missive_mlx.driver import MlxDriver

    entry = ModelEntry(
        driver="mlx",
        context_window=512,
        settings={"model_path": str(model_dir), "chat_template": THINKING_CHATML, "parallel": parallel},
    )
    d = MlxDriver("smollm2-mlx", entry)
    await d.start()
    try:
        base = generation_request(
            user("Tell a story about a dragon."),
            model="smollm2-mlx",
            max_tokens=16,
            temperature=0.0,
            thinking={"type": "adaptive"},
        )
        req = dataclasses.replace(base, thinking=ThinkingPlan(requested=True, budget_tokens=5))
        other = generation_request(user("Count to ten."), model="smollm2-mlx", max_tokens=12, temperature=0.0)
        counted = await d.count_tokens(req)
        results: dict[str, list[Any]] = {}

        async def run(name: str, r: Any) -> None:
            results[name] = await collect(d.generate(r))

        async with anyio.create_task_group() as tg:
            if parallel > 1:
                tg.start_soon(run, "other", other)  # decoded alongside
            tg.start_soon(run, "req", req)
        close = d.runner.encode_special("\n</think>\n\n")
        if parallel > 1:
            assert d._batcher.slots == parallel
            kept = next(
                s.tokens for s in d.runner._slots if s.tokens[counted + 5 : counted + 5 + len(close)] == close
            )
        else:
            kept = d.runner.store._entries[-1].tokens
    finally:
        await d.aclose()
    assert kept[counted + 5 : counted + 5 + len(close)] == close  # five reasoning tokens, then the close
    return results["req"], kept, counted


@pytest.mark.anyio
async def test_thinking_budget_close_is_appended_inside_the_batch(mlx_model_dir: Path) -> None:
    batched_events, batched_kept, counted = await thinking_run(mlx_model_dir, 3)
    single_events, single_kept, _ = await thinking_run(mlx_model_dir, 1)
    check_order(batched_events)

    def text(events: list[Any]) -> tuple[str, int]:
        """The output and its tokens (how pieces group into deltas depends on timing)."""
        deltas = [e for e in events if isinstance(e, TextDelta)]
        return "".join(e.text for e in deltas), sum(e.tokens for e in deltas)

    assert text(batched_events) == text(single_events)
    assert "\n</think>\n\n" in text(batched_events)[0]
    finished = batched_events[-1]
    assert isinstance(finished, Finished) and finished.output_tokens == text(batched_events)[1]
    assert batched_kept == single_kept  # the slot holds what the one-at-a-time runner stored


@pytest.mark.anyio
async def test_a_failed_step_fails_its_sequences_and_the_next_is_served(mlx_model_dir: Path) -> None:
    from missive.protocol.errors import ApiError
    from missive_mlx.driver import MlxDriver

    entry = ModelEntry(
        driver="mlx", context_window=512, settings={"model_path": str(mlx_model_dir), "parallel": 2}
    )
    d = MlxDriver("smollm2-mlx", entry)
    await d.start()
    try:

        def broken() -> Any:
            raise RuntimeError("boom")

        d.runner._gen.next = broken  # this generator only: the runner makes a new one after a failure
        req = generation_request(user("Say hi."), model="smollm2-mlx", max_tokens=4, temperature=0.0)
        with pytest.raises(ApiError, match=r"mlx-lm failed a batched step of 1 sequences: boom"):
            await collect(d.generate(req))
        events = await collect(d.generate(req))
    finally:
        await d.aclose()
    check_order(events)
    assert isinstance(events[-1], Finished) and events[-1].output_tokens > 0


# -- caches that cannot be trimmed -------------------------------------------


@pytest.mark.parametrize("kind", ["hybrid", "sliding"])
def test_untrimmable_caches_answer_as_one_at_a_time(kind: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(f"{kind}_model_dir")
    firsts = [user(f"{q} Then say it again, slowly.") for q in QUESTIONS]

    def conversation(server: ServerProcess, at_once: bool) -> list[list[Any]]:
        """Each first turn, its second turn, the first turn sent again (a
        regenerated answer: the slot holds more than that prompt, a cache
        that cannot be cut back to it): the answers and what each read from cache."""
        client = sdk(server)
        go = (
            (lambda convs, **kw: together(client, convs, **kw))
            if at_once
            else (lambda convs, **kw: [stream(client, c, **kw) for c in convs])
        )
        turn1 = go(firsts, max_tokens=12)
        seconds = [
            f + [{"role": "assistant", "content": r.text or "ok"}, {"role": "user", "content": "More."}]
            for f, r in zip(firsts, turn1, strict=True)
        ]
        turn2 = go(seconds, max_tokens=12)
        again = go(firsts, max_tokens=12)
        for s, r in zip(seconds + firsts, turn2 + again, strict=True):
            counted = client.messages.count_tokens(model=MODEL, messages=s).input_tokens
            assert r.usage.input_tokens + r.usage.cache_read_input_tokens == counted
        return [[(r.text, r.usage.cache_read_input_tokens) for r in turn] for turn in (turn1, turn2, again)]

    # room for every checkpoint: 3 conversations x 2 prompts
    with serve(path, 1, prompt_cache_entries=8) as server:
        one = conversation(server, at_once=False)
    with serve(path, 3, prompt_cache_entries=8) as server:
        three = conversation(server, at_once=True)
    texts = [[text for text, _ in turn] for turn in three]
    assert texts == [[text for text, _ in turn] for turn in one]
    assert texts[2] == texts[0]  # the regenerated answer is the first one (greedy)
    assert all(read > 0 for _, read in three[1] + three[2]), three  # the later turns reused the first


# -- settings ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"parallel": 0}, r"settings\.parallel: Input should be greater than or equal to 1"),
        ({"parallel": 65}, r"settings\.parallel: Input should be less than or equal to 64"),
        ({"parallel": "3"}, r"settings\.parallel: Input should be a valid integer"),
        ({"parallel": True}, r"settings\.parallel: Input should be a valid integer"),
        ({"parallel": 2.5}, r"settings\.parallel: Input should be a valid integer"),
        ({"parallel": 2, "kv_bits": 8}, r"settings: parallel = 2 with kv_bits = 8"),
        ({"parallel": 2, "seed": 1}, r"settings: parallel = 2 with seed"),
    ],
)
def test_parallel_is_validated(settings: dict[str, Any], message: str) -> None:
    from missive_mlx.settings import parse_settings

    with pytest.raises(ConfigError, match=rf"model 'm': invalid mlx setting {message}"):
        parse_settings("m", {"model_path": "x", **settings})


def test_parallel_sets_max_concurrency_and_the_runner() -> None:
    from missive_mlx.batched import BatchedMlxRunner
    from missive_mlx.driver import MlxDriver
    from missive_mlx.runner import MlxRunner

    three = MlxDriver("m", ModelEntry(driver="mlx", settings={"model_path": "x", "parallel": 3}))
    one = MlxDriver("m", ModelEntry(driver="mlx", settings={"model_path": "x"}))
    assert three.capabilities.max_concurrency == 3 and isinstance(three.runner, BatchedMlxRunner)
    assert one.capabilities.max_concurrency == 1 and type(one.runner) is MlxRunner
