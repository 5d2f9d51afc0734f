"""The prompt cache's disk tier on a scripted runner (no model): files found
again by a new instance (a restart), refused when corrupt, truncated or of
another key, LRU by bytes, a writer that never blocks the caller, concurrent
puts and lookups, one server per folder."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from test_host_cache import Runner

from missive.engine.disk_cache import SUFFIX, DiskPromptCache, OnDisk
from missive.engine.host_cache import MIN_SAVED_TOKENS, HostPromptCache, reusable, swap_in
from missive.engine.runner import PortableStates, Prompt, SavedContext


class Portable(Runner):
    """The scripted runner of test_host_cache whose states are bytes (the
    tokens, repeated ``scale`` times: a restored state is checked whole)."""

    def __init__(self, tokens: list[int], key: str = "k1", scale: int = 1) -> None:
        super().__init__(tokens)
        self.key, self.scale = key, scale
        self.gate: threading.Event | None = None  # set: state_bytes waits for it

    def save_context(self, slot: int) -> SavedContext | None:
        data = bytes(t % 256 for t in self.tokens) * self.scale
        return SavedContext(list(self.tokens), data, len(data)) if self.tokens else None

    def restore_context(self, state: SavedContext, slot: int) -> None:
        assert state.state == bytes(t % 256 for t in state.tokens) * self.scale, "a wrong state was restored"
        super().restore_context(state, slot)

    def state_key(self) -> str:
        return self.key

    def state_bytes(self, saved: SavedContext) -> tuple[bytes, list[object]]:
        if self.gate is not None:
            self.gate.wait(30)
        return b"{}", [saved.state]

    def state_from_bytes(self, tokens: list[int], info: bytes, payload: memoryview | None) -> SavedContext:
        if info != b"{}":
            raise ValueError("bad info")
        data = bytes(payload) if payload is not None else None
        return SavedContext(tokens, data, len(data) if data is not None else 0)


def tier(folder: Path, runner: Portable, max_bytes: int = 10**6, max_entries: int = 64) -> DiskPromptCache:
    return DiskPromptCache(folder / runner.key, runner.key, runner, max_bytes, max_entries)


def files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(f"*{SUFFIX}"))


def written(folder: Path, runner: Portable) -> Path:
    """The file of the runner's slot, written by a tier that then closed."""
    disk = tier(folder, runner)
    state = runner.save_context(0)
    assert state is not None
    disk.put(state)
    disk.close()
    (path,) = files(folder)
    return path


MAIN = list(range(100, 100 + 2 * MIN_SAVED_TOKENS))


def test_a_state_is_found_again_by_a_new_instance_and_restored(tmp_path: Path) -> None:
    assert isinstance(Portable([]), PortableStates)
    written(tmp_path, Portable(list(MAIN)))
    # A restart: a new process, an empty RAM tier, an empty slot.
    runner = Portable([])
    cache = HostPromptCache(max_bytes=10**6)
    cache.disk = disk = tier(tmp_path, runner)
    assert len(disk) == 1 and disk.nbytes == files(tmp_path)[0].stat().st_size
    turn = Prompt([*MAIN, 5, 6])
    assert reusable(runner, cache, turn) == len(MAIN)  # what Started reports
    assert swap_in(runner, cache, turn) == len(MAIN) and runner.restored == [MAIN]
    assert disk.counters["hits"] == 1 and len(cache) == 1  # now in RAM too
    disk.close()
    assert len(files(tmp_path)) == 1  # the RAM copy was not written twice


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_a_damaged_file_is_refused_and_deleted(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = written(tmp_path, Portable(list(MAIN), scale=50))
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF
    elif damage == "truncate":
        data = data[:-100]
    else:
        data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    runner = Portable([], scale=50)
    cache = HostPromptCache(max_bytes=10**6)
    cache.disk = disk = tier(tmp_path, runner)
    turn = Prompt([*MAIN, 5, 6])
    # A bad header or size is refused when the index is read; a flipped
    # state byte only when the file is read back to be restored.
    assert swap_in(runner, cache, turn) == 0 and runner.restored == []
    assert not path.exists() and disk.counters["corrupt"] == 1
    assert reusable(runner, cache, turn) == 0
    assert any("dropped" in r.getMessage() for r in caplog.records)
    disk.close()


def test_a_file_of_another_key_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path, Portable(list(MAIN), key="build-a"))
    other = tmp_path / "build-b"
    other.mkdir()
    os.replace(path, other / path.name)  # a misplaced file
    disk = tier(tmp_path, Portable([], key="build-b"))
    assert len(disk) == 0 and not (other / path.name).exists() and disk.counters["corrupt"] == 1
    disk.close()


