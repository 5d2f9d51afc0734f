"""The front door's blueprint: ``POST /chat/completions``, ``POST /responses``
with ``GET``/``DELETE /responses/{id}`` and ``GET /responses/{id}/input_items``
(mounted under ``/v1``) and, for
OpenAI clients, ``GET /models`` and ``GET /models/{id}`` in OpenAI's shape.

Each request goes through the :class:`~missive.api.Gateway`: its key and
limits before the body is read, the body translated
(:mod:`.chat_request`) into the Messages request the core answers as
``POST /v1/messages`` would, the answer folded (:func:`.chat_stream.completion_of`)
or streamed chunk by chunk (:class:`.chat_stream.ChunkConverter`, SSE
``data:`` lines, ``data: [DONE]`` at the end, ``: ping`` comments on silence).
A response (:mod:`.responses_request`, :mod:`.responses_stream`) is folded
or streamed as ``event:``/``data:`` pairs, and kept for its key unless the
request said ``store: false`` (:mod:`.responses_store`), a stream whose
client went included (``incomplete``, as far as it got); a background one
runs in a task (:mod:`.responses_background`), its events kept to be
streamed again (``GET /responses/{id}?stream=true``, :mod:`.responses_replay`).
Every error on these routes is OpenAI's envelope (:mod:`.errors`); one
after the stream started is a last ``data: {"error": ...}`` event, as
OpenAI sends it, with no ``[DONE]`` after it.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any, Protocol

from quart import Blueprint, Response, g, request
from werkzeug.exceptions import MethodNotAllowed

from missive.api import Gateway, MissiveError, ModelListing, NotFoundError, json_dumps

from .calls import RawArguments
from .chat_request import translate
from .chat_stream import REASONING_TOKENS, ChunkConverter, completion_of
from .errors import OpenAIRequestError, envelope, status_of
from .responses_background import Background
from .responses_listing import listed_items, page_of
from .responses_replay import EventLog
from .responses_request import translate as translate_responses
from .responses_store import FINISHED, ResponseStore, Stored, continued
from .responses_stream import CLIENT_GONE, ResponseConverter, ResponseShape, assistant_turn, response_of

__all__ = ["blueprint", "MODELS_PATHS"]

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
#: ``GET`` paths answered in OpenAI's shape for OpenAI clients (:func:`_is_openai_client`):
#: the listing, and one model (API reference, "Models": ``GET /v1/models/{model}``
#: answers ``{"id", "object": "model", "created", "owned_by"}``).
MODELS_PATHS = ("/v1/models", "/v1/v1/models")
_ONE_MODEL = re.compile(r"^/v1(?:/v1)?/models/(?P<id>.+)$")
#: The key's limits, under OpenAI's header names (API reference, "Rate limits").
_LIMIT_HEADERS = {"requests": "requests", "tokens": "tokens"}


def _data(obj: Any) -> bytes:
    return b"data: " + json_dumps(obj) + b"\n\n"


def _event(event: dict[str, Any]) -> bytes:
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + json_dumps(event) + b"\n\n"


class Answer(Protocol):
    """What the door reads of the gateway's answer besides its events."""

    @property
    def thinking_tokens(self) -> int: ...


