"""Usage per key and model, kept in the state directory: ``GET /v1/usage``
and ``missive usage`` (docs/operations.md#usage).

Each message request that named a served model (``POST /v1/messages``, and
each request of a message batch, counted for the batch's key) adds one
request and the usage its answer reported to the row of its hour, key and
model. Rows are added up in memory and written every
:data:`FLUSH_INTERVAL` seconds, and when the server stops, to a SQLite file
(``usage.database``, default ``usage.sqlite3`` in the state directory);
several workers add to the same rows (``INSERT ... ON CONFLICT DO UPDATE``).
Rows older than ``usage.retention`` are deleted. An answer reading usage
sees this worker's requests at once (it writes its own first); another
worker's within :data:`FLUSH_INTERVAL` seconds.

The numbers are the API's usage fields as sent to the client
(``input_tokens``, ``cache_creation_input_tokens``,
``cache_read_input_tokens``, ``output_tokens``): what each answer said,
added up.

Each row also says whether a Claude Code subagent made its requests (the
``subagent`` column, :mod:`missive.protocol.agents`): the report adds both
together unless asked to keep them apart (``group_by=subagent``). Agent ids
themselves are not kept: every subagent has its own, and the rows would
grow with them. A database written before the column existed is rebuilt
with its rows counted as not a subagent's (:data:`MIGRATION`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..config.state_dir import state_dir
from ..protocol.errors import InvalidRequestError
from ..serving.record import BATCH_ENDPOINT

if TYPE_CHECKING:
    from ..config.keys import UsageConfig
    from ..serving.record import RequestRecord

__all__ = ["UsageStore", "UsageRecorder", "COUNTS", "DATABASE", "FLUSH_INTERVAL", "parse_time", "rfc3339"]

log = logging.getLogger("missive.usage")

DATABASE = "usage.sqlite3"
#: Seconds between two writes of the counts kept in memory.
FLUSH_INTERVAL = 5.0
#: The counted fields, in the database's and the answers' order.
COUNTS = (
    "requests",
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
#: ``bucket_width`` values and their seconds (the Admin API usage report's names).
WIDTHS = {"1h": 3600, "1d": 86400}
#: Most buckets one answer holds.
MAX_BUCKETS = 1000
_HOUR = 3600
_ENDPOINTS = frozenset({"/v1/messages", BATCH_ENDPOINT})

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage (
    hour INTEGER NOT NULL,
    key_name TEXT NOT NULL,
    model TEXT NOT NULL,
    subagent INTEGER NOT NULL DEFAULT 0,
    {", ".join(f"{name} INTEGER NOT NULL DEFAULT 0" for name in COUNTS)},
    PRIMARY KEY (hour, key_name, model, subagent)
);
"""
#: The rebuild of a table written before the ``subagent`` column (SQLite
#: cannot change a primary key in place): its rows, as a main agent's.
MIGRATION = (
    "ALTER TABLE usage RENAME TO usage_before_subagent",
    SCHEMA,
    f"INSERT INTO usage (hour, key_name, model, subagent, {', '.join(COUNTS)}) "
    f"SELECT hour, key_name, model, 0, {', '.join(COUNTS)} FROM usage_before_subagent",
    "DROP TABLE usage_before_subagent",
)
#: ``group_by`` values of the report.
GROUP_BY = ("subagent",)

Row = tuple[int, str, str, int]  # hour, key name, model, subagent (0 or 1)


