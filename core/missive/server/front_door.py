"""Front doors: other HTTP APIs (OpenAI's Chat Completions...) served on the
same app, models, keys and limits as the Messages API.

A front door is a plugin (``register_front_doors``, docs/hooks.md): its
factory gets the app's :class:`Gateway` and returns a Quart blueprint, which
:func:`mount_front_doors` mounts under ``/v1`` and ``/v1/v1``. The blueprint
translates its wire format to and from a Messages request body and the
answer's events; everything between (validation of that body, the model's
choice, fallbacks, preparation, admission, the prompt cache, the key's
limits, the request's record) is the same path ``POST /v1/messages`` takes
(:mod:`missive.server.routes.messages`), through the
:class:`~missive.serving.service.Messages` service.

The gateway's methods run inside the blueprint's request (they read its
headers and body, and fill in its record); what the door sends back, errors
included, is its own format: :meth:`Gateway.error` turns whatever was raised
into the core's :class:`~missive.protocol.errors.MissiveError`, status and
type, for the door to render.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from quart import Blueprint, Quart, Response, g, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from ..kernel.specs import load_object
from ..messages.stream import accumulate
from ..protocol.errors import ApiError, InvalidRequestError, MissiveError, RequestTooLargeError
from ..protocol.schema.request import CountTokensRequest, MessagesRequest, WhitespaceStopsRequest
from ..protocol.sse import paced_batches
from ..protocol.validation import parse_json, validate_body
from ..serving.answer import Answer, Event
from ..serving.record import CLIENT_GONE
from . import access
from .routes.common import caller_of, read_raw_body, record, report_notes
from .services import Services

__all__ = ["Gateway", "ModelListing", "EventBatches", "mount_front_doors", "claimed_error", "GATEWAY"]

#: Where the app keeps its :class:`Gateway` (``app.extensions``).
GATEWAY = "missive.gateway"

log = logging.getLogger("missive.front_door")


@dataclass(frozen=True)
class ModelListing:
    """A model a key may use, as a front door lists it.

    Attributes:
        id: the id clients send (a configured id, or a literal alias).
        model_id: the configured model it reaches.
        created: its creation time, Unix seconds.
        display_name: its display name.
    """

    id: str
    model_id: str
    created: int
    display_name: str


@dataclass(frozen=True)
class _Claim:
    prefixes: tuple[str, ...]
    render: Callable[[MissiveError], Response]
    clients: Callable[[], bool] | None


class Gateway:
    """The serving object a front door gets (see the module doc). One per app."""

    def __init__(self, found: Services, mounts: tuple[str, ...] = ()) -> None:
        self._found = found
        self._mounts = mounts
        self._claims: list[_Claim] = []

    def claim(
        self,
        prefixes: tuple[str, ...],
        render: Callable[[MissiveError], Response],
        *,
        clients: Callable[[], bool] | None = None,
    ) -> None:
        """Have the errors the app raises itself, outside any view (a path
        no route serves: 404; a method its route does not take: 405), sent
        by ``render`` (the door's envelope) for requests under ``prefixes``
        (relative to ``/v1``, as the blueprint's rules: ``"/responses"``
        claims ``/v1/responses`` and what is below it) and, for a path no
        route serves under any method, for requests ``clients()`` says come
        from the door's clients (their SDK's headers). ``render`` runs in
        the request and gets the core's error, its status set."""
        self._claims.append(_Claim(tuple(prefixes), render, clients))

    def unrouted(self, error: MissiveError) -> Response | None:
        """The claiming door's answer to ``error``, raised by the app for
        this request outside any view, or None (the core's envelope)."""
        tails = [request.path[len(m) :] for m in self._mounts if request.path.startswith(m + "/")]
        unknown = request.url_rule is None and not isinstance(request.routing_exception, MethodNotAllowed)
        for claim in self._claims:
            owned = any(t == p or t.startswith(p.rstrip("/") + "/") for t in tails for p in claim.prefixes)
            if owned or (unknown and claim.clients is not None and claim.clients()):
                return claim.render(self._noted(error, getattr(g, "record", None)))
        return None

    @property
    def request_id(self) -> str:
        """This request's id (``req_...``), also sent as the ``request-id`` header."""
        return str(g.request_id)

    def admit(self) -> None:
        """Authenticate the request and count it against its key's limits,
        as ``POST /v1/messages`` does, before its body is read.

        Raises:
            AuthenticationError: 401.
            RateLimited: 429, with the key's limit headers (:meth:`rate_limits`).
        """
        access.admit(access.authenticate())

    @property
    def key_name(self) -> str:
        """The name of this request's API key (``""`` on a server without
        keys): what a door keys the data it keeps per caller by, as the
        core keeps message threads, so that one key never sees another's."""
        return access.current_identity().name

    @property
    def server_tools(self) -> frozenset[str]:
        """The server tools this app runs, as the operator turned them on
        (``[server_tools]``: ``web_search`` with a search provider,
        ``web_fetch``): a door offers its own API's equivalent as the
        Messages server tool only where its calls would run, rather than
        answered ``unavailable``."""
        tools = self._found.config.server_tools
        turned_on = {"web_search": tools.web_search is not None, "web_fetch": tools.web_fetch}
        return frozenset(name for name, on in turned_on.items() if on)

    def rate_limits(self) -> dict[str, str]:
        """The key's ``anthropic-ratelimit-*`` headers for this request (empty
        for a key without limits); the app sends them as they are, a door
        may send them again under its own names."""
        return dict(getattr(g, "rate_limit_headers", None) or {})

    async def read_json(self) -> Any:
        """The request's body, parsed.

        Raises:
            InvalidRequestError: not JSON.
            RequestTooLargeError: over ``server.max_body_bytes``.
        """
        return parse_json(await read_raw_body())

    def ignore(self, items: list[str]) -> None:
        """Report request parts the door does not act on (the
        ``missive-ignored`` header and the log), as the core reports its own.

        Raises:
            InvalidRequestError: in strict mode (``server.strict``).
        """
        if not items:
            return
        if self._found.config.server.strict:
            raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(items))
        log.info("ignored: %s", ", ".join(items))
        g.ignored = [*getattr(g, "ignored", []), *items]

    async def answer(self, body: dict[str, Any], *, whitespace_stops: bool = False) -> Answer:
        """Begin the answer to ``body``, a Messages API request body, on the
        model it names (its fallbacks, the routing rules), as
        ``POST /v1/messages`` does; nothing is sent yet. The caller ends it:
        :meth:`collect`, :meth:`stream`, or ``Answer.aclose()``.
        ``whitespace_stops``: a stop sequence may be whitespace only (``"\\n"``,
        which OpenAI's APIs accept and the Messages API refuses;
        :class:`~missive.protocol.schema.request.WhitespaceStopsRequest`).

        Raises:
            MissiveError: what ``POST /v1/messages`` answers before its
                answer starts (400 with the body's field path, 404 model, 529...).
        """
        found = self._found
        req = validate_body(WhitespaceStopsRequest if whitespace_stops else MessagesRequest, body)
        facts = record()
        identity = access.current_identity()
        facts.requested_model = req.model
        model_id, facts.rule = found.choice.route(req, identity.may_use, facts.agent)
        facts.model = model_id
        chain = found.choice.chain(req, model_id, identity.may_use)
        caller = caller_of(facts)
        try:
            with found.drain.cut():
                return await found.messages.answer(chain, caller)
        finally:
            report_notes(caller.notes)

    async def collect(self, answer: Answer) -> dict[str, Any]:
        """The whole answer as a Messages API ``Message`` (the fold of its events).

        Raises:
            MissiveError: a failure after the answer started.
        """
        events = [answer.first]
        try:
            with self._found.drain.cut():
                async with aclosing(answer.events()) as rest:
                    async for event in rest:
                        events.append(event)
        finally:
            await answer.aclose()
        return accumulate(events)

    def stream(self, answer: Answer) -> EventBatches:
        """The answer's events after ``answer.first``, in batches of those
        ready together, with ``{"type": "ping"}`` events after
        ``server.ping_interval`` seconds of silence; called in the request,
        iterated in the streaming response's body. The answer is ended and
        the request's record finished when the batches end or are closed
        (even unread: a client gone before the body started).

        Iterating raises a :class:`MissiveError` after the events that
        preceded a failure (the door sends its own error event).
        """
        facts = record()
        facts.stream = True  # finished by the body, when it ends
        server, drain = self._found.config.server, self._found.drain

        async def batches() -> AsyncGenerator[list[Event], None]:
            try:
                paced = paced_batches(
                    answer.events(),
                    ping_interval=server.ping_interval,
                    delta_interval=server.delta_interval,
                    stop=drain.expired,
                    stop_error=drain.ended_error,
                )
                try:
                    async with aclosing(paced):
                        async for batch in paced:
                            yield batch
                except Exception as exc:
                    raise self._noted(exc, facts) from exc
            finally:
                await _end(answer, facts)

        return EventBatches(batches(), lambda: _end(answer, facts))

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's size of ``body`` (a Messages ``count_tokens`` body) on
        the model it names, as ``POST /v1/messages/count_tokens`` counts it."""
        found = self._found
        req = validate_body(CountTokensRequest, body)
        facts = record()
        facts.requested_model = req.model
        identity = access.current_identity()
        model_id, facts.rule = found.choice.route(req, identity.may_use, facts.agent)
        facts.model = model_id
        caller = caller_of(facts)
        try:
            counted = await found.messages.count_tokens(req, model_id, caller)
        finally:
            report_notes(caller.notes)
        return int(counted["input_tokens"])

    def models(self) -> list[ModelListing]:
        """The models this request's key may use: every configured model,
        then the literal aliases (as ``GET /v1/models`` lists them).

        Raises:
            AuthenticationError: 401.
        """
        identity = access.authenticate()
        drivers = self._found.models.drivers
        listed: dict[str, str] = {model_id: model_id for model_id in drivers}
        for model_id, driver in drivers.items():
            for alias in driver.entry.aliases:
                if not any(c in alias for c in "*?[") and alias not in listed:
                    listed[alias] = model_id
        found = []
        for shown, model_id in listed.items():
            if identity.may_use(model_id):
                entry = drivers[model_id].entry
                found.append(
                    ModelListing(
                        shown, model_id, int(entry.created_at.timestamp()), entry.display_name or model_id
                    )
                )
        return found

    def model(self, requested: str) -> ModelListing:
        """The model a request naming ``requested`` reaches, resolved as a
        request's ``model`` is (a configured id, an alias, a glob alias:
        ``claude-*``), shown as ``requested`` (as ``GET /v1/models/{id}``
        answers it).

        Raises:
            AuthenticationError: 401.
            ModelNotFoundError: 404, no served model matches, or the key may not use it.
        """
        identity = access.authenticate()
        model_id = self._found.choice.resolve(requested, identity.may_use)
        entry = self._found.models.drivers[model_id].entry
        created = int(entry.created_at.timestamp())
        return ModelListing(requested, model_id, created, entry.display_name or model_id)

    def error(self, exc: BaseException) -> MissiveError:
        """``exc`` as the core's error (status, type, message), noted in the
        request's record and logged as the app logs its own: an HTTP error
        of Quart's (413 body too large, 405) keeps its status; anything
        else unexpected is a logged 500."""
        return self._noted(exc, getattr(g, "record", None))

    @staticmethod
    def _noted(exc: BaseException, facts: Any) -> MissiveError:
        if isinstance(exc, MissiveError):
            error = exc
            if exc.status >= 500 and exc.error_type != "overloaded_error":
                log.error("%s: %s", exc.error_type, exc.message)
        elif isinstance(exc, HTTPException):
            status = exc.code or 500
            cls: type[MissiveError] = RequestTooLargeError if status == 413 else InvalidRequestError
            error = (cls if status < 500 else ApiError)(exc.description or exc.name)
            error.status = status  # type: ignore[misc]  # the instance keeps Quart's status
        else:
            log.error("unhandled error", exc_info=exc)
            error = ApiError("internal server error; the server log has the details")
        if facts is not None and facts.error_type is None:
            facts.error_type = error.error_type
        return error


async def _end(answer: Answer, facts: Any) -> None:
    try:
        await answer.aclose()  # ended, failed or client gone: the driver stops, the slot is freed
    finally:
        facts.finish(200, None if facts.completed else CLIENT_GONE)


class EventBatches:
    """What :meth:`Gateway.stream` returns: an async iterator of event
    batches whose :meth:`aclose` ends the answer even when it was never
    iterated (a generator never started runs no ``finally``)."""

    def __init__(
        self, batches: AsyncGenerator[list[Event], None], end: Callable[[], Awaitable[None]]
    ) -> None:
        self._batches = batches
        self._end = end
        self._started = False

    def __aiter__(self) -> EventBatches:
        return self

    async def __anext__(self) -> list[Event]:
        self._started = True
        return await self._batches.__anext__()

    async def aclose(self) -> None:
        if self._started:
            await self._batches.aclose()
        else:
            await self._batches.aclose()  # marks it closed; its body never ran
            await self._end()


def mount_front_doors(app: Quart, found: Services, prefixes: tuple[str, ...]) -> list[str]:
    """Mount each registered front door's blueprint under each of ``prefixes``;
    the names of those mounted. A door whose factory fails is logged and
    left out, as a plugin failing in a registration hook is."""
    gateway = Gateway(found, prefixes)
    app.extensions[GATEWAY] = gateway
    mounted = []
    for name, spec in found.kernel.front_doors.items():
        try:
            blueprint = load_object(spec.factory)(gateway)
            if not isinstance(blueprint, Blueprint):
                raise TypeError(f"{spec.factory} returned {blueprint!r}, expected a quart.Blueprint")
        except Exception as exc:
            log.error("front door %s not mounted: %s: %s", name, type(exc).__name__, exc)
            continue
        for prefix in prefixes:
            app.register_blueprint(blueprint, url_prefix=prefix, name=f"{name}{prefix.replace('/', '-')}")
        mounted.append(name)
    return mounted


def claimed_error(app: Quart, error: MissiveError) -> Response | None:
    """A front door's answer to ``error``, raised by the app outside any
    view, for a request the door claims (:meth:`Gateway.claim`), or None."""
    gateway = app.extensions.get(GATEWAY)
    return gateway.unrouted(error) if isinstance(gateway, Gateway) else None