def _counted(event: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """``event``; a ``message_delta`` with the answer's reasoning tokens in
    its usage (:data:`.chat_stream.REASONING_TOKENS`), for the converters."""
    if event["type"] != "message_delta":
        return event
    return {**event, "usage": {**(event.get("usage") or {}), REASONING_TOKENS: answer.thinking_tokens}}


def _collected(message: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """The folded ``message`` with the answer's reasoning tokens in its usage."""
    return {**message, "usage": {**(message.get("usage") or {}), REASONING_TOKENS: answer.thinking_tokens}}


def _replayed(log: EventLog, after: int) -> Response:
    """The SSE response of a background response's events after ``after``
    (:mod:`.responses_replay`): a client that leaves stops only its stream."""

    async def body() -> AsyncGenerator[bytes, None]:
        async for batch in log.follow(after):
            yield b"".join(_event(e) for e in batch) if batch else b": ping\n\n"

    response = Response(body(), content_type="text/event-stream; charset=utf-8", headers=SSE_HEADERS)
    response.timeout = None
    return response


def _query_flag(name: str) -> bool:
    """The boolean query parameter ``name`` (``true``/``false``, absent: false).

    Raises:
        OpenAIRequestError: another value, naming it.
    """
    value = request.args.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise OpenAIRequestError(f"{name}: expected true or false; got {value!r}", param=name)
    return value in ("true", "1")


def _starting_after() -> int:
    """``starting_after``: the sequence number the stream starts after (absent: -1, from the start).

    Raises:
        OpenAIRequestError: not an integer, naming it.
    """
    value = request.args.get("starting_after")
    if value is None:
        return -1
    try:
        return int(value)
    except ValueError:
        raise OpenAIRequestError(
            f"starting_after: expected an integer; got {value!r}", param="starting_after"
        ) from None


def _error_response(error: MissiveError) -> Response:
    response = Response(json_dumps(envelope(error)), status=status_of(error), content_type="application/json")
    if error.retry_after is not None:
        response.headers["retry-after"] = str(min(60, max(0, int(error.retry_after))))
    return response


def _openai_limits(headers: dict[str, str]) -> dict[str, str]:
    """``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`` as
    ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (the reset as
    seconds from now, ``"12s"``, as OpenAI writes durations)."""
    out: dict[str, str] = {}
    for kind in _LIMIT_HEADERS:
        for part in ("limit", "remaining", "reset"):
            value = headers.get(f"anthropic-ratelimit-{kind}-{part}")
            if value is None:
                continue
            if part == "reset":
                try:
                    at = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z").timestamp()
                except ValueError:
                    continue
                value = f"{max(0, round(at - time.time()))}s"
            out[f"x-ratelimit-{part}-{kind}"] = value
    return out


def _model_not_found(model_id: str) -> OpenAIRequestError:
    """OpenAI's 404 for a model it does not serve (``code: "model_not_found"``,
    ``param: "model"``; the SDK raises ``NotFoundError``)."""
    error = OpenAIRequestError(
        f"The model '{model_id}' does not exist", param="model", code="model_not_found"
    )
    error.status = 404  # type: ignore[misc]  # OpenAI's status for it, in its invalid_request_error
    return error


def _model(listed: ModelListing) -> dict[str, Any]:
    """OpenAI's model object (API reference, "Models": ``id``, ``object``,
    ``created``, ``owned_by``)."""
    return {"id": listed.id, "object": "model", "created": listed.created, "owned_by": "missive"}


def _is_openai_client() -> bool:
    """An OpenAI client asks: an OpenAI SDK's ``user-agent`` (``OpenAI/Python
    2.8.1``, ``OpenAI/JS 5.0.0``), or a bearer token (every OpenAI SDK sends
    its API key as one) with no ``x-api-key`` and no ``anthropic-version``
    header (every Anthropic SDK and Claude Code send one)."""
    if request.headers.get("user-agent", "").startswith("OpenAI/"):
        return True
    headers = request.headers
    bearer = headers.get("authorization", "").lower().startswith("bearer ")
    return bearer and "anthropic-version" not in headers and "x-api-key" not in headers


#: What a 404 on an unknown path tells an OpenAI client this server serves.
SERVED = (
    "this server serves OpenAI's Chat Completions (POST /v1/chat/completions), Responses "
    "(POST /v1/responses; GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items, "
    "POST /v1/responses/{id}/cancel) and Models (GET /v1/models, GET /v1/models/{id}) endpoints, "
    "and Anthropic's Messages API (POST /v1/messages)"
)


def _unrouted(error: MissiveError) -> Response:
    """OpenAI's envelope for an error the app raised outside this door's
    views on a path or client the door claims (``Gateway.claim``): a
    method its route does not take (405), a path no route serves (404,
    saying which endpoints are served, as OpenAI's own "Invalid URL (POST
    /v1/...)" does not: ``/v1/completions``, ``/v1/embeddings``... are not)."""
    if isinstance(error, NotFoundError):
        error = NotFoundError(f"Invalid URL ({request.method} {request.path}): {SERVED}.")
    g.openai_door = True
    return _error_response(error)


def blueprint(gateway: Gateway) -> Blueprint:
    """The blueprint of this front door (``FrontDoorSpec.factory``)."""
    bp = Blueprint("openai", __name__)
    gateway.claim(("/chat/completions", "/responses"), _unrouted, clients=_is_openai_client)

    @bp.errorhandler(Exception)
    async def _error(exc: Exception) -> Response:
        return _error_response(gateway.error(exc))

    @bp.after_request
    async def _limits(response: Response) -> Response:
        response.headers.update(_openai_limits(gateway.rate_limits()))
        g.openai_door = True
        return response

    @bp.after_app_request
    async def _request_id(response: Response) -> Response:
        """``x-request-id``, the header OpenAI sends its request id in (the
        ``openai`` SDK reads it: ``_request_id`` of a result,
        ``APIStatusError.request_id``), on every answer of this door, errors
        included; the core's ``request-id`` stays."""
        if getattr(g, "openai_door", False):
            response.headers["x-request-id"] = gateway.request_id
        return response

    async def chat_completions() -> Response | dict[str, Any]:
        gateway.admit()
        chat = translate(await gateway.read_json())
        gateway.ignore(chat.ignored)
        try:
            answer = await gateway.answer(chat.body, whitespace_stops=True)
        except MissiveError as exc:
            raise chat.paths.error(exc) from None
        completion_id = "chatcmpl-" + str(answer.first["message"]["id"]).removeprefix("msg_")
        created = int(time.time())
        if not chat.stream:
            raw = RawArguments()
            answer.watch(raw.note)
            message = _collected(await gateway.collect(answer), answer)
            return completion_of(
                message, completion_id=completion_id, model=chat.model, created=created, raw=raw.text
            )
        converter = ChunkConverter(
            completion_id=completion_id, model=chat.model, created=created, include_usage=chat.include_usage
        )
        batches = gateway.stream(answer)

        async def body() -> AsyncGenerator[bytes, None]:
            try:
                yield b"".join(_data(chunk) for chunk in converter.feed(answer.first))
                try:
                    async for batch in batches:
                        out = []
                        for event in batch:
                            if event["type"] == "ping":
                                out.append(b": ping\n\n")
                            else:
                                out.extend(_data(chunk) for chunk in converter.feed(_counted(event, answer)))
                        if out:
                            yield b"".join(out)
                except MissiveError as exc:
                    yield _data(envelope(exc))
                    return
                yield b"data: [DONE]\n\n"
            finally:
                await batches.aclose()

        response = Response(body(), content_type="text/event-stream; charset=utf-8", headers=SSE_HEADERS)
        response.timeout = None
        return response

    store = ResponseStore()

    background = Background(store)

    @bp.after_app_serving
    async def _stop_background() -> None:
        await background.close()

    def entry_of(
        translated: Any, owner: str, response: dict[str, Any], content: list[dict[str, Any]]
    ) -> Stored:
        reply = assistant_turn(content)
        messages = [*translated.new_messages, *([reply] if reply else [])]
        return Stored(
            owner,
            translated.previous_response_id,
            translated.new_system,
            messages,
            response,
            listed_items(translated.raw_input, response["id"]),
        )

    def keep(translated: Any, owner: str, response: dict[str, Any], content: list[dict[str, Any]]) -> None:
        if translated.store and (translated.background or response["status"] in FINISHED):
            store.put(response["id"], entry_of(translated, owner, response, content))

    async def responses() -> Response | dict[str, Any]:
        gateway.admit()
        owner = gateway.key_name
        asked = translate_responses(
            await gateway.read_json(),
            lambda rid: continued(store, owner, rid),
            server_tools=gateway.server_tools,
        )
        gateway.ignore(asked.ignored)
        try:
            answer = await gateway.answer(asked.body)
        except MissiveError as exc:
            raise asked.paths.error(exc) from None
        shape = ResponseShape(
            response_id="resp_" + str(answer.first["message"]["id"]).removeprefix("msg_"),
            created_at=int(time.time()),
            model=asked.model,
            echo=asked.echo,
            encrypted_reasoning=asked.encrypted_reasoning,
            namespaced=asked.namespaced,
            summary=asked.summary,
            web_search=asked.web_search,
            search_sources=asked.search_sources,
        )
        if asked.background:
            converter = ResponseConverter(shape)

            def finished(done: ResponseConverter) -> None:
                assert done.final is not None
                keep(asked, owner, done.final, done.content)

            pending = entry_of(asked, owner, shape.response("in_progress", [], None), [])
            started = background.start(
                pending,
                converter,
                answer.first,
                gateway.stream(answer),
                finished,
                lambda event: _counted(event, answer),
            )
            log = background.log(shape.response_id)
            return _replayed(log, -1) if asked.stream and log is not None else started
        if not asked.stream:
            raw = RawArguments()
            answer.watch(raw.note)
            message = _collected(await gateway.collect(answer), answer)
            done = response_of(message, shape, raw.text)
            keep(asked, owner, done, message.get("content") or [])
            return done
        converter = ResponseConverter(shape)
        batches = gateway.stream(answer)

        async def body() -> AsyncGenerator[bytes, None]:
            kept_already = False
            try:
                yield b"".join(_event(e) for e in converter.feed(answer.first))
                try:
                    async for batch in batches:
                        out = []
                        for event in batch:
                            if event["type"] == "ping":
                                out.append(b": ping\n\n")
                            else:
                                out.extend(_event(e) for e in converter.feed(_counted(event, answer)))
                        if converter.final is not None and not kept_already:
                            # kept before response.completed leaves: a client that
                            # continues as soon as it reads it finds it
                            keep(asked, owner, converter.final, converter.content)
                            kept_already = True
                        if out:
                            yield b"".join(out)
                except MissiveError as exc:
                    yield b"".join(_event(e) for e in converter.fail(exc))
            finally:
                try:
                    await batches.aclose()
                finally:
                    if converter.final is None:  # the client went: kept as far as it got
                        *_, last = converter.stop("incomplete", CLIENT_GONE)
                        keep(asked, owner, last["response"], converter.content)

        response = Response(body(), content_type="text/event-stream; charset=utf-8", headers=SSE_HEADERS)
        response.timeout = None
        return response

    def kept(response_id: str) -> Stored:
        gateway.admit()
        entry = store.get(gateway.key_name, response_id)
        if entry is None:
            raise NotFoundError(f"No response found with id '{response_id}'.")
        return entry

    async def get_response(response_id: str) -> Response | dict[str, Any]:
        entry = kept(response_id)
        if _query_flag("stream"):
            if not entry.response.get("background"):
                raise OpenAIRequestError(
                    "This response cannot be streamed because it was not created with background=true.",
                    param="stream",
                )
            log = background.log(response_id)
            if log is None:
                raise OpenAIRequestError(
                    "This response's stream events are no longer kept; retrieve it without stream.",
                    param="stream",
                )
            return _replayed(log, _starting_after())
        if entry.response["status"] in ("queued", "in_progress"):
            return background.snapshot(response_id) or entry.response
        return entry.response

    async def input_items(response_id: str) -> dict[str, Any]:
        kept(response_id)
        args = {name: request.args.get(name) for name in ("after", "before", "limit", "order")}
        include = request.args.getlist("include[]") + request.args.getlist("include")
        gateway.ignore([f"include {x}" for x in include if x != "reasoning.encrypted_content"])
        found = store.input_items(gateway.key_name, response_id)
        return page_of(found or [], args)

    async def cancel_response(response_id: str) -> dict[str, Any]:
        entry = kept(response_id)
        if not entry.response.get("background"):
            raise OpenAIRequestError("Only background responses can be cancelled.", param=None)
        await background.cancel(response_id)
        return kept(response_id).response

    async def delete_response(response_id: str) -> dict[str, Any]:
        kept(response_id)
        await background.forget(response_id)  # a running one stops first: nothing writes it back
        store.delete(gateway.key_name, response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def not_allowed() -> Response:
        raise MethodNotAllowed(valid_methods=["POST"], description=f"method {request.method} is not allowed")

    @bp.before_app_request
    async def _models_for_openai_clients() -> Response | None:
        one = _ONE_MODEL.match(request.path)
        if (request.path not in MODELS_PATHS and not one) or not _is_openai_client():
            return None
        g.openai_door = True
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            # OpenAI's envelope for a method the models paths do not take
            # (DELETE /v1/models/{id} deletes a fine-tuned model at OpenAI)
            refused = MethodNotAllowed(
                valid_methods=["GET"], description=f"method {request.method} is not allowed"
            )
            response = _error_response(gateway.error(refused))
            response.headers["allow"] = "GET"
            return response
        if request.method != "GET":
            return None
        try:
            if one is None:
                data = [_model(m) for m in gateway.models()]
                listing: dict[str, Any] = {"object": "list", "data": data}
                return Response(json_dumps(listing), content_type="application/json")
            try:
                found = _model(gateway.model(one.group("id")))  # as a request's model resolves
            except NotFoundError:
                raise _model_not_found(one.group("id")) from None
        except Exception as exc:
            return _error_response(gateway.error(exc))
        return Response(json_dumps(found), content_type="application/json")

    bp.add_url_rule("/chat/completions", "chat-completions", chat_completions, methods=["POST"])
    bp.add_url_rule(
        "/chat/completions", "chat-completions-other", not_allowed, methods=["GET", "PUT", "DELETE", "PATCH"]
    )
    bp.add_url_rule("/responses", "responses", responses, methods=["POST"])
    bp.add_url_rule("/responses/<response_id>", "response", get_response, methods=["GET"])
    bp.add_url_rule("/responses/<response_id>", "response-delete", delete_response, methods=["DELETE"])
    bp.add_url_rule("/responses/<response_id>/input_items", "input-items", input_items, methods=["GET"])
    bp.add_url_rule("/responses/<response_id>/cancel", "response-cancel", cancel_response, methods=["POST"])
    return bp
