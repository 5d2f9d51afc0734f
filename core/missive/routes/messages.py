"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Stream or not is decided by the body's ``stream`` field alone (Claude Code
sends ``accept: application/json`` for streams too). Both paths run the same
:class:`~missive.pipeline.MessageStream`; errors before the stream starts are
HTTP errors, errors after it are an SSE ``error`` event with no
``message_stop`` after it (contract section 4).

A message holds one of its model's slots (:mod:`missive.admission`) until
the answer ends, whether it completes, fails, or its client goes away; a full
queue is a 529 before anything is sent. The slot is taken before a remote
driver is called (the backend gets nothing while the request waits), and
after an in-process driver's first event (its prompt is rendered and
tokenized outside the slot; it starts no model work before its own permit).
``count_tokens`` takes no slot.

When the server shuts down (:mod:`missive.shutdown`), a message still running
at the end of the grace ends with an SSE ``error`` event (``overloaded_error``)
after what it had sent, or, with nothing sent yet, a 529.
"""

from __future__ import annotations

import asyncio

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio
from quart import Quart, Response, g, has_request_context, request

from ..admission import Slot
from ..capabilities import check_request
from ..context.fallbacks import TRIGGERS, Attempt, attempts
from ..context.prepare import context_extras, count_tokens_body, prepare_in_context
from ..context.response import Answer, finish_stream
from ..config import ServerConfig
from ..conversation import build_conversation, unrendered_media
from ..driver import Driver, GenerationRequest
from ..errors import ApiError, CapabilityError, MissiveError
from ..ids import message_id
from ..pipeline import MessageStream, accumulate
from ..record import CLIENT_CLOSED, CLIENT_GONE, RequestRecord
from ..schema.request import CountTokensRequest, MessagesRequest
from ..shutdown import Drain
from ..sse import PING, frame, paced_batches
from ..tools.definitions import offered_tools, tool_choice_of
from ..tools.deferred import expand_references
from ..tools.server_runner import server_first
from ..session import session_of
from ..tools.history import check_tool_history
from ..thinking.between_tools import as_text as between_tools_text
from ..thinking.plan import plan_thinking
from ..thinking.replay import answer_position, check_replayed_thinking
from ..threads.keeper import Keeper, keeper
from ..tools.server import server_block_paths
from ..keys.access import admit
from .common import (
    admission, authenticate, drain, media_pipeline, note_ignored, read_request, record, resolve_for, routed_model,
    server_tools, signer, state, with_default_fallbacks,
)

log = logging.getLogger("missive.messages")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def prepare_generation(req: CountTokensRequest, model_id: str, driver: Driver) -> GenerationRequest:
    """Everything the core checks and converts before a driver sees the request
    (also for each request of a message batch, :mod:`missive.batches.execute`):
    conversation management first (compaction, context editing:
    :mod:`missive.context.prepare`), then :func:`_prepare`. Runs in an app
    context whose ``g`` holds the request's id and record.

    Raises:
        InvalidRequestError: tool history pairing, tool_choice naming an
            unknown tool, duplicate tool names, strict-mode ignored tools,
            compaction blocks the API refuses.
        CapabilityError: the driver lacks something the request needs.
        MediaError: an image or document block that cannot be used.
    """
    return await prepare_in_context(req, model_id, driver, _prepare, signer=signer(), note_ignored=note_ignored)


async def _prepare(
    req: CountTokensRequest, model_id: str, driver: Driver, cleared_thinking: frozenset[int] = frozenset()
) -> GenerationRequest:
    """The core's checks and conversions (see :func:`prepare_generation`);
    ``cleared_thinking``: messages whose thinking context editing left out."""
    # A model that cannot call tools is not offered server tools (reported as
    # ignored), unless tool_choice forces a call: check_request refuses that.
    can_call = bool(driver.capabilities.tool_choice)
    forced = req.tool_choice is not None and req.tool_choice.type in ("any", "tool")
    tools, skipped = offered_tools(req, server_tools=can_call or forced)
    choice = tool_choice_of(req, tools)
    check_tool_history(req)
    note_ignored(skipped if can_call else [*skipped, *server_block_paths(req)])
    media = media_pipeline()
    caps = driver.capabilities
    server_call, tools, choice = server_first(req, caps, tools, choice, server_tools())
    check_request(
        req, caps, model=model_id, driver=driver.name, tools=tools, tool_choice=choice,
        image_fallback=media.image_fallback is not None,
    )
    replay = check_replayed_thinking(req.messages, signer())
    if replay.dropped:
        log.info("thinking left out of the prompt: %s", ", ".join(replay.dropped))
        g.dropped_thinking = list(replay.dropped)
    kept = {at: text for at, text in replay.kept.items() if at[0] not in cleared_thinking}
    conversation = build_conversation(req, kept, server_tools=can_call)
    expand_references(conversation, tools)
    thinking = plan_thinking(req.thinking, req.output_config)
    if thinking.between_tools:
        between_tools_text(conversation)  # replayed progress updates are text the model wrote
    note_ignored(unrendered_media(req))
    if conversation.prefill is not None and req.messages[-1].role == "assistant":
        # The answer continues the prefill's text; reasoning before it is not rendered.
        last = len(req.messages) - 1
        before_prefill = [f"messages.{m}.content.{b} (thinking before a prefill)" for m, b in replay.kept if m == last]
        if before_prefill:
            g.dropped_thinking = [*getattr(g, "dropped_thinking", []), *sorted(before_prefill)]
    if req.media_types():
        prepared = await media.prepare(
            req, input_media=caps.input_media, max_edge=caps.image_max_edge, model=model_id
        )
        note_ignored(prepared.ignored)
        conversation.replace_blocks(prepared.replacements)
        record().media.update(prepared.processed)
    max_tokens = req.max_tokens or 0
    cap = driver.entry.max_output_tokens
    if cap is not None:
        max_tokens = min(max_tokens, cap)  # clamped like the context: ends with max_tokens
    return GenerationRequest(
        request_id=g.request_id,
        model=model_id,
        conversation=conversation,
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop_sequences=tuple(req.stop_sequences or ()),
        request=req,
        tools=tools,
        tool_choice=choice,
        thinking=thinking,
        thinking_position=answer_position(req.messages),
        server_call=server_call,
        session=session_of(req, request.headers if has_request_context() else None),
    )


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


async def _hold(model_id: str) -> Driver:
    """Hold ``model_id`` for this request (given back when its record
    finishes) and wait until it is loaded; its driver."""
    _, _, models = state()
    record().at_finish(models.use(model_id).release)
    return await models.ensure_loaded(model_id)


@dataclass(frozen=True)
class _StreamContext:
    """What a stream's body needs from its request, taken in the handler:
    the body runs after it, outside the request context."""

    server: ServerConfig
    facts: RequestRecord
    shutdown: Drain
    request_id: str
    keeper: Keeper


def _stream_context() -> _StreamContext:
    config, _, _ = state()
    return _StreamContext(config.server, record(), drain(), g.request_id, keeper())


async def _create_message() -> Response | dict[str, Any]:
    identity = authenticate()
    admit(identity)  # the key's limits: 429 before the body is read
    _, _, models = state()
    # A thread continue is rebuilt into the whole conversation before validation.
    req = await read_request(MessagesRequest, expand=keeper().expand)
    model_id = routed_model(req, resolve_for(identity, req.model), identity)
    facts = record()
    facts.model = model_id
    # The model, then its fallbacks (each one the key may use); the model's
    # own chain for a request that names none, with routing.default_fallbacks.
    req = with_default_fallbacks(req, model_id)
    chain = attempts(req, model_id, models, lambda requested: resolve_for(identity, requested))
    if req.stream and not models.loaded(model_id):
        # Loaded on demand: the stream starts now, with pings while it loads.
        # The task is created here, so it runs in this request's context.
        started = asyncio.ensure_future(_begin_chain(chain))
        return _sse_response(_after_load(started, _stream_context()))
    first, stream, slot = await _begin_chain(chain)
    if not req.stream:
        shutdown = drain()
        try:
            events = [first]
            kept = keeper()
            with shutdown.cut():
                async with aclosing(stream.events()) as answer:
                    async for event in answer:
                        facts.note(event)
                        kept.note(event)
                        events.append(event)
        finally:
            try:
                await stream.aclose()
            finally:
                slot.release()
        return accumulate(events)
    return _sse_response(_body(first, stream, slot, _stream_context()))


async def _begin_chain(chain: list[Attempt]) -> tuple[dict[str, Any], Answer, Slot]:
    """:func:`_begin` on the requested model, then on each ``fallbacks``
    entry in turn while the one before could not take the request (429,
    529: :data:`missive.context.fallbacks.TRIGGERS`); nothing has been sent
    then. The last model's error is the answer when every one fails.

    Raises:
        MissiveError: a refusal before anything is sent (400s, 529 queue full...).
    """
    for n, attempt in enumerate(chain):
        try:
            driver = await _hold(attempt.model_id)
            record().model = attempt.model_id
            return await _begin(attempt.request, attempt.model_id, driver, fallback=attempt.entry is not None)
        except TRIGGERS as exc:
            if n + 1 == len(chain):
                raise
            log.info("model %s cannot take the request (%s: %s); trying fallback %s",
                     attempt.model_id, exc.error_type, exc.message, chain[n + 1].request.model)
            # Named in the log line, counted in missive:fallbacks_total.
            record().fallbacks.append((attempt.model_id, chain[n + 1].model_id, exc.error_type))
    raise AssertionError("an empty fallback chain")  # attempts() always holds the requested model


async def _begin(
    req: MessagesRequest, model_id: str, driver: Driver, *, fallback: bool = False
) -> tuple[dict[str, Any], Answer, Slot]:
    """Check and convert the request, take a slot of its model and start
    the answer: its first event (``message_start``), the stream, the slot.
    ``fallback``: the model answers as a ``fallbacks`` entry (the answer
    says so in ``usage.iterations``).

    Raises:
        MissiveError: a refusal before anything is sent (400s, 529 queue full...).
    """
    facts = record()
    prepared = await prepare_generation(req, model_id, driver)
    gate = admission().gate(model_id, driver)

    async def admit() -> Slot:
        queued_at = time.monotonic()
        slot = await gate.admit()  # 529 when full; waits otherwise
        facts.queue_seconds = time.monotonic() - queued_at
        return slot

    stream = finish_stream(
        MessageStream(driver, prepared, message_id=message_id(), model=req.model, signer=signer(),
                      server_tools=server_tools()),
        context_extras(), signer(), fallback_model=req.model if fallback else None,
    )
    shutdown = drain()
    # Nothing is sent before the answer starts: at the end of a shutdown's
    # grace, a request still here is cancelled and answered 529.
    with shutdown.cut():
        if driver.capabilities.in_process:
            # An in-process driver renders and tokenizes the prompt before its
            # first event and starts no work on the model until its own permit:
            # tokenizing a huge prompt (a minute for 30 MB) then never holds a
            # slot that a small request waits for, and an oversized prompt is
            # refused without queueing.
            first = await stream.start()
            try:
                slot = await admit()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                raise
        else:
            slot = await admit()  # before the backend is sent anything
            try:
                first = await stream.start()
            except BaseException:
                slot.release()
                raise
    # Cache diagnostics go into message_start; a thread's answer is collected.
    keeper().start(req, model=model_id, system=prepared.conversation.system, first=first)
    facts.note(first)
    return first, stream, slot


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


async def _after_load(started: asyncio.Future[tuple[dict[str, Any], Answer, Slot]], ctx: _StreamContext) -> AsyncGenerator[bytes, None]:
    """A stream whose model is loaded on demand (``started``: the load, then
    :func:`_begin`): ``ping`` events every ``server.ping_interval`` seconds
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
            first, stream, slot = started.result()
        except Exception as exc:
            yield _error_frame(exc, ctx)
            return
        handed = True
        async with aclosing(_body(first, stream, slot, ctx)) as body:
            async for chunk in body:
                yield chunk
    finally:
        if not started.done():
            started.cancel()  # the waiter only: the load itself goes on
        elif not handed and not started.cancelled() and started.exception() is None:
            # Begun but never sent (the client left at that moment): end it.
            _, stream, slot = started.result()
            try:
                await stream.aclose()
            finally:
                slot.release()
        ctx.facts.finish(200, None if ctx.facts.completed else CLIENT_GONE)