class UsageStore:
    """The usage database (synchronous; called from one worker thread at a time).

    Raises:
        sqlite3.Error, OSError: the file cannot be opened or created.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA busy_timeout = 10000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(usage)")}

    def _migrate(self) -> None:
        """Rebuild a table without the ``subagent`` column (:data:`MIGRATION`),
        once, whichever worker comes first."""
        if "subagent" in self._columns():
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if "subagent" not in self._columns():
                for statement in MIGRATION:
                    self._db.execute(statement)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        log.info("usage database %s: the subagent column added", self._path)

    def close(self) -> None:
        self._db.close()

    def add(self, rows: dict[Row, list[int]]) -> None:
        """Add ``rows``' counts to the stored ones, in one transaction."""
        names = ", ".join(COUNTS)
        marks = ", ".join("?" for _ in COUNTS)
        update = ", ".join(f"{name} = {name} + excluded.{name}" for name in COUNTS)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                f"INSERT INTO usage (hour, key_name, model, subagent, {names}) VALUES (?, ?, ?, ?, {marks}) "
                f"ON CONFLICT (hour, key_name, model, subagent) DO UPDATE SET {update}",
                [(*row, *counts) for row, counts in rows.items()],
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def prune(self, before: float) -> int:
        """Delete the rows of hours that began before ``before``; how many."""
        return self._db.execute("DELETE FROM usage WHERE hour < ?", (int(before),)).rowcount

    def rows(self, start: int, end: int, key_name: str | None, model: str | None) -> list[tuple[Any, ...]]:
        """``(hour, key_name, model, subagent, *COUNTS)`` of the hours in ``[start, end)``."""
        sql = (
            f"SELECT hour, key_name, model, subagent, {', '.join(COUNTS)} FROM usage "
            "WHERE hour >= ? AND hour < ?"
        )
        args: list[Any] = [start, end]
        for column, value in (("key_name", key_name), ("model", model)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        return self._db.execute(sql + " ORDER BY hour, key_name, model, subagent", args).fetchall()


class UsageRecorder:
    """This process's part: counts in memory, written by :meth:`run`.

    Args:
        config: ``[usage]``.
    """

    def __init__(self, config: UsageConfig) -> None:
        self.config = config
        self.path = Path(config.database).expanduser() if config.database else state_dir() / DATABASE
        self._pending: defaultdict[Row, list[int]] = defaultdict(lambda: [0] * len(COUNTS))
        self._store: UsageStore | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._pruned = 0.0

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request (message requests of a key that named a served model)."""
        if record.key is None or not record.model or record.endpoint not in _ENDPOINTS:
            return
        hour = int(time.time()) // _HOUR * _HOUR
        counts = self._pending[(hour, record.key, record.model, int(record.agent.subagent))]
        counts[0] += 1
        for i, name in enumerate(COUNTS[1:], 1):
            counts[i] += getattr(record, name) or 0

    async def _call(self, method: str, *args: Any) -> Any:
        def call() -> Any:
            if self._store is None:
                self._store = UsageStore(self.path)
            return getattr(self._store, method)(*args)

        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def flush(self) -> None:
        """Write the counts kept in memory; delete rows past the retention (hourly).

        Raises:
            sqlite3.Error, OSError: the database cannot be written (the counts are kept for the next try).
        """
        pending, self._pending = self._pending, defaultdict(lambda: [0] * len(COUNTS))
        if pending:
            try:
                await self._call("add", dict(pending))
            except BaseException:
                for row, counts in pending.items():  # kept for the next flush
                    self._pending[row] = [a + b for a, b in zip(self._pending[row], counts, strict=True)]
                raise
        now = time.time()
        # A server that has counted nothing writes nothing (no database is made to be pruned).
        if now - self._pruned > _HOUR and (self._store is not None or self.path.exists()):
            self._pruned = now
            if await self._call("prune", now - self.config.retention):
                log.info("usage older than usage.retention deleted")

    async def run(self) -> None:
        """Flush every :data:`FLUSH_INTERVAL` seconds until cancelled, then once more."""
        try:
            while True:
                await asyncio.sleep(FLUSH_INTERVAL)
                try:
                    await self.flush()
                except Exception:  # usage must never take the server down
                    log.exception("could not write the usage to %s", self.path)
        finally:
            with anyio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        """Write what is pending and close the database."""
        try:
            await self.flush()
        except Exception:
            log.exception("could not write the usage to %s", self.path)
        if self._store is not None:
            store, self._store = self._store, None
            await anyio.to_thread.run_sync(store.close, limiter=self._limiter)

    async def report(
        self,
        starting_at: datetime,
        ending_at: datetime,
        width: str,
        key_name: str | None = None,
        model: str | None = None,
        group_by: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v1/usage``'s answer: buckets of ``width`` (``1h`` or ``1d``,
        aligned to UTC) from the one holding ``starting_at`` to the one
        holding ``ending_at`` (excluded when it starts there), each with one
        result per key and model that had requests, and ``totals`` per key
        and model over them all. ``group_by="subagent"`` splits each result
        into the requests of Claude Code subagents and the others, with a
        ``subagent`` boolean.

        Raises:
            InvalidRequestError: a bad width, an empty range, too many
                buckets, an unknown ``group_by``.
        """
        if group_by is not None and group_by not in GROUP_BY:
            raise InvalidRequestError(f"group_by: must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
        split = group_by == "subagent"
        if width not in WIDTHS:
            raise InvalidRequestError(f"bucket_width: must be one of {', '.join(WIDTHS)}, got {width!r}")
        step = WIDTHS[width]
        start = int(starting_at.timestamp()) // step * step
        end = -(-int(ending_at.timestamp()) // step) * step
        if end <= start:
            raise InvalidRequestError("ending_at must be after starting_at")
        if (end - start) // step > MAX_BUCKETS:
            raise InvalidRequestError(
                f"the range holds more than {MAX_BUCKETS} buckets of {width}: "
                "narrow it, or use bucket_width=1d"
            )
        await self.flush()
        rows = await self._call("rows", start, end, key_name, model)
        buckets: dict[int, dict[Group, list[int]]] = {b: {} for b in range(start, end, step)}
        totals: dict[Group, list[int]] = {}
        for hour, key, model_id, subagent, *counts in rows:
            group = (key, model_id, bool(subagent) if split else None)
            for target in (buckets[hour // step * step], totals):
                kept = target.setdefault(group, [0] * len(COUNTS))
                target[group] = [a + b for a, b in zip(kept, counts, strict=True)]
        return {
            "data": [
                {"starting_at": rfc3339(b), "ending_at": rfc3339(b + step), "results": _results(found)}
                for b, found in buckets.items()
            ],
            "totals": _results(totals),
            "starting_at": rfc3339(start),
            "ending_at": rfc3339(end),
            "bucket_width": width,
        }


#: What a result is for: key name, model, and subagent (None: not split).
Group = tuple[str, str, bool | None]


def _results(found: dict[Group, list[int]]) -> list[dict[str, Any]]:
    out = []
    for (key, model, subagent), counts in sorted(
        found.items(), key=lambda item: (item[0][0], item[0][1], bool(item[0][2]))
    ):
        result: dict[str, Any] = {"key_name": key, "model": model}
        if subagent is not None:
            result["subagent"] = subagent
        out.append({**result, **dict(zip(COUNTS, counts, strict=True))})
    return out


def rfc3339(seconds: float) -> str:
    """Unix ``seconds`` as ``2026-05-04T10:00:00Z``."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(name: str, value: str | None, default: datetime) -> datetime:
    """A query parameter as a time: RFC 3339 (``2026-05-04T10:00:00Z``; no
    offset is UTC), a date (``2026-05-04``), or a duration before now
    (``24h``, ``7d``, ``30m``); ``default`` when absent.

    Raises:
        InvalidRequestError: none of those.
    """
    if value is None or not value.strip():
        return default
    text = value.strip()
    units = {"m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return datetime.now(timezone.utc) - timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise InvalidRequestError(
            f"{name}: expected an RFC 3339 time (2026-05-04T10:00:00Z), a date or a "
            f"duration such as 24h or 7d, got {value!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
