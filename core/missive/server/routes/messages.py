"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: HTTP in,
HTTP out; the answer itself comes from the
:class:`~missive.serving.service.Messages` service.

Stream or not is decided by the body's ``stream`` field alone (Claude Code
sends ``accept: application/json`` for streams too). Both are the same
:class:`~missive.serving.answer.Answer`: errors before it starts are HTTP
errors, errors after it are an SSE ``error`` event with no ``message_stop``
after it (contract section 4); a non-streaming answer is the fold of its
events (:func:`~missive.messages.stream.accumulate`).

The answer holds one of its model's admission slots until it ends
(:mod:`missive.serving.answer`); a full queue is a 529 before anything is
sent. ``count_tokens`` takes no slot.

When the server shuts down (:mod:`missive.server.shutdown`), a message still running
at the end of the grace ends with an SSE ``error`` event (``overloaded_error``)
after what it had sent, or, with nothing sent yet, a 529.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

from quart import Quart, Response, g

from ...config import ServerConfig
from ...messages.stream import accumulate
from ...protocol.errors import ApiError, MissiveError
from ...protocol.schema.request import CountTokensRequest, MessagesRequest
from ...protocol.sse import PING, frame, paced_batches
from ...serving.answer import Answer
from ...serving.drain import Drain
from ...serving.record import CLIENT_CLOSED, CLIENT_GONE, RequestRecord
from ...threads.keeper import Keeper
from ..access import admit, current_identity
from ..services import services
from .common import (
    authenticate,
    caller_of,
    config_kernel_models,
    read_request,
    record,
    report_notes,
)

log = logging.getLogger("missive.messages")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def create_message() -> Response | dict[str, Any]:
    """``POST /v1/messages`` (see :func:`_create_message`); a client that
    leaves before a response was sent (queued, or during a non-streaming
    answer) is recorded as it leaves (499 ``client_disconnected``), not when
    the garbage collector drops the record."""
    try:
        return await _create_message()
    except asyncio.CancelledError:
        facts = record()
        if not facts.finished:
            facts.finish(CLIENT_CLOSED, CLIENT_GONE)
        raise


def keeper() -> Keeper:
    """This request's :class:`Keeper`, made on first use; it is closed when
    the request's record finishes."""
    existing = getattr(g, "keeper", None)
    if existing is not None:
        return cast(Keeper, existing)
    found = services()
    made = Keeper(found.responses, found.config.threads, current_identity().name)
    g.keeper = made
    g.record.at_finish(made.close)
    return made


@dataclass(frozen=True)
class _StreamContext:
    """What a stream's body needs from its request, taken in the handler:
    the body runs after it, outside the request context."""

    server: ServerConfig
    facts: RequestRecord
    shutdown: Drain
    request_id: str


def _stream_context() -> _StreamContext:
    config, _, _ = config_kernel_models()
    return _StreamContext(config.server, record(), services().drain, g.request_id)


async def _create_message() -> Response | dict[str, Any]:
    identity = authenticate()
    admit(identity)  # the key's limits: 429 before the body is read
    found = services()
    facts = record()
    kept = keeper()
    # A thread continue is rebuilt into the whole conversation before validation.
    req = await read_request(MessagesRequest, expand=kept.expand)
    facts.requested_model = req.model
    model_id, facts.rule = found.choice.route(req, identity.may_use, facts.agent)
    facts.model = model_id
    # The model, then its fallbacks (each one the key may use); the model's
    # own chain for a request that names none, with routing.default_fallbacks.
    chain = found.choice.chain(req, model_id, identity.may_use)
    caller = caller_of(facts)

    async def begin() -> Answer:
        # Nothing is sent before the answer starts: at the end of a shutdown's
        # grace, a request still here is cancelled and answered 529.
        with found.drain.cut():
            answer = await found.messages.answer(chain, caller)
        # Cache diagnostics go into message_start; a thread's answer is collected.
        prepared = answer.prepared
        asked = prepared.request  # the fallback entry's request when a fallback answers
        assert isinstance(asked, MessagesRequest)
        try:
            kept.start(
                asked,
                model=prepared.model_id,
                system=prepared.generation.conversation.system,
                first=answer.first,
            )
        except BaseException:
            await answer.aclose()
            raise
        answer.watch(kept.note)
        return answer

    if req.stream and not found.models.loaded(model_id):
        # Loaded on demand: the stream starts now, with pings while it loads.
        # The task is created here, so it runs in this request's context.
        return _sse_response(_after_load(asyncio.ensure_future(begin()), _stream_context()))
    try:
        answer = await begin()
    finally:
        report_notes(caller.notes)
    if req.stream:
        return _sse_response(_body(answer, _stream_context()))
    events = [answer.first]
    try:
        with found.drain.cut():
            async with aclosing(answer.events()) as rest:
                async for event in rest:
                    events.append(event)
    finally:
        await answer.aclose()
    return accumulate(events)


