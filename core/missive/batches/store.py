"""Batches and their requests in SQLite (the standard library's ``sqlite3``).

One file (``batches.database``, default ``batches.sqlite3`` in the state
directory) holds every batch and every request with its ``params`` and, once
it has one, its result. A request is ``pending`` until its result is written
(``succeeded``, ``errored``, ``canceled``, ``expired``); nothing marks one
"running", so after a crash or a restart every request without a result is
simply pending again and runs again. Counts per result type are kept on the
batch row in the same transaction as the result, and the batch ends
(``ended_at``) in the transaction that writes its last result. Each batch
row holds its ``owner``, the name of the key that created it
(:mod:`missive.keys`); a database from before owners were kept gets the
column on opening, NULL in its rows (which admin keys alone see).

The write-ahead log with ``synchronous = FULL`` makes each committed result
survive a crash of the process or of the machine. :class:`BatchStore` is
synchronous and not thread-safe: :class:`~missive.batches.service.Batches`
calls it from one worker thread at a time (``anyio.to_thread`` with a
limiter of 1), so the event loop never waits on the disk.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .shapes import RESULT_TYPES, BatchRow

__all__ = ["BatchStore", "Job", "NewRequest"]

log = logging.getLogger("missive.batches")

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    ended_at REAL,
    cancel_initiated_at REAL,
    archived_at REAL,
    total INTEGER NOT NULL,
    succeeded INTEGER NOT NULL DEFAULT 0,
    errored INTEGER NOT NULL DEFAULT 0,
    canceled INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS requests (
    batch_seq INTEGER NOT NULL REFERENCES batches(seq) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    model TEXT,
    params TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    result TEXT,
    PRIMARY KEY (batch_seq, idx)
);
CREATE INDEX IF NOT EXISTS requests_pending ON requests(model, batch_seq, idx) WHERE state = 'pending';
"""

_BATCH_COLUMNS = (
    "id, created_at, expires_at, ended_at, cancel_initiated_at, archived_at, total, "
    "succeeded, errored, canceled, expired, owner"
)
#: Results are read this many lines at a time.
RESULT_PAGE = 500


@dataclass(frozen=True)
class NewRequest:
    """One request of a batch being created: its ``custom_id``, the
    configured model id that will run it (None when it already has its
    result), its ``params`` as sent, and a result decided at creation
    (an ``errored`` result for params that are not a valid Messages request)."""

    custom_id: str
    model: str | None
    params: dict[str, Any]
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class Job:
    """A pending request to run: ``(batch_seq, idx)`` is its key."""

    batch_seq: int
    idx: int
    batch_id: str
    custom_id: str
    model: str
    params: str  # JSON
    owner: str | None = None  # the batch's key (its usage is counted for it)

    @property
    def key(self) -> tuple[int, int]:
        return (self.batch_seq, self.idx)


def _row(values: tuple[Any, ...]) -> BatchRow:
    return BatchRow(*values)


