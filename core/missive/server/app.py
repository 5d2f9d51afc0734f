"""The Quart application: the microkernel's HTTP edge.

It owns only request validation, SSE framing, auth and the error envelope;
models, drivers and processors come from plugins (:mod:`missive.kernel.plugins`).

Every response carries ``request-id`` (``req_...``); every error, whatever
raised it, is rendered here as the Anthropic envelope (contract sections 1, 5).
"""

from __future__ import annotations

import logging
from typing import Any

from quart import Quart, Request, Response, g, request
from quart.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from ..config import Config
from ..kernel.plugins import Kernel
from ..protocol import fastjson
from ..protocol.agents import agent_of
from ..protocol.errors import (
    ApiError,
    InvalidRequestError,
    MissiveError,
    NotFoundError,
    RequestTooLargeError,
)
from ..protocol.ids import request_id
from ..serving.logs import request_id_var
from ..serving.record import RequestRecord, endpoint_label
from .capture import write_capture
from .services import EXTENSION, build_services

__all__ = ["create_app", "error_response"]

log = logging.getLogger("missive.app")

_HTTP_ERRORS: dict[int, type[MissiveError]] = {404: NotFoundError, 413: RequestTooLargeError}

MAX_IGNORED_HEADER = 2000

#: RFC 9112 section 6.1: a request with both ``Content-Length`` and
#: ``Transfer-Encoding`` "ought to be handled as an error" (section 6.3: a
#: request smuggling attempt, where a proxy in front reads one length and this
#: server the other); the server "MAY reject" it and "MUST close the connection
#: after responding". h11 (under Hypercorn) reads it as chunked and passes both
#: headers on, so the app refuses it, with ``connection: close``.
AMBIGUOUS_LENGTH = (
    "the request has both Content-Length and Transfer-Encoding headers, so its body's length is ambiguous "
    "(RFC 9112 section 6.1); send one of them"
)


def error_response(exc: MissiveError) -> Response:
    """The Anthropic error envelope for ``exc``, with retry headers; its
    ``error.type`` is noted in the request's record (log line, metrics)."""
    rid = getattr(g, "request_id", None)
    record = getattr(g, "record", None)
    if record is not None and record.error_type is None:
        record.error_type = exc.error_type
    response = Response(_json(exc.envelope(rid)), status=exc.status, content_type="application/json")
    if exc.retry_after is not None:
        response.headers["retry-after"] = str(min(60, max(0, int(exc.retry_after))))
    if exc.should_retry is False:
        response.headers["x-should-retry"] = "false"
    return response


def _json(data: Any) -> bytes:
    return fastjson.dumps(data)