def test_least_recently_used_files_go_first_within_the_bytes(tmp_path: Path) -> None:
    runner = Portable([], scale=100)
    probe = tier(tmp_path, runner)
    states = []
    for first in (1, 2, 3):
        runner.tokens = [first] * MIN_SAVED_TOKENS
        state = runner.save_context(0)
        assert state is not None
        states.append(state)
    probe.put(states[0])
    probe.close()
    size = files(tmp_path)[0].stat().st_size
    disk = tier(tmp_path, runner, max_bytes=int(2.5 * size))
    disk.put(states[1])
    disk.flush()
    found, _ = disk.best(states[0].tokens)
    assert found is not None
    disk.touch(found)  # the first one is now the most recently used
    disk.put(states[2])
    disk.flush()
    assert disk.best(states[1].tokens) == (None, 0) and disk.counters["evictions"] == 1
    assert disk.best(states[0].tokens)[1] == MIN_SAVED_TOKENS and len(files(tmp_path)) == 2
    disk.close()
    # The order survives a restart (the files' mtimes).
    disk = tier(tmp_path, runner, max_bytes=int(1.5 * size))
    assert len(disk) == 1 and disk.best(states[2].tokens)[1] == MIN_SAVED_TOKENS
    disk.close()


def test_a_newer_state_replaces_the_files_it_extends(tmp_path: Path) -> None:
    runner = Portable(list(MAIN))
    disk = tier(tmp_path, runner)
    for tokens in (MAIN[:80], MAIN, MAIN):
        disk.put(SavedContext(list(tokens), b"x" * len(tokens), len(tokens)))
        disk.flush()
    assert len(disk) == 1 and len(files(tmp_path)) == 1 and disk.counters["writes"] == 2
    disk.close()


def test_the_writer_never_blocks_the_caller(tmp_path: Path) -> None:
    runner = Portable(list(MAIN))
    disk = tier(tmp_path, runner)
    runner.gate = threading.Event()  # the writer thread is stuck serializing
    for first in range(10):
        disk.put(SavedContext([first] * 70, b"y" * 70, 70))  # returns at once, whatever the queue
    assert not disk.flush(timeout=0.05)
    runner.gate.set()
    assert disk.flush(timeout=30)
    # The oldest waiting writes were dropped (bounded memory), the newest written.
    assert 1 <= len(disk) < 10 and disk.best([9] * 70)[1] == 70
    disk.close()


def test_concurrent_puts_and_lookups(tmp_path: Path) -> None:
    runner = Portable([])
    disk = tier(tmp_path, runner, max_entries=8)
    errors: list[BaseException] = []

    def writer(base: int) -> None:
        try:
            for i in range(20):
                disk.put(SavedContext([base, i] * 40, b"z" * 80, 80))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(200):
                found, n = disk.best([1, 3] * 40)
                if found is not None:
                    assert isinstance(found, OnDisk) and n > 0
                    disk.load(found)  # may race an eviction: None then, never an error
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in (1, 2)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert disk.flush(timeout=30) and not errors
    assert len(disk) <= 8 and len(files(tmp_path)) == len(disk)
    assert disk.counters["corrupt"] == 0
    disk.close()


def test_one_server_per_folder(tmp_path: Path) -> None:
    runner = Portable([])
    disk = tier(tmp_path, runner)
    with pytest.raises(OSError, match="another server"):
        tier(tmp_path, runner)
    disk.close()
    tier(tmp_path, runner).close()  # free again


def test_the_slots_get_the_latest_states_back_at_load(tmp_path: Path) -> None:
    """restore_slots: the most recently used file goes into the slot (not
    counted as a request's hit); one longer than the window stays on disk;
    a damaged one is deleted and skipped."""
    from missive.engine.disk_tier import restore_slots
    from missive.engine.runner import ModelInfo

    older, latest = list(MAIN), [7, *MAIN[1:]]
    disk = tier(tmp_path, Portable([]))
    for tokens in (older, latest):
        before = set(files(tmp_path))
        state = Portable(tokens).save_context(0)
        assert state is not None
        disk.put(state)
        disk.flush()
        (new,) = set(files(tmp_path)) - before
        if tokens is older:
            os.utime(new, (1, 1))  # used long ago, on any clock
    disk.close()

    def load(window: int) -> tuple[Portable, DiskPromptCache, tuple[int, int]]:
        runner = Portable([])
        disk = tier(tmp_path, runner)
        return (
            runner,
            disk,
            restore_slots(runner, disk, ModelInfo(context_window=window, chat_template=""), "m"),
        )

    runner, disk, got = load(window=4096)
    assert got == (1, len(latest)) and runner.restored == [latest]
    assert disk.counters["hits"] == 0
    disk.close()
    runner, disk, got = load(window=len(MAIN) - 1)
    assert got == (0, 0) and runner.restored == [] and len(disk) == 2
    disk.close()
    newest = max(files(tmp_path), key=lambda p: p.stat().st_mtime)
    data = bytearray(newest.read_bytes())
    data[-3] ^= 0x5A
    newest.write_bytes(bytes(data))
    os.utime(newest, None)
    runner, disk, got = load(window=4096)
    assert got == (0, 0) and runner.restored == [] and not newest.exists()
    assert disk.counters["corrupt"] == 1
    disk.close()


