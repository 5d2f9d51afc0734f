"""The batch runner: pending requests onto their models' free admission permits, below
interactive traffic.

One dispatcher per served model loops: load the model if it is not loaded
and has pending batch requests (on demand, as a request would; a model in
use by a batch request is not unloaded), wait until the model's gate has room
for background work (:meth:`~missive.serving.admission.Gate.wait_background_room`: a
permit free, no request waiting, fewer than ``batches.max_slots`` permits held
by batches), take the oldest pending request of that model, and start it
(:func:`~missive.batches.execute.execute`) in a task of its own; then wait
until that request holds its permit before looking for the next one.

A running batch request stops (its task's cancel scope is cancelled) when:

* an interactive request has to wait for a permit (``preempted``): the gate
  preempts the newest background permit, the request stops within one decode
  step and gives its permit to the waiting request; nothing is written, it is
  pending again and runs again later (from its prompt; a llama.cpp model
  finds the prompt still in its slot or in the host-memory cache);
* its batch is canceled or expires: its result is ``canceled`` or ``expired``;
* the server shuts down (``shutdown``): nothing is written; it runs again
  after the restart.

A result, once computed, is written by the request's own task; a request
already given a result (by cancel or expiry) is not written twice
(:meth:`~missive.batches.store.BatchStore.put_result`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from ..protocol.errors import MissiveError, OverloadedError
from .execute import Stopped, execute
from .store import Job

if TYPE_CHECKING:
    from ..config import BatchesConfig
    from ..models.table import ModelTable
    from ..serving.admission import Admission
    from ..serving.record import RequestRecord
    from ..serving.service import Messages

__all__ = ["BatchRunner", "Running"]

log = logging.getLogger("missive.batches")

#: Reasons a running request stops, strongest last: a later stop only
#: replaces a weaker reason (a canceled batch's request preempted meanwhile
#: is still canceled, never put back in the queue).
_STRENGTH = {"preempted": 0, "shutdown": 1, "canceled": 2, "expired": 2}


#: Seconds between two tries to load a model that failed to load for batch requests.
LOAD_RETRY = 30.0


@dataclass
class Running:
    """A batch request being run: its job, its cancel scope, and why it was
    stopped (None: not stopped)."""

    job: Job
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reason: str | None = None

    def stop(self, reason: str) -> None:
        """Stop it for ``reason`` (see :data:`_STRENGTH`); idempotent."""
        if self.reason is None or _STRENGTH[reason] > _STRENGTH[self.reason]:
            self.reason = reason
        self.scope.cancel()


class BatchRunner:
    """Runs the pending requests of every served model (see the module doc).

    Args:
        messages: the Messages service that answers each request (:func:`execute`).
        models, admission: the served models and their gates.
        config: ``[batches]`` (``max_slots``).
        db: ``await db(method_name, *args)``: a call on the store in its thread.
        observe: receives each batch request's finished record.
        on_result: called with ``(model_id, result type)`` for each result
            written, and ``(model_id, "preempted")`` for each preemption.
        on_ended: called when a result written was its batch's last.
    """

    def __init__(
        self,
        messages: Messages,
        models: ModelTable,
        admission: Admission,
        config: BatchesConfig,
        strict: bool,
        db: Callable[..., Awaitable[Any]],
        observe: Callable[[RequestRecord], None],
        on_result: Callable[[str, str], None],
        on_ended: Callable[[], None] = lambda: None,
    ) -> None:
        self.messages = messages
        self.strict = strict
        self.models = models
        self.admission = admission
        self.config = config
        self.db = db
        self.observe = observe
        self.on_result = on_result
        self.on_ended = on_ended
        self.running: dict[tuple[int, int], Running] = {}
        self._wake = {model_id: anyio.Event() for model_id in models.drivers}
        self._tasks: TaskGroup | None = None
        self._stopping = False

    def wake(self, model_ids: object = None) -> None:
        """Tell the dispatchers of ``model_ids`` (None: all) that requests may be pending."""
        for model_id, event in self._wake.items():
            if model_ids is None or model_id in model_ids:  # type: ignore[operator]
                event.set()

    def stop_batch(self, batch_id: str, reason: str) -> list[tuple[int, int]]:
        """Stop the running requests of ``batch_id`` (``canceled`` or
        ``expired``); returns their keys (their tasks write their results)."""
        keys = []
        for key, running in list(self.running.items()):
            if running.job.batch_id == batch_id:
                running.stop(reason)
                keys.append(key)
        return keys

    def stop_all(self) -> None:
        """Shutdown: stop every running request (they stay pending) and every dispatcher."""
        self._stopping = True
        for running in list(self.running.values()):
            running.stop("shutdown")
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()

    async def run(self) -> None:
        """Run the dispatchers until :meth:`stop_all` (or cancellation)."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            for model_id in self.models.drivers:
                tasks.start_soon(self._dispatch, model_id, name=f"batches-{model_id}")

    async def _dispatch(self, model_id: str) -> None:
        assert self._tasks is not None
        while not self._stopping:
            if not self.models.loaded(model_id):
                # Not loaded (lazy, or unloaded when idle): its gate's permits
                # are not known yet. Loaded on demand, as for a request,
                # once it has pending batch requests.
                wake = self._wake[model_id] = anyio.Event()
                if not await self.db("pending", model_id, 1, list(self.running)):
                    await wake.wait()
                    continue
                await self._load(model_id)
                continue
            gate = self.admission.gate(model_id, self.models.drivers[model_id])
            cap = self.config.slots_for(gate.limit)
            try:
                await gate.wait_background_room(cap)
            except OverloadedError:
                return  # the gate closed: the server is shutting down
            # A new event before looking: a wake() from now on is not missed.
            wake = self._wake[model_id] = anyio.Event()
            jobs = await self.db("pending", model_id, 1, list(self.running))
            if not jobs:
                await wake.wait()
                continue
            running = Running(jobs[0])
            self.running[running.job.key] = running
            holding = anyio.Event()
            self._tasks.start_soon(
                self._run, running, gate, cap, holding, name=f"batch-{running.job.custom_id}"
            )
            await holding.wait()

    async def _load(self, model_id: str) -> None:
        """Load ``model_id`` for its pending batch requests; on failure wait
        a while before trying again (its requests stay pending, and expire
        if it never loads)."""
        use = self.models.use(model_id)
        try:
            await self.models.ensure_loaded(model_id)
        except MissiveError as exc:
            log.warning("batch requests for model %s wait: %s", model_id, exc.message)
            await anyio.sleep(LOAD_RETRY)
        finally:
            use.release()

    async def _run(self, running: Running, gate: Any, cap: int, holding: anyio.Event) -> None:
        job = running.job
        result: dict[str, Any] | None = None
        try:
            with running.scope:
                result = await execute(
                    self.messages,
                    self.models,
                    self.strict,
                    job,
                    gate,
                    cap,
                    on_preempt=lambda: running.stop("preempted"),
                    on_slot=holding.set,
                    observe=self.observe,
                )
        except Stopped:
            running.reason = running.reason or "shutdown"
        finally:
            holding.set()
            self.running.pop(job.key, None)
        reason = running.reason
        if result is None:
            if reason in ("canceled", "expired"):
                result = {"type": reason}
            else:
                if reason == "preempted":
                    self.on_result(job.model, "preempted")
                    log.info(
                        "batch %s request %s preempted by an interactive request; it will run again",
                        job.batch_id,
                        job.custom_id,
                    )
                self.wake([job.model])
                return
        with anyio.CancelScope(shield=True):
            written = await self.db("put_result", job.key, result, time.time())
        if written:
            self.on_result(job.model, result["type"])
        if written == "ended":
            log.info("batch %s ended", job.batch_id)
            self.on_ended()
        self.wake([job.model])