async def _body(first: dict[str, Any], stream: Answer, slot: Slot, ctx: _StreamContext) -> AsyncGenerator[bytes, None]:
    """The SSE frames of a started answer.

    The slot is freed before the last frame is sent (the driver has ended
    by then: events() closes it before message_delta, and before raising),
    so a client that sends its next request as soon as it reads
    message_stop or the error finds the slot free.

    Quart closes this generator in the request's task (aclose()) when the
    client goes; ``paced_batches`` is closed here, in the same task, before the
    ``finally`` below: its pump task, which runs the driver's generator,
    has ended before stream.aclose() runs (two tasks never drive one
    generator, and the garbage collector finalizes none).
    """
    server, facts, shutdown = ctx.server, ctx.facts, ctx.shutdown
    try:
        yield frame(first)
        try:
            batches = paced_batches(
                stream.events(), ping_interval=server.ping_interval, delta_interval=server.delta_interval,
                stop=shutdown.expired, stop_error=shutdown.ended_error,
            )
            async with aclosing(batches):
                async for batch in batches:
                    frames = []
                    for event in batch:
                        if event["type"] == "message_stop":
                            slot.release()
                        facts.note(event)
                        ctx.keeper.note(event)  # a thread is held before message_stop leaves
                        frames.append(frame(event))
                    yield b"".join(frames)  # one write for what was ready together
        except Exception as exc:
            slot.release()
            yield _error_frame(exc, ctx)
    finally:
        # Ended, failed or client gone: the driver stops (if the pump
        # did not stop it), then the slot is freed (a body never
        # iterated frees it through Slot.__del__).
        try:
            await stream.aclose()
        finally:
            slot.release()
            facts.finish(200, None if facts.completed else CLIENT_GONE)


async def count_tokens() -> dict[str, Any]:
    identity = authenticate()
    req = await read_request(CountTokensRequest)
    model_id = routed_model(req, resolve_for(identity, req.model), identity)
    record().model = model_id
    driver = await _hold(model_id)
    if driver.capabilities.count_tokens == "none":
        raise CapabilityError(
            capability="count_tokens", model=model_id, driver=driver.name, supported="messages only"
        )
    tokens = await driver.count_tokens(await prepare_generation(req, model_id, driver))
    return count_tokens_body(tokens, req)


def register(app: Quart, prefix: str) -> None:
    app.add_url_rule(f"{prefix}/messages", f"{prefix}-messages", create_message, methods=["POST"])
    app.add_url_rule(f"{prefix}/messages/count_tokens", f"{prefix}-count-tokens", count_tokens, methods=["POST"])
