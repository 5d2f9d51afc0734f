"""A KV pool shared by the slots (missive.engine.batcher), on a scripted runner.

The runner below holds one token per cell of a pool smaller than ``slots x
context`` (llama.cpp's unified KV cache) and records the most cells its
slots ever held: the engine must keep every step within the pool, whatever
the requests do, by emptying idle slots (saved to the host-memory cache)
and pausing the newest running sequences, never by failing a step. Every
answer must still be whole and its usage exact.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import anyio
import pytest
from test_engine import BatchedRunner, ScriptedDriver, request

from missive.config import ModelEntry
from missive.driver.capabilities import Capabilities
from missive.driver.events import Finished, Started
from missive.engine.host_cache import common_prefix
from missive.engine.runner import ContextStates, ModelInfo, Prompt, SavedContext, Sequence, SharedPool
from missive.testing import collect_events as collect
from missive.testing import text_of

SCRIPT = "abcdefghijklmnopqrstuvwxyz" * 2  # 52 tokens, then end of generation


class PooledRunner(BatchedRunner):
    """:class:`BatchedRunner` whose slots share ``pool`` cells, with saved states."""

    def __init__(self, script: str, pool: int, **kw: Any) -> None:
        super().__init__(script, **kw)
        self.pool = pool
        self.most = 0  # the most cells ever held after a step
        self.paused_restores = 0

    def load(self) -> ModelInfo:
        return dataclasses.replace(super().load(), pool_tokens=self.pool)

    def step_many(self, seqs: list[Sequence]) -> list[Any]:
        out = super().step_many(seqs)
        self.most = max(self.most, sum(len(s) for s in self.slots))
        return out

    # SharedPool
    def pool_free(self) -> int:
        return self.pool - sum(len(s) for s in self.slots)

    def pool_need(self, seqs: list[Sequence]) -> int:
        return sum(min(self.chunk, len(seq.state["pending"])) for seq in seqs)

    def held(self, slot: int) -> int:
        return len(self.slots[slot])

    def clear_slot(self, slot: int) -> None:
        self.slots[slot] = []

    # ContextStates
    def context_tokens(self, slot: int) -> list[int]:
        return list(self.slots[slot])

    def reusable_from(self, prompt: Prompt, saved: SavedContext) -> int:
        return min(common_prefix(saved.tokens, prompt.tokens), len(prompt.tokens) - 1)

    def save_context(self, slot: int) -> SavedContext | None:
        tokens = list(self.slots[slot])
        return SavedContext(tokens, None, len(tokens)) if tokens else None

    def restore_context(self, saved: SavedContext, slot: int) -> None:
        assert self.pool_free() + self.held(slot) >= len(saved.tokens), "restored past the pool"
        self.slots[slot] = list(saved.tokens)
        self.paused_restores += 1


async def make(pool: int, slots: int = 3, host_cache: int = 10**6) -> ScriptedDriver:
    runner = PooledRunner(SCRIPT, pool, slots=slots, context=pool)
    assert isinstance(runner, SharedPool) and isinstance(runner, ContextStates)
    driver = ScriptedDriver(
        "m",
        ModelEntry(driver="scripted"),
        Capabilities(max_concurrency=1),
        runner,
        host_cache_bytes=host_cache,
    )
    await driver.start()
    return driver


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_requests_beyond_the_pool_pause_and_resume_whole() -> None:
    """Three answers that together need twice the pool: each is whole and
    exact, and no step ever held more cells than the pool."""
    d = await make(pool=160)
    runner = d.runner
    assert isinstance(runner, PooledRunner)
    try:
        results: dict[int, list[Any]] = {}

        async def run(i: int) -> None:
            results[i] = await collect(d.generate(request(f"question number {i}", max_tokens=60)))

        # The first step waits until the other two requests are queued, so
        # that all three run together however fast or slow this machine is.
        gate = runner.gate = threading.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, 0)
            with anyio.fail_after(10):
                while not runner.calls:
                    await anyio.sleep(0.005)
            tg.start_soon(run, 1)
            tg.start_soon(run, 2)
            with anyio.fail_after(10):
                while len(d._batcher._incoming) < 2:
                    await anyio.sleep(0.005)
            gate.set()
        for i in range(3):
            events = results[i]
            assert text_of(events) == SCRIPT, i
            started = next(e for e in events if isinstance(e, Started))
            finished = next(e for e in events if isinstance(e, Finished))
            assert finished.output_tokens == len(SCRIPT) and finished.stop_reason == "end_turn"
            total = started.input_tokens + started.cache_read_input_tokens
            assert total == await d.count_tokens(request(f"question number {i}", max_tokens=60))
        assert runner.most <= runner.pool
        assert runner.paused_restores >= 1  # someone had to wait for cells mid-answer
        assert all(runner.ended)
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_an_idle_conversation_is_parked_in_host_memory_and_comes_back() -> None:
    """A new prompt that needs the cells an idle slot holds empties it (its
    state saved to the host cache first); the parked conversation's next
    turn is then restored from host memory and read from cache."""
    d = await make(pool=200, slots=2)
    runner = d.runner
    assert isinstance(runner, PooledRunner)
    try:
        first = request("tell me about the sea " * 2, max_tokens=4)
        await collect(d.generate(first))
        await collect(d.generate(request("x" * 30, max_tokens=4)))  # the second slot
        # Long enough that both idle slots cannot stay: one is parked.
        await collect(d.generate(request("y" * 60, max_tokens=4)))
        status = await d.status()
        assert status["host_cache_entries"] >= 1
        again = await collect(d.generate(first))
        started = next(e for e in again if isinstance(e, Started))
        finished = next(e for e in again if isinstance(e, Finished))
        reused = (
            finished.cache_read_input_tokens
            if finished.cache_read_input_tokens is not None
            else started.cache_read_input_tokens
        )
        assert reused > 0  # restored from host memory
        assert runner.most <= runner.pool
    finally:
        await d.aclose()