class _JSONProvider(DefaultJSONProvider):
    """Quart's JSON provider writing with :mod:`missive.protocol.fastjson` (orjson):
    the non-streaming ``Message`` bodies. Keys keep their order and text its
    characters (the tool_use inputs are the client's bytes)."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return fastjson.dumps(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return fastjson.loads(s)


def header_list(items: list[str], limit: int = MAX_IGNORED_HEADER) -> str:
    """``items`` joined with ``", "`` as a safe HTTP header value.

    The items hold client text (field paths, block types, beta names), so
    every character outside printable ASCII (controls, DEL, non-ASCII) is
    written as a ``\\uXXXX`` escape: h11 refuses a header value with a
    control character (RFC 9110 section 5.5), which would turn the whole
    response into a bare 500. The value is cut at ``limit`` characters, at
    an item boundary, ending with ``... (N in all)``.
    """
    value = ", ".join(items)
    value = "".join(c if " " <= c <= "~" else f"\\u{ord(c):04x}" for c in value)
    if len(value) > limit:
        value = value[:limit].rsplit(", ", 1)[0] + f", ... ({len(items)} in all)"
    return value


def _body_limit(config: Config, method: str, path: str) -> int:
    """The body limit of a request: ``batches.max_body_bytes`` for a batch's
    creation (the API's 256 MB), else ``server.max_body_bytes``."""
    if method == "POST" and path.rstrip("/").endswith("/messages/batches"):
        return config.batches.max_body_bytes
    return config.server.max_body_bytes


def _request_class(config: Config) -> type[Request]:
    """Quart's request with the body limit of :func:`_body_limit` (Quart
    applies one ``MAX_CONTENT_LENGTH`` to every route, fixed when the
    request is built, before routing)."""

    class MissiveRequest(Request):
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
            kwargs["max_content_length"] = _body_limit(config, method, path)
            super().__init__(method, scheme, path, *args, **kwargs)

    return MissiveRequest


def create_app(config: Config, *, kernel: Kernel | None = None, metrics_dir: str | None = None) -> Quart:
    """Build the app: the services (:func:`~missive.server.services.build_services`:
    plugins, the model table...), started and stopped with it, and the routes.

    ``metrics_dir``: the directory the workers of one server share their
    metrics in (:mod:`missive.server.workers`, ``server.workers`` > 1); the app's
    worker (``services(app).worker``, a :class:`~missive.server.workers.WorkerInfo`)
    is set by the worker after the fork. The app's services are one
    :class:`~missive.server.services.Services` (:func:`~missive.server.services.services`).

    Raises:
        ConfigError: a configured model cannot be served (unknown driver,
            missing dependency), or ``media.image_fallback`` names no processor.
    """
    app = Quart("missive")
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_body_bytes
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 300
    # Key order is part of the client's bytes (tool_use.input) and of caching.
    app.json = _JSONProvider(app)
    app.request_class = _request_class(config)
    found = build_services(config, kernel=kernel, metrics_dir=metrics_dir)
    app.extensions[EXTENSION] = found
    drain = found.drain

    @app.before_serving
    async def _start() -> None:
        await found.start()

    @app.after_serving
    async def _stop() -> None:
        await found.stop()

    @app.before_request
    async def _identify() -> None:
        g.request_id = request_id()
        request_id_var.set(g.request_id)
        g.ignored = []
        g.dropped_thinking = []
        rule = request.url_rule.rule if request.url_rule is not None else _rule_of_other_method(app)
        g.record = RequestRecord(
            g.request_id, request.method, request.path, endpoint_label(rule), found.observe
        )
        g.record.agent = agent_of(request.headers)
        if "content-length" in request.headers and "transfer-encoding" in request.headers:
            g.close_connection = True
            raise InvalidRequestError(AMBIGUOUS_LENGTH)
        if found.tracing is not None and found.tracing.wanted(request.method, g.record.endpoint):
            g.record.trace_headers = found.tracing.carrier(request.headers.get)
        if drain.begun and request.path.startswith("/v1/"):
            # Shutting down: only what was running goes on (missive.server.shutdown).
            raise drain.refusal()

    @app.after_request
    async def _headers(response: Response) -> Response:
        rid = getattr(g, "request_id", None)
        if rid:
            response.headers["request-id"] = rid
        dropped = getattr(g, "dropped_thinking", None)
        if dropped:
            response.headers["missive-dropped-thinking"] = header_list(dropped)
        ignored = getattr(g, "ignored", None)
        if ignored:
            response.headers["missive-ignored"] = header_list(ignored)
        if (drain.begun or getattr(g, "close_connection", False)) and request.http_version.startswith("1"):
            # Shutting down, Hypercorn closes the connection after this response
            # anyway; say so, so the client does not send its next request on
            # it. An ambiguous length (AMBIGUOUS_LENGTH): h11 closes it on this
            # header, so no byte left of that body is read as a request.
            response.headers["connection"] = "close"
        if config.server.capture_dir:
            write_capture(
                config.server.capture_dir,
                request_id=rid or "req_unknown",
                method=request.method,
                path=request.path,
                query=request.query_string.decode("latin-1"),
                headers=request.headers.items(),
                body=getattr(g, "capture_body", None),
                status=response.status_code,
                ignored=ignored,
                dropped_thinking=dropped,
            )
        record = getattr(g, "record", None)
        if record is not None and ignored:
            record.ignored = list(ignored)
        if record is not None and not record.stream:
            record.finish(response.status_code)  # a stream's body finishes it when it ends
        return response

    def _rendered(error: MissiveError) -> Response:
        # A front door's envelope on the paths and clients it claims (front_door.Gateway.claim).
        claimed = claimed_error(app, error)
        return claimed if claimed is not None else error_response(error)

    @app.errorhandler(MissiveError)
    async def _missive_error(exc: MissiveError) -> Response:
        # Overload (529) is logged once, as a warning, by the admission gate.
        if exc.status >= 500 and exc.error_type != "overloaded_error":
            log.error("%s: %s", exc.error_type, exc.message)
        return _rendered(exc)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        cls = _HTTP_ERRORS.get(status)
        if status == 404:
            message = f"Not found: {request.method} {request.path}"
        elif status == 413:
            limit = _body_limit(config, request.method, request.path)
            message = f"request body exceeds the limit of {limit} bytes"
        elif status == 405:
            message = f"method {request.method} is not allowed on {request.path}"
        else:
            message = exc.description or exc.name
        if cls is None:
            cls = InvalidRequestError if status < 500 else ApiError
        error = cls(message)
        error.status = status  # type: ignore[misc]  # the instance keeps Quart's status
        response = _rendered(error)
        response.status_code = status
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response.headers["allow"] = ", ".join(sorted(exc.valid_methods))  # a 405 MUST (RFC 9110 15.5.6)
        return response

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(ApiError("internal server error; the server log has the details"))

    from .front_door import claimed_error, mount_front_doors
    from .routes import PREFIXES, register_routes

    register_routes(app)
    mount_front_doors(app, found, PREFIXES)  # other APIs, plugins like drivers (docs/hooks.md)
    return app


def _rule_of_other_method(app: Quart) -> str | None:
    """The route the request's path matches under another method, for a 405
    (``GET /v1/messages`` is counted under ``/v1/messages``, not ``other``);
    None when the path matches no route."""
    exc = request.routing_exception
    if not isinstance(exc, MethodNotAllowed) or not exc.valid_methods:
        return None
    method: str = next(iter(exc.valid_methods))
    try:
        rule, _ = app.url_map.bind("missive").match(request.path, method=method, return_rule=True)
    except HTTPException:
        return None
    return str(rule.rule)
