"""missive.serving.admission.Gate on its own: FIFO hand-over, the bounds, cancellation.

The end-to-end behaviour (through a live server and the SDK) is in
tests/test_admission.py; these cover orderings a server cannot produce on demand.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from missive.protocol.errors import OverloadedError
from missive.serving.admission import DEFAULT_RETRY_AFTER, Gate

pytestmark = pytest.mark.anyio


async def _queued(gate: Gate, n: int) -> None:
    """Until ``n`` requests wait (the tasks only need the loop to run)."""
    for _ in range(1000):
        if gate.waiting == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{gate.waiting} waiting, expected {n}")


async def test_fifo_hand_over_and_no_barging() -> None:
    gate = Gate("m", limit=1, depth=5, timeout=60)
    first = await gate.admit()
    order: list[str] = []

    async def wait(name: str) -> None:
        slot = await gate.admit()
        order.append(name)
        slot.release()

    tasks = []
    for i, name in enumerate("abc"):
        tasks.append(asyncio.ensure_future(wait(name)))
        await _queued(gate, i + 1)
    first.release()
    # A newcomer arriving as the slot is handed over queues behind the others.
    late = asyncio.ensure_future(wait("late"))
    await asyncio.gather(*tasks, late)
    assert order == ["a", "b", "c", "late"]
    assert gate.running == 0 and gate.waiting == 0


async def test_full_queue_is_overloaded_with_retry_after() -> None:
    gate = Gate("m", limit=1, depth=1, timeout=60)
    slot = await gate.admit()
    waiter = asyncio.ensure_future(gate.admit())
    await _queued(gate, 1)
    with pytest.raises(OverloadedError) as caught:
        await gate.admit()
    error = caught.value
    assert error.status == 529 and error.error_type == "overloaded_error"
    assert error.retry_after == DEFAULT_RETRY_AFTER  # no generation has ended yet
    assert "models.m.queue_depth" in error.message and "queue_depth 1" in error.message
    slot.release()
    (await waiter).release()


async def test_retry_after_follows_service_times() -> None:
    gate = Gate("m", limit=2, depth=4, timeout=60)
    slots = [await gate.admit() for _ in range(2)]
    third = asyncio.ensure_future(gate.admit())
    await _queued(gate, 1)
    # no generation has ended: the default; 1 waiting + the newcomer, 2 slots
    assert gate.retry_after() == DEFAULT_RETRY_AFTER
    slots[0]._since -= 19.5  # noqa: SLF001 - as if it had generated for 19.5 s
    slots[0].release()  # handed to the third
    # 0 waiting + the newcomer, 2 slots: 19.5 * 1 / 2, rounded up
    assert gate.retry_after() == 10
    slots[1]._since -= 1000.0  # noqa: SLF001
    slots[1].release()
    assert gate.retry_after() == 60  # the SDKs honour at most 60 s
    (await third).release()
    assert gate.running == 0


async def test_queue_timeout_is_overloaded() -> None:
    gate = Gate("m", limit=1, depth=3, timeout=0.05)
    slot = await gate.admit()
    with pytest.raises(OverloadedError) as caught:
        await gate.admit()
    assert "within 0.05 s" in caught.value.message and "models.m.queue_timeout" in caught.value.message
    assert gate.waiting == 0
    slot.release()
    assert gate.running == 0


async def test_cancelled_waiter_leaves_the_queue() -> None:
    gate = Gate("m", limit=1, depth=3, timeout=60)
    slot = await gate.admit()
    gone = asyncio.ensure_future(gate.admit())
    await _queued(gate, 1)
    stays = asyncio.ensure_future(gate.admit())
    await _queued(gate, 2)
    gone.cancel()
    await _queued(gate, 1)
    slot.release()
    (await stays).release()
    assert gone.cancelled() and gate.running == 0


async def test_cancelled_just_after_the_hand_over_passes_the_slot_on() -> None:
    gate = Gate("m", limit=1, depth=3, timeout=60)
    slot = await gate.admit()
    unlucky = asyncio.ensure_future(gate.admit())
    await _queued(gate, 1)
    next_one = asyncio.ensure_future(gate.admit())
    await _queued(gate, 2)
    slot.release()  # hands the slot to ``unlucky``, whose task has not run yet
    unlucky.cancel()  # ... and is cancelled before it does
    with pytest.raises(asyncio.CancelledError):
        await unlucky
    (await asyncio.wait_for(next_one, 5)).release()
    assert gate.running == 0 and gate.waiting == 0


async def test_unbounded_gate_counts() -> None:
    gate = Gate("m", limit=None, depth=0, timeout=60)
    slots = [await gate.admit() for _ in range(50)]
    assert gate.running == 50 and gate.waiting == 0
    for s in slots:
        s.release()
        s.release()  # idempotent
    assert gate.running == 0


async def test_slot_dropped_unreleased_is_freed() -> None:
    """A response body that is never iterated drops its slot unreleased."""
    gate = Gate("m", limit=1, depth=0, timeout=60)
    slot = await gate.admit()
    del slot
    gc.collect()
    await asyncio.sleep(0)  # the release is scheduled on the loop
    assert gate.running == 0
    (await gate.admit()).release()


async def test_model_keys_override_the_server_defaults() -> None:
    from missive.config import Config, ModelEntry
    from missive.driver.capabilities import Capabilities
    from missive.serving.admission import Admission

    class Stub:
        def __init__(self, entry: ModelEntry, limit: int | None) -> None:
            self.entry, self.capabilities = entry, Capabilities(max_concurrency=limit)

    config = Config.model_validate({"server": {"queue_depth": 7, "queue_timeout": 30}})
    admission = Admission(config)
    own = admission.gate("own", Stub(ModelEntry(driver="x", queue_depth=0, queue_timeout=2.5), 2))
    default = admission.gate("default", Stub(ModelEntry(driver="x"), None))
    assert (own.limit, own.depth, own.timeout) == (2, 0, 2.5)
    assert (default.limit, default.depth, default.timeout) == (None, 7, 30)
    assert admission.gate("own", Stub(ModelEntry(driver="x"), 9)) is own  # built once


async def test_close_refuses_the_waiting_and_the_new_but_not_the_running() -> None:
    """``Admission.close`` (a shutdown) answers every waiter 529 at once,
    refuses later requests even with a slot free, leaves held slots alone,
    and applies to a gate built after it too."""
    from missive.config import Config, ModelEntry
    from missive.driver.capabilities import Capabilities
    from missive.serving.admission import Admission

    class Stub:
        def __init__(self, limit: int | None) -> None:
            self.entry, self.capabilities = ModelEntry(driver="x"), Capabilities(max_concurrency=limit)

    admission = Admission(Config())
    gate = admission.gate("m", Stub(1))
    held = await gate.admit()
    waiters = [asyncio.ensure_future(gate.admit()) for _ in range(2)]
    await _queued(gate, 2)
    assert admission.close("shutting down", 1) == 2
    for waiter in waiters:
        with pytest.raises(OverloadedError, match="^shutting down$") as caught:
            await waiter
        assert caught.value.retry_after == 1
    assert gate.closed and gate.waiting == 0 and gate.running == 1
    held.release()
    assert gate.running == 0
    with pytest.raises(OverloadedError, match="^shutting down$"):
        await gate.admit()  # a slot is free, but nothing new starts
    later = admission.gate("unbounded", Stub(None))
    with pytest.raises(OverloadedError, match="^shutting down$"):
        await later.admit()


# -- background work (message batches) -------------------------------------------


async def test_background_takes_only_free_slots_under_its_cap() -> None:
    gate = Gate("m", limit=3, depth=5, timeout=60)
    first = await gate.admit_background(2)
    second = await gate.admit_background(2)
    assert gate.background == 2 and gate.running == 2
    assert not gate.background_room(2)  # the cap, although a slot is free
    third = asyncio.ensure_future(gate.admit_background(2))
    await asyncio.sleep(0)
    assert not third.done()
    interactive = await gate.admit()  # the free slot goes to an interactive request at once
    assert gate.running == 3
    first.release()  # a background slot is free again, under the cap: the waiter takes it
    slot = await asyncio.wait_for(third, 5)
    assert slot.background and gate.background == 2 and gate.running == 3
    for held in (second, slot, interactive):
        held.release()
    assert gate.running == 0 and gate.background == 0


async def test_a_waiting_request_preempts_the_newest_background_slot() -> None:
    gate = Gate("m", limit=2, depth=5, timeout=60)
    stopped: list[str] = []
    old = await gate.admit_background(2, on_preempt=lambda: stopped.append("old"))
    new = await gate.admit_background(2, on_preempt=lambda: stopped.append("new"))
    waiter = asyncio.ensure_future(gate.admit())
    await _queued(gate, 1)
    assert stopped == ["new"] and new.preempted and not old.preempted
    # No background work starts while a request waits, whatever the cap.
    assert not gate.background_room(5)
    new.release()  # the preempted holder stops: its slot goes to the waiter
    slot = await asyncio.wait_for(waiter, 5)
    assert not slot.background and gate.background == 1 and gate.running == 2 and gate.preemptions == 1
    slot.release()
    old.release()
    assert gate.running == 0


async def test_a_full_queue_still_waits_for_a_background_slot() -> None:
    gate = Gate("m", limit=1, depth=0, timeout=60)
    held = await gate.admit_background(1, on_preempt=lambda: None)
    waiter = asyncio.ensure_future(gate.admit())  # queue_depth 0, but the slot is a batch's
    await _queued(gate, 1)
    assert held.preempted
    held.release()
    (await asyncio.wait_for(waiter, 5)).release()
    # Without background work to preempt, depth 0 refuses as before.
    busy = await gate.admit()
    with pytest.raises(OverloadedError):
        await gate.admit()
    busy.release()


async def test_closing_the_gate_ends_background_waits() -> None:
    gate = Gate("m", limit=1, depth=1, timeout=60)
    busy = await gate.admit()
    waiting = asyncio.ensure_future(gate.wait_background_room(1))
    await asyncio.sleep(0)
    gate.close("shutting down", 1)
    with pytest.raises(OverloadedError):
        await asyncio.wait_for(waiting, 5)
    busy.release()