class Variants(Portable):
    """A :class:`Portable` whose states remember their ``variant`` (another
    model entry's LoRA adapters on the same load) in their description."""

    variant: str | None = None

    def save_context(self, slot: int) -> SavedContext | None:
        saved = super().save_context(slot)
        return None if saved is None else SavedContext(saved.tokens, saved.state, saved.nbytes, self.variant)

    def state_bytes(self, saved: SavedContext) -> tuple[bytes, list[object]]:
        return json.dumps({"variant": saved.variant}).encode(), [saved.state]

    def state_from_bytes(self, tokens: list[int], info: bytes, payload: memoryview | None) -> SavedContext:
        data = bytes(payload) if payload is not None else None
        variant = json.loads(info)["variant"]
        return SavedContext(tokens, data, len(data) if data is not None else 0, variant)


def test_a_file_of_another_variant_is_neither_offered_nor_replaced(tmp_path: Path) -> None:
    runner = Variants(list(MAIN[:80]))
    disk = tier(tmp_path, runner)
    disk.put(runner.save_context(0))  # type: ignore[arg-type]
    runner.tokens, runner.variant = list(MAIN), "style"
    disk.put(runner.save_context(0))  # type: ignore[arg-type]
    disk.flush()
    for tier_now in (disk, None):
        if tier_now is None:  # a new instance reads the files' descriptions back
            disk.close()
            tier_now = tier(tmp_path, runner)
        assert len(tier_now) == 2  # the longer file of "style" did not replace the other
        found, n = tier_now.best(MAIN)
        assert found is not None and found.variant is None and n == 80
        found, n = tier_now.best(MAIN, variant="style")
        assert found is not None and found.variant == "style" and n == len(MAIN)
        assert tier_now.best(MAIN, variant="tone") == (None, 0)
    tier_now.close()


class Scoped(Portable):
    """A :class:`Portable` whose saved states carry a cache scope (the
    request's key), as the llama.cpp runner's slots record it."""

    scope: str | None = None

    def save_context(self, slot: int) -> SavedContext | None:
        saved = super().save_context(slot)
        if saved is not None:
            saved.cache_scope = self.scope
        return saved


def test_a_file_of_another_cache_scope_is_neither_offered_nor_replaced(tmp_path: Path) -> None:
    """The engine writes the state's scope in the file's header: another
    key's prompt is never offered it, before or after a restart, nor does
    its own state of the same tokens replace it."""
    runner = Scoped(list(MAIN))
    runner.scope = "key:alice"
    disk = tier(tmp_path, runner)
    disk.put(runner.save_context(0))  # type: ignore[arg-type]
    disk.flush()
    runner.scope = "key:bob"
    disk.put(runner.save_context(0))  # type: ignore[arg-type]: the same tokens, another key
    disk.flush()
    for tier_now in (disk, None):
        if tier_now is None:  # a new instance reads the scopes back from the headers
            disk.close()
            tier_now = tier(tmp_path, runner)
        assert len(tier_now) == 2
        found, n = tier_now.best(MAIN, cache_scope="key:alice")
        assert found is not None and found.cache_scope == "key:alice" and n == len(MAIN)
        assert tier_now.best(MAIN, cache_scope="key:carol") == (None, 0)
        assert tier_now.best(MAIN) == (None, 0)  # nor the open server's scope
        loaded = tier_now.load(found)
        assert loaded is not None and loaded.cache_scope == "key:alice"
    tier_now.close()


def test_a_restart_restores_a_scoped_file_only_for_its_scope(tmp_path: Path) -> None:
    """Through the host cache's lookup after a restart (:func:`swap_in`):
    bob's prompt restores nothing of alice's file; alice's restores it."""
    alice = Scoped(list(MAIN))
    alice.scope = "key:alice"
    written(tmp_path, alice)
    runner = Scoped([])
    cache = HostPromptCache(max_bytes=10**6)
    cache.disk = tier(tmp_path, runner)
    prompt = MAIN + [1]
    assert swap_in(runner, cache, Prompt(prompt).with_scope("key:bob")) == 0 and runner.restored == []
    assert swap_in(runner, cache, Prompt(prompt).with_scope("key:alice")) == len(MAIN)
    assert runner.restored == [MAIN]
    cache.disk.close()