def _sse_response(body: AsyncIterator[bytes]) -> Response:
    record().stream = True  # finished by the body, when it ends
    response = Response(body, content_type="text/event-stream; charset=utf-8", headers=SSE_HEADERS)
    response.timeout = None
    return response


def _error_frame(exc: BaseException, ctx: _StreamContext) -> bytes:
    """The SSE ``error`` event for ``exc`` (noted in the record, logged)."""
    if isinstance(exc, MissiveError):
        ctx.facts.error_type = exc.error_type
        log.warning("stream ended by error: %s: %s", exc.error_type, exc.message)
        return frame(exc.envelope(ctx.request_id))
    ctx.facts.error_type = ApiError.error_type
    log.error("stream failed", exc_info=exc)
    return frame(ApiError("internal server error; the server log has the details").envelope(ctx.request_id))


async def _after_load(started: asyncio.Future[Answer], ctx: _StreamContext) -> AsyncGenerator[bytes, None]:
    """A stream whose model is loaded on demand (``started``: the load, then
    the answer begun): ``ping`` events every ``server.ping_interval`` seconds
    while it runs, then the answer as :func:`_body` sends it. A failure to
    load or a refusal (a 400, a full queue) is an SSE ``error`` event: the
    stream has started. A client that leaves does not stop the load (the
    next request finds the model loaded)."""
    handed = False  # to _body, which ends the answer whatever happens
    try:
        while not started.done():
            await asyncio.wait({started}, timeout=ctx.server.ping_interval)
            if not started.done():
                yield frame(PING)
        try:
            answer = started.result()
        except Exception as exc:
            yield _error_frame(exc, ctx)
            return
        handed = True
        async with aclosing(_body(answer, ctx)) as body:
            async for chunk in body:
                yield chunk
    finally:
        if not started.done():
            started.cancel()  # the waiter only: the load itself goes on
        elif not handed and not started.cancelled() and started.exception() is None:
            await started.result().aclose()  # begun but never sent (the client left at that moment)
        ctx.facts.finish(200, None if ctx.facts.completed else CLIENT_GONE)


async def _body(answer: Answer, ctx: _StreamContext) -> AsyncGenerator[bytes, None]:
    """The SSE frames of a started answer.

    Quart closes this generator in the request's task (aclose()) when the
    client goes; ``paced_batches`` is closed here, in the same task, before the
    ``finally`` below: its pump task, which runs the answer's events, has
    ended before answer.aclose() runs (two tasks never drive one
    generator, and the garbage collector finalizes none).
    """
    server, facts, shutdown = ctx.server, ctx.facts, ctx.shutdown
    try:
        yield frame(answer.first)
        try:
            batches = paced_batches(
                answer.events(),
                ping_interval=server.ping_interval,
                delta_interval=server.delta_interval,
                stop=shutdown.expired,
                stop_error=shutdown.ended_error,
            )
            async with aclosing(batches):
                async for batch in batches:
                    yield b"".join(frame(event) for event in batch)  # one write for what was ready together
        except Exception as exc:
            yield _error_frame(exc, ctx)
    finally:
        try:
            await answer.aclose()  # ended, failed or client gone: the driver stops, the slot is freed
        finally:
            facts.finish(200, None if facts.completed else CLIENT_GONE)


async def count_tokens() -> dict[str, Any]:
    identity = authenticate()
    req = await read_request(CountTokensRequest)
    facts = record()
    facts.requested_model = req.model
    model_id, facts.rule = services().choice.route(req, identity.may_use, facts.agent)
    facts.model = model_id
    caller = caller_of(facts)
    try:
        return await services().messages.count_tokens(req, model_id, caller)
    finally:
        report_notes(caller.notes)


def register(app: Quart, prefix: str) -> None:
    app.add_url_rule(f"{prefix}/messages", f"{prefix}-messages", create_message, methods=["POST"])
    app.add_url_rule(
        f"{prefix}/messages/count_tokens", f"{prefix}-count-tokens", count_tokens, methods=["POST"]
    )