class BatchStore:
    """The batches database.

    Args:
        path: the SQLite file (its folder is created).

    Raises:
        sqlite3.Error, OSError: the file cannot be opened or created.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.executescript(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(batches)")}
        if "owner" not in columns:  # a database from before batches had owners (issue 32)
            self._db.execute("ALTER TABLE batches ADD COLUMN owner TEXT")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_owner ON batches(owner, seq)")

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def _write(self) -> _Transaction:
        return _Transaction(self._db)

    # -- batches -------------------------------------------------------------

    def create(
        self,
        batch_id: str,
        created_at: float,
        expires_at: float,
        requests: list[NewRequest],
        owner: str | None = None,
    ) -> BatchRow:
        """Store a new batch of ``owner`` and its requests in one
        transaction; requests created with a result count at once (the batch
        ends at once when every request has one)."""
        counts = dict.fromkeys(RESULT_TYPES, 0)
        for item in requests:
            if item.result is not None:
                counts[item.result["type"]] += 1
        done = sum(counts.values())
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO batches (id, created_at, expires_at, ended_at, total, succeeded, errored, "
                "canceled, expired, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    batch_id,
                    created_at,
                    expires_at,
                    created_at if done == len(requests) else None,
                    len(requests),
                    counts["succeeded"],
                    counts["errored"],
                    counts["canceled"],
                    counts["expired"],
                    owner,
                ),
            )
            seq = cursor.lastrowid
            db.executemany(
                "INSERT INTO requests (batch_seq, idx, custom_id, model, params, state, result) VALUES (?, "
                "?, ?, ?, ?, ?, ?)",
                (
                    (
                        seq,
                        i,
                        item.custom_id,
                        item.model,
                        json.dumps(item.params, ensure_ascii=False),
                        "pending" if item.result is None else item.result["type"],
                        None if item.result is None else json.dumps(item.result, ensure_ascii=False),
                    )
                    for i, item in enumerate(requests)
                ),
            )
        row = self.get(batch_id)
        assert row is not None
        return row

    def get(self, batch_id: str) -> BatchRow | None:
        """The batch, or None."""
        found = self._db.execute(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return _row(found) if found else None

    def page(
        self, limit: int, after_id: str | None = None, before_id: str | None = None, owner: str | None = None
    ) -> tuple[list[BatchRow], bool]:
        """A page of batches, newest first (the API's order), and whether
        more lie beyond it in the direction of travel: after ``after_id``
        (older ones), or before ``before_id`` (newer ones, still listed
        newest first). With ``owner``, only that key's batches (a cursor of
        another's is unknown); None: every batch. An unknown cursor is an
        empty page."""
        mine, args = ("owner = ?", (owner,)) if owner is not None else ("1", ())
        if after_id is not None or before_id is not None:
            cursor_id = after_id if after_id is not None else before_id
            found = self._db.execute(
                f"SELECT seq FROM batches WHERE id = ? AND {mine}", (cursor_id, *args)
            ).fetchone()
            if found is None:
                return [], False
            seq = found[0]
        if after_id is not None:
            rows = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE seq < ? AND {mine} ORDER BY seq DESC LIMIT ?",
                (seq, *args, limit + 1),
            ).fetchall()
        elif before_id is not None:
            rows = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE seq > ? AND {mine} ORDER BY seq ASC LIMIT ?",
                (seq, *args, limit + 1),
            ).fetchall()
            more = len(rows) > limit
            return [_row(r) for r in reversed(rows[:limit])], more
        else:
            rows = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE {mine} ORDER BY seq DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        return [_row(r) for r in rows[:limit]], len(rows) > limit

    def cancel(self, batch_id: str, now: float) -> None:
        """Mark cancellation as initiated (``cancel_initiated_at``) on a batch
        still in progress; nothing for one canceling or ended."""
        with self._write() as db:
            db.execute(
                "UPDATE batches SET cancel_initiated_at = ? WHERE id = ? AND ended_at IS NULL "
                "AND cancel_initiated_at IS NULL",
                (now, batch_id),
            )

    def delete(self, batch_id: str) -> None:
        """Delete the batch and its requests."""
        with self._write() as db:
            db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))

    # -- requests ------------------------------------------------------------

    def pending(self, model: str, limit: int, skip: Iterable[tuple[int, int]] = ()) -> list[Job]:
        """Up to ``limit`` pending requests of ``model`` in batches still in
        progress (not canceling), oldest batch first, in request order,
        leaving out the keys in ``skip`` (those running)."""
        skip = set(skip)
        rows = self._db.execute(
            "SELECT r.batch_seq, r.idx, b.id, r.custom_id, r.model, r.params, b.owner FROM requests r "
            "JOIN batches b ON b.seq = r.batch_seq "
            "WHERE r.model = ? AND r.state = 'pending' AND b.ended_at IS NULL AND b.cancel_initiated_at IS "
            "NULL ORDER BY r.batch_seq, r.idx LIMIT ?",
            (model, limit + len(skip)),
        ).fetchall()
        jobs = [Job(*r) for r in rows if (r[0], r[1]) not in skip]
        return jobs[:limit]

    def pending_models(self) -> list[str | None]:
        """The models pending requests are waiting for."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT model FROM requests WHERE state = 'pending'")]

    def pending_params(self, model: str | None) -> list[tuple[int, int, str]]:
        """``(batch_seq, idx, params)`` of every pending request of ``model``."""
        return self._db.execute(
            "SELECT batch_seq, idx, params FROM requests WHERE state = 'pending' AND model IS ?", (model,)
        ).fetchall()

    def set_model(self, key: tuple[int, int], model: str) -> None:
        """Point a pending request at another configured model id."""
        with self._write() as db:
            db.execute("UPDATE requests SET model = ? WHERE batch_seq = ? AND idx = ?", (model, *key))

    def put_result(self, key: tuple[int, int], result: dict[str, Any], now: float) -> str | None:
        """Write a pending request's result, count it on its batch, and end
        the batch if it was the last. Returns ``"ended"`` (it was the last),
        ``"written"``, or None (nothing written: the request already had a
        result)."""
        kind = result["type"]
        assert kind in RESULT_TYPES
        with self._write() as db:
            changed = db.execute(
                "UPDATE requests SET state = ?, result = ? WHERE batch_seq = ? AND idx = ? AND state = "
                "'pending'",
                (kind, json.dumps(result, ensure_ascii=False), *key),
            ).rowcount
            if not changed:
                return None
            db.execute(f"UPDATE batches SET {kind} = {kind} + 1 WHERE seq = ?", (key[0],))
            ended = _end_if_done(db, key[0], now)
        return "ended" if ended else "written"

    def finish_pending(
        self, batch_id: str, kind: str, now: float, skip: Iterable[tuple[int, int]] = ()
    ) -> int:
        """Give every pending request of the batch, but those in ``skip``
        (running: their task writes their result), the result ``{"type":
        kind}`` (``canceled`` or ``expired``); end the batch if none is left.
        Returns how many were finished."""
        assert kind in ("canceled", "expired")
        skip = set(skip)
        result = json.dumps({"type": kind})
        with self._write() as db:
            found = db.execute("SELECT seq FROM batches WHERE id = ?", (batch_id,)).fetchone()
            if found is None:
                return 0
            seq = found[0]
            keys = [
                idx
                for (idx,) in db.execute(
                    "SELECT idx FROM requests WHERE batch_seq = ? AND state = 'pending'", (seq,)
                )
                if (seq, idx) not in skip
            ]
            db.executemany(
                "UPDATE requests SET state = ?, result = ? WHERE batch_seq = ? AND idx = ?",
                ((kind, result, seq, idx) for idx in keys),
            )
            db.execute(f"UPDATE batches SET {kind} = {kind} + ? WHERE seq = ?", (len(keys), seq))
            _end_if_done(db, seq, now)
        return len(keys)

    def results_page(self, batch_id: str, after: int) -> tuple[list[tuple[str, str]], int]:
        """One page of results (:data:`RESULT_PAGE` at most): ``(custom_id, result JSON)`` pairs of
        the requests after position ``after`` (-1: from the start), and the
        position to continue after (-1 with an empty page: the end)."""
        found = self._db.execute("SELECT seq FROM batches WHERE id = ?", (batch_id,)).fetchone()
        if found is None:
            return [], -1
        rows = self._db.execute(
            "SELECT idx, custom_id, result FROM requests WHERE batch_seq = ? AND idx > ? AND result IS NOT "
            "NULL ORDER BY idx LIMIT ?",
            (found[0], after, RESULT_PAGE),
        ).fetchall()
        if not rows:
            return [], -1
        return [(custom_id, result) for _, custom_id, result in rows], rows[-1][0]

    # -- housekeeping --------------------------------------------------------

    def due_to_expire(self, now: float) -> list[str]:
        """Ids of batches still in progress whose ``expires_at`` has passed."""
        return [
            r[0]
            for r in self._db.execute(
                "SELECT id FROM batches WHERE ended_at IS NULL AND expires_at <= ?", (now,)
            )
        ]

    def canceling(self) -> list[str]:
        """Ids of batches whose cancellation has not ended yet."""
        return [
            r[0]
            for r in self._db.execute(
                "SELECT id FROM batches WHERE ended_at IS NULL AND cancel_initiated_at IS NOT NULL"
            )
        ]

    def next_expiry(self) -> float | None:
        """The earliest ``expires_at`` of a batch in progress, or None."""
        found: float | None = self._db.execute(
            "SELECT MIN(expires_at) FROM batches WHERE ended_at IS NULL"
        ).fetchone()[0]
        return found

    def next_archive(self) -> float | None:
        """The earliest ``created_at`` of an ended batch not archived yet, or None."""
        found: float | None = self._db.execute(
            "SELECT MIN(created_at) FROM batches WHERE ended_at IS NOT NULL AND archived_at IS NULL"
        ).fetchone()[0]
        return found

    def archive(self, before: float, now: float) -> list[str]:
        """Archive ended batches created before ``before``: their requests
        (params and results) are deleted and ``archived_at`` set. Returns
        their ids."""
        with self._write() as db:
            ids = db.execute(
                "SELECT seq, id FROM batches WHERE archived_at IS NULL AND ended_at IS NOT NULL AND "
                "created_at < ?",
                (before,),
            ).fetchall()
            for seq, _ in ids:
                db.execute("DELETE FROM requests WHERE batch_seq = ?", (seq,))
                db.execute("UPDATE batches SET archived_at = ? WHERE seq = ?", (now, seq))
        return [batch for _, batch in ids]

    def summary(self) -> dict[str, Any]:
        """For ``/metrics``: batches by ``processing_status`` and pending
        requests by model."""
        statuses = dict(
            self._db.execute(
                "SELECT CASE WHEN ended_at IS NOT NULL THEN 'ended' WHEN cancel_initiated_at IS NOT NULL "
                "THEN 'canceling' ELSE 'in_progress' END AS status, COUNT(*) FROM batches GROUP BY status"
            ).fetchall()
        )
        pending = dict(
            self._db.execute(
                "SELECT COALESCE(model, ''), COUNT(*) FROM requests WHERE state = 'pending' GROUP BY model"
            ).fetchall()
        )
        return {"batches": statuses, "pending": pending}


def _end_if_done(db: sqlite3.Connection, seq: int, now: float) -> bool:
    """End batch ``seq`` if every request has a result; whether it ended now."""
    return (
        0
        < db.execute(
            "UPDATE batches SET ended_at = ? WHERE seq = ? AND ended_at IS NULL "
            "AND succeeded + errored + canceled + expired >= total",
            (now, seq),
        ).rowcount
    )


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an error)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: object, *_: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
