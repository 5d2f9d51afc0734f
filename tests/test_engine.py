"""The in-process engine (missive.engine) on a scripted runner: no model, no threads of a backend.

The runner below tokenizes one character per token and "samples" a scripted
text; it records what the engine asked of it, so the engine's rules (prompt
path, Started before the queue, exact usage, cancellation, the thinking
budget, the FIFO permits) are checked without llama.cpp or MLX.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import anyio
import pytest

from missive.config import ModelEntry
from missive.driver.capabilities import Capabilities
from missive.driver.events import Finished, Started, TextDelta
from missive.driver.thinking import ThinkingPlan
from missive.engine import Cancelled, ImageMarks, LocalDriver, ModelInfo, Prompt, Runner, Sequence
from missive.engine.runner import PENDING, Batched
from missive.engine.scheduler import Scheduler
from missive.protocol.errors import ApiError, PromptTooLongError
from missive.testing import (
    THINKING_CHATML,
    check_order,
    generation_request,
    text_of,
)
from missive.testing import (
    collect_events as collect,
)

EOG = 0
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ScriptedRunner:
    """Tokens are code points; ``step`` plays ``script`` then an end-of-generation token."""

    backend = "scripted"
    tokenize_threads = 2
    image_marker = None

    def __init__(self, script: str, template: str = CHATML, context: int = 4096) -> None:
        self.script = [ord(c) for c in script]
        self.template = template
        self.context = context
        self.cached: list[int] = []
        self.appended: list[list[int]] = []
        self.ended: list[bool] = []
        self.gate: threading.Event | None = None  # step waits on it when set
        self.fail_at: int | None = None
        self.closed = False

    def load(self) -> ModelInfo:
        return ModelInfo(self.context, self.template, control_texts=("<|im_end|>", "<|im_start|>"))

    def close(self) -> None:
        self.closed = True

    def tokenize(self, pieces: list[tuple[str, bool]], marks: ImageMarks | None) -> Prompt:
        tokens = [ord(c) for text, _ in pieces for c in text]
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        return Prompt(tokens)

    def encode_special(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def reusable(self, prompt: Prompt) -> int:
        n = 0
        for a, b in zip(self.cached, prompt.tokens, strict=False):
            if a != b:
                break
            n += 1
        return min(n, len(prompt.tokens) - 1)

    def begin(self, seq: Sequence) -> None:
        seq.reused = self.reusable(seq.prompt)
        if seq.cancelled():
            raise Cancelled
        seq.state = iter(self.script)

    def step(self, seq: Sequence) -> int | None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_at is not None and len(seq.output) == self.fail_at:
            raise RuntimeError("boom")
        token = next(seq.state, EOG)
        return None if token == EOG else token

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        self.appended.append(list(tokens))

    def detokenizer(self, seq: Sequence) -> Any:
        class Text:
            def add(self, token: int) -> str:
                return chr(token)

            def flush(self) -> str:
                return ""

        return Text()

    def end(self, seq: Sequence, ok: bool) -> None:
        self.ended.append(ok)
        if ok:
            self.cached = seq.prompt.tokens + seq.output


class ScriptedDriver(LocalDriver):
    name = "scripted"


async def make(script: str, **kw: Any) -> ScriptedDriver:
    runner = ScriptedRunner(script, **kw)
    assert isinstance(runner, Runner)
    driver = ScriptedDriver("m", ModelEntry(driver="scripted"), Capabilities(max_concurrency=1), runner)
    await driver.start()
    return driver


def request(text: str = "hi", max_tokens: int = 16, **fields: Any) -> Any:
    return generation_request([{"role": "user", "content": text}], model="m", max_tokens=max_tokens, **fields)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_usage_is_exact_and_count_tokens_equals_started() -> None:
    d = await make("Hello!")
    try:
        req = request()
        counted = await d.count_tokens(req)
        events = await collect(d.generate(req))
        started, finished = check_order(events)
        assert started.input_tokens + started.cache_read_input_tokens == counted
        assert text_of(events) == "Hello!" and finished == Finished("end_turn", output_tokens=6)
        assert sum(e.tokens for e in events if isinstance(e, TextDelta)) == 6
        # the next turn reads the first one from the runner's cache
        again = (await collect(d.generate(request(max_tokens=2))))[0]
        assert again.cache_read_input_tokens == counted - 1 and again.input_tokens == 1
        assert d.runner.ended == [True, True]
    finally:
        await d.aclose()
    assert d.runner.closed


@pytest.mark.anyio
async def test_max_tokens_clamp_too_long_and_warm_up() -> None:
    d = await make("a long answer" * 10, context=80)
    try:
        counted = await d.count_tokens(request())
        events = await collect(d.generate(request(max_tokens=1000)))
        assert events[-1] == Finished("max_tokens", output_tokens=80 - counted)
        assert await collect(d.generate(request(max_tokens=0))) == [
            Started(input_tokens=1, cache_read_input_tokens=counted - 1),
            Finished("max_tokens", output_tokens=0),
        ]
        with pytest.raises(PromptTooLongError, match=r"prompt is too long: \d+ tokens > 79 maximum"):
            await collect(d.generate(request("x" * 50)))
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_a_runner_failure_is_an_api_error_and_frees_the_model() -> None:
    d = await make("abcdef")
    d.runner.fail_at = 2
    try:
        with pytest.raises(ApiError, match="scripted failed while generating: boom"):
            await collect(d.generate(request()))
        assert d.runner.ended == [False] and d._scheduler.available == 1
        d.runner.fail_at = None
        check_order(await collect(d.generate(request())))
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_closing_stops_the_thread_and_queued_requests_wait_fifo() -> None:
    d = await make("x" * 1000)
    gate = d.runner.gate = threading.Event()
    try:
        running = d.generate(request(max_tokens=1000))
        assert isinstance(await running.__anext__(), Started)
        gate.set()
        assert isinstance(await running.__anext__(), TextDelta)
        gate.clear()
        waiting = d.generate(request(max_tokens=3))
        assert isinstance(await waiting.__anext__(), Started)  # before the queue
        rest: list[Any] = []

        async def pull() -> None:
            rest.extend(await collect(waiting))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pull)
            await anyio.sleep(0.2)
            assert rest == [] and d._scheduler.available == 0
            gate.set()
            await running.aclose()
        finished = rest[-1]
        assert finished.stop_reason == "max_tokens" and finished.output_tokens == 3
        # The first answer went into the cache while this one waited: Started
        # announced less than it read, the exact split comes at the end.
        total = await d.count_tokens(request(max_tokens=3))
        assert finished.cache_read_input_tokens == total - 1 and finished.input_tokens == 1
        assert d._scheduler.available == 1 and d.runner.ended == [True, True]
    finally:
        gate.set()
        await d.aclose()


@pytest.mark.anyio
async def test_the_thinking_budget_closes_the_reasoning() -> None:
    script = "I think and think and think. Answer."
    d = await make(script, template=THINKING_CHATML)
    try:
        assert d.capabilities.thinking
        req = dataclasses.replace(
            request(max_tokens=40, thinking={"type": "adaptive"}),
            thinking=ThinkingPlan(requested=True, budget_tokens=5),
        )
        events = await collect(d.generate(req))
        check_order(events)
        assert events[1] == TextDelta("<think>", tokens=0)
        close = "\n</think>\n\n"
        assert d.runner.appended == [[ord(c) for c in close]]
        # five reasoning tokens, the close, then the model goes on after it
        assert text_of(events) == "<think>" + script[:5] + close + script[5 : 5 + 40 - 5 - len(close)]
        assert events[-1] == Finished("max_tokens", output_tokens=40)
        assert sum(e.tokens for e in events if isinstance(e, TextDelta)) == 40
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_scheduler_permits_and_drain() -> None:
    s = Scheduler(2)
    async with s.permit():
        assert s.available == 1
        assert await s.drain(0.05) is False  # one is held: nothing taken
        assert s.available == 1
    assert await s.drain(1) is True and s.available == 0
    s.release_all()
    assert s.available == 2 and Scheduler(None).permits == 1


class BatchedRunner(ScriptedRunner):
    """Two slots, stepped together: each sequence reads its prompt in chunks
    of ``chunk`` tokens, then plays the script; every ``step_many`` call is
    recorded as the list of (slot, output length) it served."""

    def __init__(self, script: str, slots: int = 2, chunk: int = 8, **kw: Any) -> None:
        super().__init__(script, **kw)
        self.slots = [[] for _ in range(slots)]
        self.chunk = chunk
        self.calls: list[list[int]] = []
        self.fail_step = False

    def load(self) -> ModelInfo:
        return dataclasses.replace(super().load(), slots=len(self.slots))

    def reusable_in(self, prompt: Prompt, slot: int) -> int:
        cached = self.slots[slot]
        n = 0
        for a, b in zip(cached, prompt.tokens, strict=False):
            if a != b:
                break
            n += 1
        return min(n, len(prompt.tokens) - 1)

    def reusable(self, prompt: Prompt) -> int:
        return max(self.reusable_in(prompt, s) for s in range(len(self.slots)))

    def begin(self, seq: Sequence) -> None:
        seq.reused = self.reusable_in(seq.prompt, seq.slot)
        del self.slots[seq.slot][seq.reused :]
        seq.state = {"pending": seq.prompt.tokens[seq.reused :], "script": iter(self.script)}

    def step_many(self, seqs: list[Sequence]) -> list[Any]:
        self.calls.append([s.slot for s in seqs])
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_step:
            raise RuntimeError("decode failed")
        out: list[Any] = []
        for seq in seqs:
            state = seq.state
            take = state["pending"][: self.chunk]
            self.slots[seq.slot] += take
            del state["pending"][: self.chunk]
            if state["pending"]:
                out.append(PENDING)
            elif seq.max_new == 0:
                out.append(None)
            else:
                token = next(state["script"], EOG)
                out.append(None if token == EOG else token)
                if token != EOG:
                    state["pending"].append(token)
        return out

    def end(self, seq: Sequence, ok: bool) -> None:
        self.ended.append(ok)


async def make_batched(script: str, **kw: Any) -> ScriptedDriver:
    runner = BatchedRunner(script, **kw)
    assert isinstance(runner, Batched)
    driver = ScriptedDriver("m", ModelEntry(driver="scripted"), Capabilities(max_concurrency=1), runner)
    await driver.start()
    return driver


@pytest.mark.anyio
async def test_slots_run_sequences_together_and_exact() -> None:
    """With two slots, two requests are stepped in the same calls (continuous
    batching), each gets its whole text and exact usage, and max_concurrency
    follows the slots."""
    d = await make_batched("0123456789" * 3)
    try:
        assert d.capabilities.max_concurrency == 2 and d._scheduler.permits == 2
        a, b = request("first question " * 3, max_tokens=20), request("second one " * 3, max_tokens=25)
        results: dict[str, list[Any]] = {}

        async def run(name: str, req: Any) -> None:
            results[name] = await collect(d.generate(req))

        # The first step waits until both requests are in, so that they are
        # stepped together however fast or slow this machine is.
        gate = d.runner.gate = threading.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", a)
            with anyio.fail_after(10):
                while not d.runner.calls:
                    await anyio.sleep(0.005)
            tg.start_soon(run, "b", b)
            with anyio.fail_after(10):  # b reaches the batcher's queue while a's first step waits
                while not d._batcher._incoming:
                    await anyio.sleep(0.005)
            gate.set()
        for name, req, n in (("a", a, 20), ("b", b, 25)):
            started, finished = check_order(results[name])
            assert text_of(results[name]) == ("0123456789" * 3)[:n]
            assert finished.output_tokens == n and finished.stop_reason == "max_tokens"
            assert started.input_tokens + started.cache_read_input_tokens == await d.count_tokens(req)
        assert any(len(call) == 2 for call in d.runner.calls)  # decoded together
        assert sorted(d.runner.calls[-1]) in ([0], [1])  # the longer one ended alone
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_a_conversation_goes_back_to_its_slot() -> None:
    """The next turn of a conversation takes the slot holding its prefix; a
    new prompt takes the least recently used slot and leaves it alone."""
    d = await make_batched("ok")
    try:
        first = request("a long conversation about gardens", max_tokens=2)
        await collect(d.generate(first))
        slot_a = next(s for s, tokens in enumerate(d.runner.slots) if tokens)
        await collect(d.generate(request("something else entirely", max_tokens=2)))
        assert d.runner.slots[1 - slot_a]  # the other slot took it
        turn = generation_request(
            [
                {"role": "user", "content": "a long conversation about gardens"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "more"},
            ],
            model="m",
            max_tokens=2,
        )
        events = await collect(d.generate(turn))
        started, finished = check_order(events)
        assert started.cache_read_input_tokens > 30 and finished.input_tokens is None  # announced = obtained
        assert d.runner.calls[-1] == [slot_a]
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_cancelling_one_sequence_leaves_the_other_running() -> None:
    d = await make_batched("x" * 500)
    try:
        a = d.generate(request("one", max_tokens=400))
        assert isinstance(await a.__anext__(), Started)
        assert isinstance(await a.__anext__(), TextDelta)
        b_events: list[Any] = []

        async def run_b() -> None:
            b_events.extend(await collect(d.generate(request("two", max_tokens=300))))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_b)
            await anyio.sleep(0.05)
            await a.aclose()  # the client of the first one goes away
        started, finished = check_order(b_events)
        assert text_of(b_events) == "x" * 300 and finished.output_tokens == 300
        assert d._scheduler.available == 2 and d.runner.ended.count(True) == 2
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_a_failed_step_fails_every_sequence_in_it_and_frees_the_slots() -> None:
    d = await make_batched("y" * 100)
    gate = d.runner.gate = threading.Event()
    try:
        errors: list[str] = []

        async def run(text: str) -> None:
            try:
                await collect(d.generate(request(text, max_tokens=50)))
            except ApiError as exc:
                errors.append(str(exc))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "one")
            tg.start_soon(run, "two")
            await anyio.sleep(0.1)
            d.runner.fail_step = True
            gate.set()
        assert errors == ["scripted failed while generating: decode failed"] * 2
        assert d._scheduler.available == 2 and d.runner.ended == [False, False]
        d.runner.fail_step = False
        check_order(await collect(d.generate(request("three", max_tokens=5))))
    finally:
        gate.set()
        await d.aclose()


class DraftingRunner(BatchedRunner):
    """Hands the whole script over in the first generating step, as one
    list (what a verified speculative draft gives the engine)."""

    def step_many(self, seqs: list[Sequence]) -> list[Any]:
        out = super().step_many(seqs)
        for i, seq in enumerate(seqs):
            if isinstance(out[i], int):
                out[i] = [out[i], *seq.state["script"]]  # the rest of the script; EOG next step
        return out


@pytest.mark.anyio
async def test_with_stop_sequences_each_token_is_a_delta_of_its_own() -> None:
    """Tokens handed over together (a verified draft, or a busy event loop)
    still reach the core one delta each when the request has stop sequences,
    so ``output_tokens`` stops at the token that completes a match, as it does
    when tokens come one a step (seen live: 32 output tokens with drafting
    against 31 without, same text, test_llamacpp_speculative.py)."""
    runner = DraftingRunner("Hello!")
    driver = ScriptedDriver("m", ModelEntry(driver="scripted"), Capabilities(max_concurrency=1), runner)
    await driver.start()
    try:
        events = await collect(driver.generate(request(stop_sequences=["lo"])))
        deltas = [(e.text, e.tokens) for e in events if isinstance(e, TextDelta)]
        assert deltas == [(c, 1) for c in "Hello!"], deltas
        plain = await collect(driver.generate(request()))
        assert text_of(plain) == "Hello!"
        assert sum(e.tokens for e in plain if isinstance(e, TextDelta)) == 6
    finally:
        await driver.aclose()
