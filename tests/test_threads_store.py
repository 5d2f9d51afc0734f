"""Units of the kept-responses store (core/missive/threads/store.py): its
bounds in count and bytes, expiry on a clock the test moves, and that an
entry is seen only by the key that made it. The behaviour through the SDK is
in test_threads.py and test_cache_diagnostics.py."""

from __future__ import annotations

from missive.threads.fingerprint import Fingerprint
from missive.threads.store import ResponseStore, ThreadState


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def thread(text: str) -> ThreadState:
    return ThreadState(
        fixed={"model": "m"}, system=None, tools=None, messages=[{"role": "user", "content": text}]
    )


FINGERPRINT = Fingerprint(model="m", tools="t", system="s", messages=("a",), params="p", prompt_tokens=3)


def test_the_oldest_go_first_beyond_the_count() -> None:
    store = ResponseStore(max_count=2, max_bytes=10_000, clock=Clock())
    for i in range(3):
        store.keep_thread(store.entry("k", f"msg_{i}"), thread(f"turn {i}"), ttl=60)
    assert store.get("k", "msg_0") is None
    assert [store.get("k", f"msg_{i}").thread.messages[0]["content"] for i in (1, 2)] == ["turn 1", "turn 2"]
    assert len(store) == 2


def test_the_oldest_go_first_beyond_the_bytes_and_a_thread_too_big_is_not_kept() -> None:
    size = thread("x" * 100).size()
    store = ResponseStore(max_count=100, max_bytes=2 * size + 10, clock=Clock())
    for i in range(3):
        store.keep_thread(store.entry("k", f"msg_{i}"), thread(f"{i}" * 100), ttl=60)
    assert store.get("k", "msg_0") is None and store.get("k", "msg_2") is not None
    assert store.bytes == 2 * size
    store.keep_thread(store.entry("k", "msg_big"), thread("y" * 10 * size), ttl=60)
    assert store.get("k", "msg_big") is None and store.bytes == 2 * size
    assert store.get("k", "msg_2") is not None, "a thread too big to keep evicts nothing"


def test_a_thread_expires_after_its_ttl_and_a_fingerprint_after_its_own() -> None:
    clock = Clock()
    store = ResponseStore(max_count=10, max_bytes=10_000, clock=clock)
    kept = store.entry("k", "msg_1")
    store.keep_thread(kept, thread("hello"), ttl=300)
    store.keep_fingerprint(kept, FINGERPRINT, ttl=3600)
    clock.now += 299
    assert store.get("k", "msg_1").thread is not None
    clock.now += 2
    kept = store.get("k", "msg_1")
    assert kept.thread is None and kept.fingerprint == FINGERPRINT and store.bytes == 0
    clock.now += 3600
    assert store.get("k", "msg_1") is None and len(store) == 0


def test_a_continue_in_flight_keeps_its_thread_past_the_ttl() -> None:
    clock = Clock()
    store = ResponseStore(max_count=10, max_bytes=10_000, clock=clock)
    kept = store.entry("k", "msg_1")
    store.keep_thread(kept, thread("hello"), ttl=1)
    kept.in_flight = True
    clock.now += 10
    assert store.get("k", "msg_1") is kept and kept.thread is not None
    kept.in_flight = False
    assert store.get("k", "msg_1") is None


def test_another_key_sees_nothing() -> None:
    store = ResponseStore(max_count=10, max_bytes=10_000, clock=Clock())
    store.keep_thread(store.entry("key-a", "msg_1"), thread("secret"), ttl=60)
    assert store.get("key-b", "msg_1") is None
    assert store.get("key-a", "msg_1").thread.messages[0]["content"] == "secret"


def test_expired_entries_are_swept_when_others_are_kept() -> None:
    clock = Clock()
    store = ResponseStore(max_count=10, max_bytes=10_000, clock=clock)
    store.keep_thread(store.entry("k", "msg_old"), thread("old"), ttl=1)
    clock.now += 5
    store.keep_thread(store.entry("k", "msg_new"), thread("new"), ttl=60)
    assert len(store) == 1 and store.bytes == thread("new").size()
