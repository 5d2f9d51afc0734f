"""OpenTelemetry spans of the API's requests, continuing the client's W3C trace.

Off unless ``server.tracing = true`` and OpenTelemetry is installed (the
``missive-server[otel]`` extra); ``OTEL_SDK_DISABLED=true`` turns it off
again. Off, :func:`build_tracing` returns None, nothing of OpenTelemetry is
imported, and a request pays nothing.

On, ``POST /v1/messages``, ``/v1/messages/count_tokens`` and
``/v1/messages/batches`` each get one ``SERVER`` span, made when the
request's :class:`~missive.serving.record.RequestRecord` finishes, from what
the record holds and its times (so nothing is added to the request's path):

* its parent is the request's ``traceparent``/``tracestate`` (W3C Trace
  Context, https://www.w3.org/TR/trace-context/), read by OpenTelemetry's
  global propagator (``opentelemetry.propagate.extract``, ``OTEL_PROPAGATORS``);
  a missing or malformed header gives a new root trace, as the
  recommendation says a receiver must ("vendors MUST ... start a new trace"
  when ``traceparent`` cannot be parsed), never an error;
* a message is a GenAI inference span (OpenTelemetry GenAI semantic
  conventions, "Semantic conventions for generative client AI spans",
  https://github.com/open-telemetry/semantic-conventions-genai/blob/main/docs/gen-ai/gen-ai-spans.md):
  named ``chat {gen_ai.request.model}``, with ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.request.model`` (the client's
  string), ``gen_ai.response.model`` (the configured model that answered),
  ``gen_ai.request.stream``, ``gen_ai.usage.*`` (``input_tokens``
  including the cached ones, as the conventions ask and the SDK's own span
  counts them) and ``gen_ai.response.finish_reasons``; the other two are
  named ``{method} {http.route}`` (HTTP server spans,
  https://opentelemetry.io/docs/specs/semconv/http/http-spans/);
* every span has ``http.request.method``, ``http.route``,
  ``http.response.status_code``, ``error.type`` when it failed (status
  ERROR for a 5xx or an answer ended by an error event) and
  ``missive.request_id`` (the ``request-id`` header, the log line's id);
* a message's phases are child spans: ``missive.admission`` (the wait for
  an admission permit), ``missive.prompt`` (from the permit to the first
  content event: prompt processing, time to first token) and
  ``missive.generation`` (first to last content event).

No prompt or answer text is ever recorded: the span is built from the
record, which holds none.

The spans go to the global tracer provider when one of the OpenTelemetry
SDK is set (``opentelemetry-instrument missive serve``), else to a provider
of Missive's own, configured by the standard variables: ``OTEL_SERVICE_NAME``
(default ``missive``), ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_EXPORTER`` (default ``otlp``; ``none``: spans made, none
exported) and the exporter's own (``OTEL_EXPORTER_OTLP_ENDPOINT``...).
See docs/operations.md, "Tracing".
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ..config.schema import ConfigError, ServerConfig
from .record import CLIENT_GONE, RequestRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["Tracing", "build_tracing", "TRACED", "TRACE_HEADERS"]

log = logging.getLogger("missive.tracing")

#: ``(method, endpoint)`` of the requests that get a span.
TRACED = frozenset(
    {
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages/count_tokens"),
        ("POST", "/v1/messages/batches"),
    }
)
#: The W3C Trace Context headers (and baggage) kept of a traced request, for the propagator.
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")

SCOPE = "missive"
#: ``gen_ai.provider.name``: the conventions' value for the server answering.
PROVIDER = "missive"
#: The span name's operation of ``POST /v1/messages`` (``gen_ai.operation.name``).
CHAT = "chat"
#: The extra whose packages tracing needs.
EXTRA = "pip install 'missive-server[otel]'"


class Tracing:
    """Makes the spans of finished records (see the module doc) with ``provider``.

    ``owned``: the provider is Missive's own, shut down (its spans flushed)
    by :meth:`shutdown`; the global provider is left to whoever set it.
    """

    def __init__(self, provider: TracerProvider, *, owned: bool) -> None:
        self.provider = provider
        self.owned = owned
        self._tracer: Tracer = provider.get_tracer(SCOPE)

    @staticmethod
    def wanted(method: str, endpoint: str) -> bool:
        """Whether a request of ``method`` on ``endpoint`` gets a span."""
        return (method, endpoint) in TRACED

    @staticmethod
    def carrier(header: Callable[[str], str | None]) -> dict[str, str]:
        """The trace headers of a request (``header``: its value by name, as
        ``request.headers.get``), for :meth:`observe` (lower-case names)."""
        return {name: value for name in TRACE_HEADERS if (value := header(name)) is not None}

    def observe(self, record: RequestRecord) -> None:
        """The span of a finished ``record`` and its phases; nothing for a
        record without trace headers (a request not traced). Never raises:
        tracing must not break a request."""
        if record.trace_headers is None:
            return
        try:
            self._span(record, record.trace_headers)
        except Exception:
            log.exception("could not record the span of request %s", record.request_id)

    def _span(self, record: RequestRecord, headers: dict[str, str]) -> None:
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        parent = extract(headers)
        wall = _Clock()
        chat = record.endpoint == "/v1/messages"
        model = record.requested_model or record.model
        name = f"{CHAT} {model}" if chat and model else f"{record.method} {record.endpoint}"
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=_attributes(record, chat),
            start_time=wall.ns(record.started),
        )
        if _failed(record):
            span.set_status(Status(StatusCode.ERROR, record.error_type or str(record.status)))
        inside = set_span_in_context(span, parent)
        for phase, start, end in _phases(record):
            child: Span = self._tracer.start_span(phase, context=inside, start_time=wall.ns(start))
            child.end(end_time=wall.ns(end))
        span.end(end_time=wall.ns(record.started + (record.duration or 0.0)))

    def shutdown(self) -> None:
        """Flush and close Missive's own provider (blocking: the exporter's
        last batch is sent); nothing for the global one."""
        if self.owned:
            self.provider.shutdown()


class _Clock:
    """``time.monotonic()`` values as epoch nanoseconds (a span's times)."""

    def __init__(self) -> None:
        self._offset = time.time_ns() - time.monotonic_ns()

    def ns(self, monotonic: float) -> int:
        return int(monotonic * 1e9) + self._offset


def _attributes(record: RequestRecord, chat: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "http.request.method": record.method,
        "http.route": record.endpoint,
        "missive.request_id": record.request_id,
    }
    if record.status is not None:
        out["http.response.status_code"] = record.status
    if record.error_type is not None:
        out["error.type"] = record.error_type
    if record.requested_model:
        out["gen_ai.request.model"] = record.requested_model
    if not chat:
        return out
    out["gen_ai.operation.name"] = CHAT
    out["gen_ai.provider.name"] = PROVIDER
    if record.generated:
        out["gen_ai.request.stream"] = record.stream
        out["gen_ai.response.model"] = record.model
    if record.input_tokens is not None:
        cached = (record.cache_read_input_tokens or 0) + (record.cache_creation_input_tokens or 0)
        out["gen_ai.usage.input_tokens"] = record.input_tokens + cached
    if record.cache_read_input_tokens is not None:
        out["gen_ai.usage.cache_read.input_tokens"] = record.cache_read_input_tokens
    if record.cache_creation_input_tokens is not None:
        out["gen_ai.usage.cache_creation.input_tokens"] = record.cache_creation_input_tokens
    if record.output_tokens is not None:
        out["gen_ai.usage.output_tokens"] = record.output_tokens
    if record.stop_reason is not None:
        out["gen_ai.response.finish_reasons"] = [record.stop_reason]
    if record.stream and record.first_token_at is not None:
        out["gen_ai.response.time_to_first_chunk"] = record.first_token_at - record.started
    return out


def _failed(record: RequestRecord) -> bool:
    """A server error (a 5xx; a stream's 200 ended by an ``error`` event):
    the span's status is ERROR. A 4xx is the client's, not the span's
    (HTTP server spans), and a client gone is no error of the server."""
    if record.status is not None and record.status >= 500:
        return True
    return record.status == 200 and record.error_type not in (None, CLIENT_GONE)


def _phases(record: RequestRecord) -> list[tuple[str, float, float]]:
    """``(name, start, end)`` (monotonic) of the phases the record saw."""
    out: list[tuple[str, float, float]] = []
    admitted: float | None = None
    if record.queued_at is not None and record.queue_seconds is not None:
        admitted = record.queued_at + record.queue_seconds
        out.append(("missive.admission", record.queued_at, admitted))
    if record.first_token_at is not None:
        out.append(
            ("missive.prompt", admitted if admitted is not None else record.started, record.first_token_at)
        )
        if record.last_token_at is not None:
            out.append(("missive.generation", record.first_token_at, record.last_token_at))
    return out


def build_tracing(config: ServerConfig) -> Tracing | None:
    """The server's :class:`Tracing`, or None when it is off (see the module doc).

    Raises:
        ConfigError: ``server.tracing`` is on but OpenTelemetry's SDK is not
            installed, or ``OTEL_TRACES_EXPORTER`` names no installed exporter.
    """
    if not config.tracing:
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        log.info("server.tracing is on but OTEL_SDK_DISABLED=true: no spans")
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError as exc:
        raise ConfigError(f"server.tracing = true needs OpenTelemetry's SDK: {EXTRA}") from exc
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return Tracing(current, owned=False)
    return Tracing(_own_provider(), owned=True)


def _own_provider() -> TracerProvider:
    """A provider configured by the standard ``OTEL_*`` variables, with the
    exporters of ``OTEL_TRACES_EXPORTER`` behind a batch processor."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "missive"}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER
    for name in _exporter_names():
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter_names() -> list[str]:
    value = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    names = [name.strip() for name in value.split(",") if name.strip()]
    return [] if "none" in names else names


def _exporter(name: str) -> Any:
    """The span exporter registered as ``name`` (the SDK's entry point group
    ``opentelemetry_traces_exporter``), made with no arguments: it reads its
    own variables. ``otlp`` is ``otlp_proto_http`` when the gRPC one's
    meta-package (``opentelemetry-exporter-otlp``) is not installed."""
    found = {point.name: point for point in entry_points(group="opentelemetry_traces_exporter")}
    if name == "otlp" and name not in found:
        name = "otlp_proto_http"
    point = found.get(name)
    if point is None:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
            f"(installed: {', '.join(sorted(found)) or 'none'}; the OTLP/HTTP one: {EXTRA})"
        )
    return point.load()()
