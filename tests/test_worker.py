"""ThreadChannel: a model thread's output reaches the loop in order, batched, with errors and cancel."""

from __future__ import annotations

import asyncio
import threading

import pytest

from missive.engine.channel import ThreadChannel
from missive.protocol.errors import ApiError


def test_items_batched_in_order_then_end() -> None:
    async def main() -> list[tuple[list[int], bool]]:
        channel: ThreadChannel[int] = ThreadChannel("boom")
        release, sent = threading.Event(), threading.Event()

        def work() -> None:
            for i in range(5):
                channel.send(i)
            sent.set()
            release.wait(5)  # the loop takes the first batch meanwhile
            channel.send(5)
            channel.close()

        thread = threading.Thread(target=work)
        thread.start()
        while not sent.is_set():  # all five sent before the first batch is taken
            await asyncio.sleep(0.005)
        batches = [await channel.next_batch()]
        release.set()
        while not batches[-1][1]:
            batches.append(await channel.next_batch())
        thread.join()
        return batches

    batches = asyncio.run(main())
    assert batches[0] == ([0, 1, 2, 3, 4], False)
    assert [i for items, _ in batches for i in items] == list(range(6)) and batches[-1][1]


def test_thread_failure_is_raised_on_the_loop() -> None:
    async def main() -> None:
        channel: ThreadChannel[int] = ThreadChannel("the model failed")

        def work() -> None:
            channel.send(1)
            channel.fail(RuntimeError("out of memory"))
            channel.close()

        threading.Thread(target=work).start()
        with pytest.raises(ApiError, match="the model failed: out of memory"):
            while True:
                await channel.next_batch()

    asyncio.run(main())


def test_cancel_reaches_the_thread() -> None:
    async def main() -> int:
        channel: ThreadChannel[int] = ThreadChannel("x")
        steps = []

        def work() -> None:
            while not channel.cancelled():
                steps.append(1)
                channel.send(1)
                threading.Event().wait(0.001)
            channel.close()

        thread = threading.Thread(target=work)
        thread.start()
        await channel.next_batch()
        channel.cancel()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 5)
        assert not thread.is_alive()
        return len(steps)

    assert asyncio.run(main()) >= 1
