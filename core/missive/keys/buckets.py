"""Token buckets in memory shared by the worker processes of one server.

The limits of a key (:mod:`.limits`) must hold for the whole server, not
per worker (``server.workers``, :mod:`missive.workers`). The app is built
once, in the first process, before the workers are forked; the table made
here is a file mapped ``MAP_SHARED`` at that time (an unlinked temporary
file), so every forked worker reads and writes the same cells. A POSIX
record lock (``fcntl.lockf``) serialises the processes (released by the
kernel when a process dies, so a crashed worker cannot leave it held), a
thread lock the threads of one process. The critical sections are a few
float operations.

Each bucket is the API's model: "your capacity is continuously replenished
up to your maximum limit, rather than being reset at fixed intervals"
(Anthropic API docs, Rate limits); a bucket of ``capacity`` refills at
``capacity / period`` per second. Its level may go below zero: tokens are
counted when an answer ends (:mod:`.limits`).

Nothing is written to disk: a restart starts every bucket full
(docs/operations.md).
"""

from __future__ import annotations

import math
import mmap
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process (workers need os.fork)
    fcntl = None  # type: ignore[assignment]

__all__ = ["SharedTable", "Bucket", "ceil_seconds"]


class SharedTable:
    """``cells`` float64 cells shared with the processes forked after it
    was made (see the module doc), all 0.0 at first."""

    def __init__(self, cells: int) -> None:
        self._file = tempfile.TemporaryFile(prefix="missive-limits-")
        size = max(8, cells * 8)
        self._file.truncate(size)
        self._map = mmap.mmap(self._file.fileno(), size)
        self.cells = memoryview(self._map).cast("d")
        self._threads = threading.Lock()

    @contextmanager
    def locked(self) -> Iterator[memoryview[float]]:
        """The cells, held by this thread of this process alone."""
        with self._threads:
            if fcntl is not None:
                fcntl.lockf(self._file.fileno(), fcntl.LOCK_EX)
            try:
                yield self.cells
            finally:
                if fcntl is not None:
                    fcntl.lockf(self._file.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class Bucket:
    """One bucket: its two cells (``level``, then the ``time.monotonic()``
    of its last refill; 0.0 both: never used, full), its ``capacity`` and
    ``period`` in seconds."""

    cell: int
    capacity: int
    period: float

    @property
    def rate(self) -> float:
        """Refill per second."""
        return self.capacity / self.period

    def level(self, cells: memoryview[float], now: float) -> float:
        """The level at ``now``, refilled and stored (call under the lock)."""
        level, stamp = cells[self.cell], cells[self.cell + 1]
        if stamp == 0.0:
            level = float(self.capacity)
        else:
            level = min(self.capacity, level + (now - stamp) * self.rate)
        cells[self.cell], cells[self.cell + 1] = level, now
        return level

    def take(self, cells: memoryview[float], amount: float, now: float) -> None:
        """Take ``amount`` (the level may go below zero)."""
        cells[self.cell] = self.level(cells, now) - amount

    def wait(self, level: float, need: float) -> float:
        """Seconds until a bucket at ``level`` holds ``need``."""
        return max(0.0, (need - level) / self.rate)

    def full_at(self, level: float, now: float | None = None) -> float:
        """Wall-clock time (``time.time()``) at which a bucket at ``level`` is full again."""
        return (time.time() if now is None else now) + max(0.0, self.capacity - level) / self.rate


def ceil_seconds(seconds: float) -> int:
    """Whole seconds, rounded up (a retry sooner would fail)."""
    return max(0, math.ceil(seconds - 1e-9))
