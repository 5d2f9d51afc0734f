"""The disk tier of the prompt cache: saved KV states kept as files in the state directory.

The host-memory cache (:mod:`missive.engine.host_cache`) loses everything
when the server stops or the model is unloaded, and Claude Code's first
request after a restart reads its whole system prompt again (12,500 tokens:
four minutes for SmolLM2 on 2 cores). This tier keeps the same states on
disk, as llama-server's ``--slot-save-path`` files do (a sequence's
``llama_state_seq_get_data`` bytes), but by itself:

* **write-through**: a state put into the RAM tier, and each slot's state
  when the model closes (a stop, an idle unload), is written by a background
  thread (:class:`DiskPromptCache`, never the model's thread): a temporary
  file, then ``os.replace``, so a file is whole or absent;
* **keyed**: the folder is ``<root>/<key>/``, the key a digest the runner
  gives (:meth:`~missive.engine.runner.PortableStates.state_key`: the model
  file, the llama.cpp build, the settings that change the KV layout); each
  file's header repeats the key and :data:`FORMAT`, so a file of another
  build, model or layout is never restored; it also names the state's
  cache scope (``Prompt.cache_scope``, the request's key), so a file is
  offered to prompts of that scope only, after a restart too;
* **checksummed**: an XXH3-64 digest of the tokens and state (xxhash: about
  3 GB/s, 5 to 8 times zlib's CRC-32 measured here on a 300 MB state);
  a file whose header, size or digest is wrong is deleted with a warning and
  the prompt is read as if there were no entry;
* **bounded**: at most ``max_bytes`` and ``max_entries``, least recently
  used first out (a hit touches the file's mtime, which orders the index
  again after a restart); a state whose tokens are a prefix of a newer one's
  is dropped, as in RAM;
* the **index** (each file's tokens and the runner's small description of
  the state) is read once when the tier opens, from the files' headers
  only; the state itself is read when it is restored.

One server per folder: a lock file (``flock``) keeps a second server on the
same state directory off the tier (it logs a warning and runs without it).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import struct
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from ..config.state_dir import lock_exclusive
from .runner import PortableStates, SavedContext, common_prefix

__all__ = ["FORMAT", "MAX_ENTRIES", "DiskPromptCache", "OnDisk", "default_disk_bytes"]

log = logging.getLogger("missive.engine")

#: The file format's version, in every header: a file of another version is refused.
FORMAT = 1
MAGIC = b"MSVKV\x00\x00\x01"
_PREFIX = struct.Struct("<8sI")  # magic, header length
SUFFIX = ".kv"
#: Most files kept (the index is compared with every prompt, in Python).
MAX_ENTRIES = 64
#: Writes waiting for the writer thread at most; beyond, the oldest waiting
#: one is dropped (each holds a state in RAM until written).
MAX_PENDING = 4
_CHUNK = 64 * 2**20


def default_disk_bytes(root: Path) -> int:
    """A quarter of the free space where the cache lives, at most 8 GiB
    (the RAM tier's ceiling, llama-server's ``--cache-ram`` default)."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stat = os.statvfs(probe)
    except OSError:
        return 0
    return int(min(8 * 1024**3, stat.f_bavail * stat.f_frsize // 4))


@dataclass(eq=False)
class OnDisk(SavedContext):
    """A state in the disk tier, as the host cache's lookup sees it: its
    tokens and the runner's description (``state`` plans reuse, it cannot be
    restored: :meth:`DiskPromptCache.load` reads the real one)."""

    path: Path = field(default=Path())
    info: bytes = b""
    used: float = 0.0


class DiskPromptCache:
    """The files of one model's saved states (module documentation).

    Args:
        folder: this model's folder (``<root>/<key>``), made if missing.
        key: the runner's :meth:`~missive.engine.runner.PortableStates.state_key`.
        states: the runner (serializes and describes states).
        max_bytes: the files' total size at most.
        max_entries: files at most.
    """

    def __init__(
        self, folder: Path, key: str, states: PortableStates, max_bytes: int, max_entries: int = MAX_ENTRIES
    ) -> None:
        self.folder = folder
        self.key = key
        self.states = states
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.counters = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0, "evictions": 0}
        self._entries: list[OnDisk] = []  # least recently used first
        self._lock = threading.Lock()
        # (tokens, cache scope, serializer) of each state waiting to be written
        self._pending: deque[tuple[list[int], Any, Callable[[], tuple[bytes, list[Any]]]]] = deque()
        self._wake = threading.Condition(self._lock)
        self._busy = False
        self._closed = False
        folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        if not lock_exclusive(self._lock_fd):
            os.close(self._lock_fd)
            raise OSError(f"{folder} is in use by another server (its lock file is held)")
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer", daemon=True)
        self._writer.start()

    # -- the index ---------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of the files now."""
        with self._lock:
            return sum(e.nbytes for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def _scan(self) -> None:
        """Read every file's header (not its state); refuse and delete the bad ones."""
        for leftover in self.folder.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)  # a write cut short by a crash
        found = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                found.append(self._read_header(path))
            except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
                self._refuse(path, str(exc))
        found.sort(key=lambda e: e.used)
        self._entries = found
        self._trim()

    def _read_header(self, path: Path) -> OnDisk:
        """A file's index entry, from its header and tokens.

        Raises:
            ValueError: (or OSError, KeyError...) the file cannot be used (the message says why).
        """
        with open(path, "rb") as f:
            magic, length = _PREFIX.unpack(f.read(_PREFIX.size))
            if magic != MAGIC:
                raise ValueError("not a prompt-cache file of this format")
            header = json.loads(f.read(length))
            if header.get("format") != FORMAT or header.get("key") != self.key:
                raise ValueError("written by another build, model or KV layout")
            n_tokens, info_len, payload = int(header["tokens"]), int(header["info"]), int(header["payload"])
            tokens = array("i")
            tokens.frombytes(f.read(4 * n_tokens))
            info = f.read(info_len)
            size = os.fstat(f.fileno()).st_size
        if (
            len(tokens) != n_tokens
            or len(info) != info_len
            or size != f_end(length, n_tokens, info_len, payload)
        ):
            raise ValueError("truncated")
        stub = self.states.state_from_bytes(tokens.tolist(), info, None)
        return OnDisk(
            stub.tokens,
            stub.state,
            size,
            stub.variant,
            header.get("scope"),
            path=path,
            info=info,
            used=path.stat().st_mtime,
        )

    def _refuse(self, path: Path, why: str) -> None:
        """Delete a file that cannot be used, with a warning."""
        log.warning("prompt cache: dropped %s: %s", path, why)
        self.counters["corrupt"] += 1
        path.unlink(missing_ok=True)
        return None

    def best(
        self,
        tokens: Sequence[int],
        better_than: int = 0,
        variant: Hashable | None = None,
        cache_scope: Hashable | None = None,
    ) -> tuple[OnDisk | None, int]:
        """The file of ``variant`` and ``cache_scope`` (its header's
        ``scope``: another key's state is never offered) sharing the longest
        prefix with ``tokens``, if longer than ``better_than``, and that
        prefix's length."""
        with self._lock:
            entries = list(self._entries)
        found: OnDisk | None = None
        longest = better_than
        for entry in entries:
            common = common_prefix(entry.tokens, tokens) if entry.serves(variant, cache_scope) else 0
            if common > longest:
                found, longest = entry, common
        return found, (longest if found is not None else 0)

    def count_lookup(self, chosen: SavedContext | None) -> None:
        """Count a sequence's lookup: a miss unless ``chosen`` is a file here
        (its hit is counted when it is read back)."""
        if not isinstance(chosen, OnDisk):
            self.counters["misses"] += 1

    def recent(self, n: int) -> list[OnDisk]:
        """The ``n`` most recently used files, the latest first."""
        with self._lock:
            return self._entries[::-1][:n]

    def load(self, entry: OnDisk, count: bool = True) -> SavedContext | None:
        """``entry``'s state read back and checked, ready to restore; None
        (the file deleted, a warning logged) when it is gone, truncated or
        its digest is wrong; ``count`` False: not a request's hit (the
        slots filled at load). Model thread."""
        started = time.perf_counter()
        try:
            with open(entry.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = bytearray(size)
                view = memoryview(data)
                got = 0
                while got < size:
                    n = f.readinto(view[got : got + _CHUNK])
                    if not n:
                        break
                    got += n
            magic, length = _PREFIX.unpack_from(data)
            header = json.loads(bytes(view[_PREFIX.size : _PREFIX.size + length]))
            start = _PREFIX.size + length
            n_tokens, info_len, payload = int(header["tokens"]), int(header["info"]), int(header["payload"])
            if (
                magic != MAGIC
                or header.get("key") != self.key
                or size != f_end(length, n_tokens, info_len, payload)
            ):
                raise ValueError("bad header or size")
            if xxhash.xxh3_64_hexdigest(view[start:]) != header["digest"]:
                raise ValueError("checksum mismatch")
            tokens = array("i")
            tokens.frombytes(view[start : start + 4 * n_tokens])
            at = start + 4 * n_tokens
            info = bytes(view[at : at + info_len])
            saved = self.states.state_from_bytes(tokens.tolist(), info, view[at + info_len :])
            saved.cache_scope = header.get("scope")
        except FileNotFoundError:
            self._forget(entry)
            return None
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            self._forget(entry)
            self._refuse(entry.path, str(exc))
            return None
        self.touch(entry)
        self.counters["hits"] += count
        log.debug(
            "prompt cache: read back %d tokens (%d bytes) from %s in %.3f s",
            len(saved.tokens),
            size,
            entry.path,
            time.perf_counter() - started,
        )
        return saved

    def touch(self, entry: OnDisk) -> None:
        """Mark ``entry`` just used (its file's mtime too, for the next start)."""
        with self._lock:
            if entry in self._entries:
                self._entries.remove(entry)
                self._entries.append(entry)
        entry.used = time.time()
        try:
            os.utime(entry.path)
        except OSError:
            pass

    def _forget(self, entry: OnDisk) -> None:
        with self._lock:
            if entry in self._entries:
                self._entries.remove(entry)

    def drop(self, entry: OnDisk, why: str) -> None:
        """Delete ``entry``'s file (llama.cpp refused its state)."""
        self._forget(entry)
        self._refuse(entry.path, why)

    # -- writing -----------------------------------------------------------

    def put(self, saved: SavedContext) -> None:
        """Queue ``saved`` to be written (returns at once; any thread). A
        state already on disk with the same tokens is not written again."""
        if saved.nbytes > self.max_bytes or not saved.tokens or isinstance(saved, OnDisk):
            return
        tokens = list(saved.tokens)
        scope = saved.cache_scope
        with self._lock:
            if self._closed or any(e.tokens == tokens and e.cache_scope == scope for e in self._entries):
                return
            if any(t == tokens and p_scope == scope for t, p_scope, _ in self._pending):
                return
            if len(self._pending) >= MAX_PENDING:
                dropped, _, _ = self._pending.popleft()
                log.debug("prompt cache: disk writes behind, skipped a state of %d tokens", len(dropped))
            self._pending.append((tokens, scope, lambda: self.states.state_bytes(saved)))
            self._wake.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued write is done; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def close(self, timeout: float | None = 60.0) -> None:
        """Write what is queued, stop the writer, release the lock."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._writer.join(timeout)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if not self._pending:
                    return
                tokens, scope, serialize = self._pending.popleft()
                self._busy = True
            try:
                self._write(tokens, scope, serialize)
            except Exception as exc:  # a full disk, a permission: the RAM tier goes on
                log.warning(
                    "prompt cache: could not write a state of %d tokens to %s: %s",
                    len(tokens),
                    self.folder,
                    exc,
                )
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()

    def _write(self, tokens: list[int], scope: Any, serialize: Callable[[], tuple[bytes, list[Any]]]) -> None:
        info, parts = serialize()
        body = [array("i", tokens).tobytes(), info, *parts]
        digest = xxhash.xxh3_64()
        for part in body:
            digest.update(part)
        payload = sum(memoryview(p).nbytes for p in parts)
        header = json.dumps(
            {
                "format": FORMAT,
                "key": self.key,
                "tokens": len(tokens),
                "info": len(info),
                "payload": payload,
                "digest": digest.hexdigest(),
                "scope": scope,
            }
        ).encode()
        name = f"{int(time.time() * 1000):x}-{secrets.token_hex(6)}"
        tmp = self.folder / f".{name}.tmp"
        path = self.folder / f"{name}{SUFFIX}"
        try:
            with open(tmp, "wb") as f:
                f.write(_PREFIX.pack(MAGIC, len(header)))
                f.write(header)
                for part in body:
                    f.write(part)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk keeps no half file
            raise
        size = path.stat().st_size
        stub = self.states.state_from_bytes(tokens, info, None)
        entry = OnDisk(tokens, stub.state, size, stub.variant, scope, path=path, info=info, used=time.time())
        with self._lock:
            # A state whose tokens begin the new one's serves nothing it would not.
            for old in [
                e
                for e in self._entries
                if len(e.tokens) <= len(tokens)
                and tokens[: len(e.tokens)] == e.tokens
                and e.serves(stub.variant, scope)
            ]:
                self._entries.remove(old)
                old.path.unlink(missing_ok=True)
            self._entries.append(entry)
            self.counters["writes"] += 1
            self._trim()
        log.debug("prompt cache: wrote %d tokens (%d bytes) to %s", len(tokens), size, path)

    def _trim(self) -> None:
        """Least recently used files out, beyond the bounds (lock held or at start)."""
        total = sum(e.nbytes for e in self._entries)
        while self._entries and (total > self.max_bytes or len(self._entries) > self.max_entries):
            old = self._entries.pop(0)
            total -= old.nbytes
            old.path.unlink(missing_ok=True)
            self.counters["evictions"] += 1


def f_end(header_len: int, n_tokens: int, info_len: int, payload: int) -> int:
    """A file's size from its header's figures."""
    return _PREFIX.size + header_len + 4 * n_tokens + info_len + payload
