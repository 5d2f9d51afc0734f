"""One request of a batch: its ``params`` checked as a Messages request, then
run as ``POST /v1/messages`` with ``stream: false`` would run it, into a result.

:func:`check_params` runs when the batch is created (a request that fails it
gets its ``errored`` result at once, and never takes a slot); :func:`execute`
when the runner gives it a slot. Both produce the same errors as the request
sent on its own (the same validation, the same
:class:`~missive.serving.service.Messages` service, whose answer is folded
by :func:`~missive.messages.stream.accumulate`), so a result equals what the
request would have been answered on its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..messages.prepare import Notes
from ..messages.stream import accumulate
from ..models.table import ModelTable
from ..protocol.errors import ApiError, InvalidRequestError, MissiveError, OverloadedError
from ..protocol.ids import request_id
from ..protocol.schema.ignored import collect_ignored
from ..protocol.schema.request import MessagesRequest
from ..protocol.validation import validate_body
from ..serving.admission import Gate, Permit
from ..serving.logs import request_id_var
from ..serving.record import BATCH_ENDPOINT, RequestRecord
from ..serving.service import Caller, Messages
from ..threads.errors import ThreadUnsupportedRequestError
from .shapes import errored_result

if TYPE_CHECKING:
    from .store import Job

__all__ = ["check_params", "execute", "Stopped"]

log = logging.getLogger("missive.batches")


class Stopped(Exception):
    """The request was stopped before a result (the gate closed: the server
    is shutting down); it stays pending and runs again later."""


@dataclass(frozen=True)
class Checked:
    """A valid request's body and the configured model id that serves it."""

    request: MessagesRequest
    model: str


def check_params(params: dict[str, Any], models: ModelTable, *, strict: bool) -> Checked:
    """Check one request's ``params`` as ``POST /v1/messages`` checks a body,
    plus the batch's own rules: no ``stream: true`` (a batch's results are
    whole messages), no ``thread`` (each request stands alone), no
    ``fallbacks`` (the API's) and ``max_tokens`` of at least 1 (the API's
    batch rule: a cache warm-up would have nothing to warm).

    Raises:
        InvalidRequestError: the first problem, with its field path; in
            strict mode also fields Missive would ignore.
        ModelNotFoundError: no served model matches ``params.model`` (404).
    """
    if params.get("stream") is True:
        raise InvalidRequestError(
            "stream: streaming is not supported in a Message Batch; leave it out or set it to false"
        )
    if params.get("thread") is not None:
        raise ThreadUnsupportedRequestError("message threads are not supported in a Message Batch")
    if params.get("fallbacks") is not None:
        # The API: "not supported on the Message Batches API".
        raise InvalidRequestError("fallbacks: not supported in a Message Batch; leave it out")
    req = validate_body(MessagesRequest, params)
    if req.max_tokens is not None and req.max_tokens < 1:
        raise InvalidRequestError("max_tokens: must be at least 1 in a Message Batch")
    if strict:
        ignored = collect_ignored(req)
        if ignored:
            raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(ignored))
    model_id, _ = models.resolve(req.model)
    return Checked(req, model_id)


async def execute(
    messages: Messages,
    models: ModelTable,
    strict: bool,
    job: Job,
    gate: Gate,
    cap: int,
    *,
    on_preempt: Callable[[], None],
    on_slot: Callable[[], None],
    observe: Callable[[RequestRecord], None],
) -> dict[str, Any]:
    """Run one pending request on its model, under a background slot of
    ``gate`` (at most ``cap`` held by batches), and return its result
    object (``succeeded`` with the message, or ``errored`` with the error
    the same request would have got on its own).

    Args:
        messages: the Messages service (:class:`~missive.serving.service.Messages`).
        models: the served models.
        strict: ``server.strict`` (ignored fields are a 400).
        job: the request (its ``model`` is the configured id).
        on_preempt: called when an interactive request needs the slot; the
            caller must then cancel this call (the slot is given back as it
            unwinds).
        on_slot: called once the request holds its slot (or has ended
            without one).
        observe: receives the request's finished record (log line, metrics).

    Raises:
        Stopped: the gate closed (shutdown) before the request got a slot.
    """

    async def admit() -> Permit:
        slot = await gate.admit_background(cap, on_preempt)
        on_slot()
        return slot

    rid = request_id()
    token = request_id_var.set(rid)
    facts = RequestRecord(
        rid, "BATCH", f"{BATCH_ENDPOINT}/{job.batch_id}/{job.custom_id}", BATCH_ENDPOINT, observe
    )
    facts.model = job.model
    facts.key = job.owner  # its usage is its batch's key's
    try:
        try:
            return await _succeeded(messages, models, strict, job, rid, facts, admit)
        except OverloadedError as exc:
            if gate.closed:
                facts.finish(exc.status, exc.error_type)
                raise Stopped(exc.message) from None
            facts.finish(exc.status, exc.error_type)
            return errored_result(exc.error_type, exc.message, rid)
        except MissiveError as exc:
            log.info(
                "batch %s request %s errored: %s: %s",
                job.batch_id,
                job.custom_id,
                exc.error_type,
                exc.message,
            )
            facts.finish(exc.status, exc.error_type)
            return errored_result(exc.error_type, exc.message, rid)
        except (anyio.get_cancelled_exc_class(), Stopped):
            facts.finish(499, "stopped")
            raise
        except Exception:
            log.exception("batch %s request %s failed", job.batch_id, job.custom_id)
            error = ApiError("internal server error; the server log has the details")
            facts.finish(error.status, error.error_type)
            return errored_result(error.error_type, error.message, rid)
    finally:
        on_slot()
        request_id_var.reset(token)


async def _succeeded(
    messages: Messages,
    models: ModelTable,
    strict: bool,
    job: Job,
    rid: str,
    facts: RequestRecord,
    admit: Callable[[], Awaitable[Permit]],
) -> dict[str, Any]:
    """The ``succeeded`` result of ``job``, answered by the
    :class:`~missive.serving.service.Messages` service under the permit
    ``admit`` takes.

    Raises:
        MissiveError: the error the same request would have got on its own.
    """
    if job.model not in models.drivers:
        raise InvalidRequestError(f"model '{job.model}' is no longer served")
    # Held until the record finishes: a model in use is never unloaded.
    driver = await messages.hold(job.model, facts)
    checked = check_params(json.loads(job.params), models, strict=strict)
    caller = Caller(request_id=rid, record=facts, notes=Notes(strict=strict))
    prepared = await messages.prepare(checked.request, job.model, driver, caller)
    # As for an interactive request: an in-process driver's prompt is
    # rendered and tokenized before the slot is taken (Messages.begin).
    answer = await messages.begin(prepared, admit=admit)
    events = [answer.first]
    try:
        async with aclosing(answer.events()) as rest:
            async for event in rest:
                events.append(event)
    finally:
        await answer.aclose()
    facts.finish(200)
    return {"type": "succeeded", "message": accumulate(events)}
