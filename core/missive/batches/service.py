"""The Message Batches of one server: the store, the runner and the
housekeeping (expiry, archiving), behind the operations the routes call.

Built by :func:`missive.server.services.build_services` (``services().batches``);
:meth:`Batches.start` runs after the models have started, :meth:`Batches.aclose`
before they close. The database is opened on the first batch created, or at
start when the file already exists, so a server that is never sent a batch
writes nothing. One server at a time owns a database: it holds an exclusive
lock on ``<database>.lock`` (another server on the same state directory
answers the batch endpoints with a 500 naming the owner's lock).

Every operation takes the request's key (:class:`~missive.keys.ring.Identity`):
a batch is its creator's; another user key finds no such batch (404) and
does not list it, admin keys see every batch (issue 32). A request of a
batch naming a model its key may not use gets the ``errored`` result an
absent model would (``not_found_error``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..config.state_dir import lock_exclusive, state_dir
from ..protocol.errors import ApiError, InvalidRequestError, MissiveError, ModelNotFoundError, NotFoundError
from ..protocol.ids import message_batch_id
from ..protocol.validation import parse_json
from .execute import check_params
from .runner import BatchRunner
from .shapes import BatchRow, batch_object, check_create_body, deleted_object, errored_result
from .store import BatchStore, NewRequest

if TYPE_CHECKING:
    from ..config import Config
    from ..keys.ring import Identity
    from ..models.table import ModelTable
    from ..serving.admission import Admission
    from ..serving.drain import Drain
    from ..serving.record import RequestRecord
    from ..serving.service import Messages

__all__ = ["Batches", "DATABASE"]

log = logging.getLogger("missive.batches")

#: The database's file name in the state directory.
DATABASE = "batches.sqlite3"
#: Longest sleep of the housekeeping loop, seconds (expiry is checked at
#: least this often; a new batch wakes it at once).
HOUSEKEEPING = 60.0


class Batches:
    """See the module doc.

    Args:
        messages: the Messages service that answers each request.
        config: the whole configuration (``[batches]``, ``server.strict``).
        models, admission, drain: the served models, their gates, the shutdown state.
        observe: receives each batch request's finished record.
        on_result: ``(model_id, kind)`` for each result written and each
            preemption (the metrics).
    """

    def __init__(
        self,
        messages: Messages,
        config: Config,
        models: ModelTable,
        admission: Admission,
        drain: Drain,
        observe: Callable[[RequestRecord], None],
        on_result: Callable[[str, str], None],
    ) -> None:
        self.config = config
        self.settings = config.batches
        self.models = models
        self.drain = drain
        self.path = (
            Path(self.settings.database).expanduser() if self.settings.database else state_dir() / DATABASE
        )
        self._store: BatchStore | None = None
        self._lock_fd: int | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._housekeeping = anyio.Event()
        self.runner = BatchRunner(
            messages,
            models,
            admission,
            self.settings,
            config.server.strict,
            self._db,
            observe,
            on_result,
            on_ended=lambda: self._housekeeping.set(),  # its archiving time is now known
        )
        self._opened = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._summary: dict[str, Any] = {"batches": {}, "pending": {}}

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Open an existing database, finish what a stop left half done
        (cancellations, requests of models no longer served), and start
        running batches in a background task. Idempotent."""
        if self._task is not None or not self.settings.enabled:
            return
        self._scope = anyio.CancelScope()
        if self.path.exists():
            try:
                await self._open()
                await self._recover()
            except MissiveError as exc:
                log.error("message batches unavailable: %s", exc.message)
        self._task = asyncio.get_running_loop().create_task(self._serve(), name="batches")

    async def _serve(self) -> None:
        assert self._scope is not None
        with self._scope:
            await self._opened.wait()  # the first batch created opens the database
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self.runner.run)
                tasks.start_soon(self._keep_house)
                tasks.start_soon(self._stop_on_drain)

    async def _stop_on_drain(self) -> None:
        await self.drain.wait_begun()
        log.info("shutting down: running batch requests stop and will run again after the restart")
        self.runner.stop_all()
        if self._scope is not None:
            self._scope.cancel()

    async def aclose(self) -> None:
        """Stop running batches (running requests stay pending) and close the database."""
        self.runner.stop_all()
        if self._scope is not None:
            self._scope.cancel()
        with anyio.CancelScope(shield=True):
            if self._task is not None:
                with anyio.move_on_after(30):  # running requests stop within a decode step
                    await asyncio.wait({self._task})
            if self._store is not None:
                store, self._store = self._store, None
                await anyio.to_thread.run_sync(store.close, limiter=self._limiter)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    async def _open(self) -> BatchStore:
        """The store, opened (and locked) on first use.

        Raises:
            ApiError: the endpoints are off, the file cannot be opened, or
                another server holds it.
        """
        if not self.settings.enabled:
            raise NotFoundError("message batches are disabled on this server (batches.enabled = false)")
        if self._store is not None:
            return self._store
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ApiError(f"message batches unavailable: cannot open {self.path}: {exc}") from None
        if not lock_exclusive(fd):
            os.close(fd)
            raise ApiError(
                f"message batches unavailable: {self.path} is in use by another Missive server "
                "(one server per state directory; set MISSIVE_STATE_DIR or batches.database)"
            )
        try:
            store = await anyio.to_thread.run_sync(BatchStore, self.path, limiter=self._limiter)
        except Exception as exc:
            os.close(fd)
            raise ApiError(f"message batches unavailable: cannot open {self.path}: {exc}") from None
        self._lock_fd, self._store = fd, store
        self._opened.set()
        log.info("message batches stored in %s", self.path)
        return store

    async def _db(self, method: str, *args: Any) -> Any:
        """``store.method(*args)`` in the store's thread."""
        store = self._store
        if store is None:
            raise ApiError("message batches unavailable: the database is closed")
        return await anyio.to_thread.run_sync(partial(getattr(store, method), *args), limiter=self._limiter)

    async def _recover(self) -> None:
        now = time.time()
        for batch in await self._db("canceling"):
            await self._db("finish_pending", batch, "canceled", now)
        for model in await self._db("pending_models"):
            if model in self.models.drivers:
                continue
            # Served under another id since the batch was created: resolve its params again.
            for seq, idx, params in await self._db("pending_params", model):
                try:
                    target = check_params(
                        json.loads(params), self.models, strict=self.config.server.strict
                    ).model
                except MissiveError as exc:
                    await self._db("put_result", (seq, idx), errored_result(exc.error_type, exc.message), now)
                else:
                    await self._db("set_model", (seq, idx), target)

    async def _keep_house(self) -> None:
        """Expire batches past ``expires_at``, archive those past the
        retention, and sleep until the next of either is due (at most a
        minute; a batch created or ended wakes it)."""
        while True:
            self._housekeeping = anyio.Event()
            wait = HOUSEKEEPING
            if self._store is not None:
                now = time.time()
                for batch in await self._db("due_to_expire", now):
                    await self._expire(batch, now)
                archived = await self._db("archive", now - self.settings.retention, now)
                if archived:
                    log.info("archived %d batches (results deleted after batches.retention)", len(archived))
                upcoming = [await self._db("next_expiry")]
                oldest = await self._db("next_archive")
                if oldest is not None:
                    upcoming.append(oldest + self.settings.retention)
                for when in upcoming:
                    if when is not None:
                        wait = min(wait, max(0.05, when - time.time()))
            with anyio.move_on_after(wait):
                await self._housekeeping.wait()

    async def _expire(self, batch: str, now: float) -> None:
        running = self.runner.stop_batch(batch, "expired")
        count = await self._db("finish_pending", batch, "expired", now, running)
        log.info("batch %s expired: %d requests not run", batch, count + len(running))

    # -- the API's operations --------------------------------------------------

    async def create(self, raw: bytes, base_url: str, identity: Identity) -> dict[str, Any]:
        """``POST /v1/messages/batches``: store the batch of ``identity``'s key and start running it.

        Raises:
            InvalidRequestError: the body is not JSON or breaks the batch's
                own rules (:func:`~missive.batches.shapes.check_create_body`).
        """
        await self._open()
        strict = self.config.server.strict

        def prepare() -> list[NewRequest]:
            pairs = check_create_body(parse_json(raw), self.settings.max_requests)
            new = []
            for custom_id, params in pairs:
                try:
                    checked = check_params(params, self.models, strict=strict)
                    model = checked.model
                    if not identity.may_use(model):
                        raise ModelNotFoundError(checked.request.model)
                except MissiveError as exc:
                    new.append(
                        NewRequest(custom_id, None, params, errored_result(exc.error_type, exc.message))
                    )
                else:
                    new.append(NewRequest(custom_id, model, params))
            return new

        requests = await anyio.to_thread.run_sync(prepare)
        now = time.time()
        expires = now + self.settings.expiry
        row = await self._db("create", message_batch_id(), now, expires, requests, identity.name)
        log.info("batch %s created: %d requests (%d errored at once)", row.id, row.total, row.errored)
        self.runner.wake({r.model for r in requests if r.model is not None})
        self._housekeeping.set()
        return batch_object(row, base_url)

    def _fresh(self) -> bool:
        """No database yet (none created on this state directory): a read
        finds nothing, and does not create one.

        Raises:
            NotFoundError: batches are disabled.
        """
        if not self.settings.enabled:
            raise NotFoundError("message batches are disabled on this server (batches.enabled = false)")
        return self._store is None and not self.path.exists()

    async def _row(self, batch: str, identity: Identity) -> BatchRow:
        """The batch, when ``identity`` may see it.

        Raises:
            NotFoundError: no such batch, or another key's (the same answer).
        """
        if self._fresh():
            raise NotFoundError(f"message batch not found: {batch}")
        await self._open()
        row: BatchRow | None = await self._db("get", batch)
        if row is None or not identity.owns(row.owner):
            raise NotFoundError(f"message batch not found: {batch}")
        return row

    async def retrieve(self, batch: str, base_url: str, identity: Identity) -> dict[str, Any]:
        """``GET /v1/messages/batches/{id}``.

        Raises:
            NotFoundError: no such batch.
        """
        return batch_object(await self._row(batch, identity), base_url)

    async def page(
        self, limit: int, after_id: str | None, before_id: str | None, base_url: str, identity: Identity
    ) -> dict[str, Any]:
        """``GET /v1/messages/batches``: newest first, the API's page shape
        (``data``, ``has_more``, ``first_id``, ``last_id``); ``identity``'s
        own batches, or every batch for an admin key.

        Raises:
            InvalidRequestError: both cursors given.
        """
        if after_id is not None and before_id is not None:
            raise InvalidRequestError("after_id and before_id cannot both be set")
        if self._fresh():
            rows, more = [], False
        else:
            await self._open()
            owner = None if identity.admin else identity.name  # an admin key lists every batch
            rows, more = await self._db("page", limit, after_id, before_id, owner)
        data = [batch_object(row, base_url) for row in rows]
        return {
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    async def cancel(self, batch: str, base_url: str, identity: Identity) -> dict[str, Any]:
        """``POST /v1/messages/batches/{id}/cancel``: requests not started
        are ``canceled`` at once, running ones are stopped (``canceled``);
        the batch is ``canceling`` until the last of them has stopped, then
        ``ended``. A batch already canceling or ended is returned as it is.

        Raises:
            NotFoundError: no such batch.
        """
        row = await self._row(batch, identity)
        if row.processing_status == "in_progress":
            now = time.time()
            await self._db("cancel", batch, now)
            running = self.runner.stop_batch(batch, "canceled")
            count = await self._db("finish_pending", batch, "canceled", now, running)
            log.info(
                "batch %s canceled: %d requests not started, %d running stopped", batch, count, len(running)
            )
            self._housekeeping.set()
            row = await self._row(batch, identity)
        return batch_object(row, base_url)

    async def delete(self, batch: str, identity: Identity) -> dict[str, str]:
        """``DELETE /v1/messages/batches/{id}``: only once it has ended (the API's rule).

        Raises:
            NotFoundError: no such batch.
            InvalidRequestError: still in progress or canceling.
        """
        row = await self._row(batch, identity)
        if row.processing_status != "ended":
            raise InvalidRequestError(
                f"message batch {batch} cannot be deleted while it is {row.processing_status}: "
                "cancel it, then delete it once processing_status is ended"
            )
        await self._db("delete", batch)
        return deleted_object(batch)

    async def results(self, batch: str, identity: Identity) -> AsyncIterator[bytes]:
        """``GET /v1/messages/batches/{id}/results``: the JSON Lines body
        (one ``{"custom_id", "result"}`` per request, in request order),
        read from the database page by page as it is sent.

        Raises:
            NotFoundError: no such batch, or its results were archived.
            InvalidRequestError: it has not ended.
        """
        row = await self._row(batch, identity)
        if row.archived_at is not None:
            raise NotFoundError(f"the results of message batch {batch} are no longer available (archived)")
        if row.ended_at is None:
            raise InvalidRequestError(
                f"message batch {batch} is {row.processing_status}: its results are available once "
                "processing_status is ended"
            )
        first = await self._db("results_page", batch, -1)

        async def lines() -> AsyncIterator[bytes]:
            page, after = first
            while page:
                yield "".join(
                    f'{{"custom_id":{json.dumps(custom_id)},"result":{result}}}\n'
                    for custom_id, result in page
                ).encode("utf-8")
                page, after = await self._db("results_page", batch, after)

        return lines()

    # -- metrics ---------------------------------------------------------------

    async def refresh_summary(self) -> dict[str, Any]:
        """Batches by status and pending requests by model, read now (for a
        ``/metrics`` scrape); ``{}`` counts without a database."""
        if self._store is not None:
            self._summary = await self._db("summary")
        return self._summary

    @property
    def summary(self) -> dict[str, Any]:
        """The last :meth:`refresh_summary`."""
        return self._summary
