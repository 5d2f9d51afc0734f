"""What one HTTP request did: the facts behind its log line and its metrics.

The app opens a :class:`RequestRecord` for every request (``g.record``); the
routes fill it in (the model serving it, the queue wait, the media blocks
processed, the API events sent), and it is finished exactly once, when the
answer has ended:

* a plain response: after the handler, with the response status
  (errors included: :func:`missive.server.app.error_response` notes their type);
* a stream: when its body ends (completed, ended by an ``error`` event, or
  its client gone), with status 200;
* a request whose client left before any response was sent: when the
  record is dropped, with status :data:`CLIENT_CLOSED` and error type
  :data:`CLIENT_GONE`.

Finishing calls the app's observer (the metrics and the request's log line).
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..protocol.agents import NO_AGENT, Agent

__all__ = [
    "RequestRecord",
    "endpoint_label",
    "QUIET_PATHS",
    "QUIET_PREFIXES",
    "CLIENT_GONE",
    "CLIENT_CLOSED",
    "BATCH_ENDPOINT",
]

#: The ``endpoint`` of a batch request's record (its log line; its usage
#: counts as this endpoint's).
BATCH_ENDPOINT = "/v1/messages/batches"

log = logging.getLogger("missive.record")

#: Paths polled by machines (probes, scrapers): no request metrics, and their
#: log line at ``debug``.
QUIET_PATHS = frozenset({"/health", "/livez", "/readyz", "/metrics", "/api/hello"})
#: Path prefixes treated the same way: the web console's page and its polling
#: (:mod:`missive.console`), so watching the server does not fill its log,
#: its metrics or the console's own list of recent requests.
QUIET_PREFIXES = ("/console",)
#: ``error_type`` of a request whose client went away before the answer ended.
CLIENT_GONE = "client_disconnected"
#: Status recorded when the client left before any response was sent (nginx's
#: "client closed request").
CLIENT_CLOSED = 499

_CONTENT_EVENTS = frozenset({"content_block_start", "content_block_delta"})
_PARAM = re.compile(r"<(?:[^:>]+:)?([^>]+)>")


def endpoint_label(rule: str | None) -> str:
    """The route of a request as a metric label: ``/v1/messages``,
    ``/v1/models/{model_id}`` (``/v1/v1/...`` counted as ``/v1/...``);
    ``other`` for a path no route matched."""
    if rule is None:
        return "other"
    if rule.startswith("/v1/v1/"):
        rule = rule[3:]
    return _PARAM.sub(r"{\1}", rule)


class RequestRecord:
    """One request's facts (see the module doc).

    Attributes:
        request_id, method, path: the request's id (``req_...``), method and path (no query).
        endpoint: its route (:func:`endpoint_label`).
        started: ``time.monotonic()`` when it arrived.
        model: the configured id of the model serving it; ``""`` when it
            named none (a bad body, an unknown model).
        key: the name of its API key (:mod:`missive.keys`), once it is
            authenticated (``""``: no key configured); None before, or
            refused with 401. Never the key, nor its hash.
        agent: the Claude Code agent that sent it (:mod:`missive.protocol.agents`):
            a subagent's id and its parent's, as ``agent_id`` and
            ``parent_agent_id`` in the log fields (ids only, never a prompt).
        stream: an SSE answer was asked for.
        generated: a message was started (the model ran).
        requested_model: the request's ``model`` as the client sent it (a
            message or a token count with a valid body), else None.
        queued_at: monotonic time its wait for an admission permit began.
        queue_seconds: time spent waiting for an admission permit (:mod:`missive.serving.admission`).
        first_token_at, last_token_at: monotonic times the first and the
            last content event were sent.
        input_tokens, cache_read_input_tokens, cache_creation_input_tokens,
            output_tokens: the answer's usage, as sent to the client (None
            when not known: no message, or a stream cut before its end).
        stop_reason: the answer's ``stop_reason``.
        media: image and document blocks processed, by kind.
        rule: the ``[[routing.rules]]`` rule that chose the model, if one did.
        fallbacks: ``(model, next model, error type)`` for each model that
            could not start the answer (:mod:`missive.routing.fallbacks`).
        status: the HTTP status (set when finished).
        error_type: the error's ``error.type``, :data:`CLIENT_GONE`, or None.
        duration: seconds from arrival to the end of the answer (when finished).
        ignored: what the server ignored of the request (the
            ``missive-ignored`` header's items).
        trace_headers: its W3C trace context headers when the request is
            traced (:mod:`missive.serving.tracing`), else None.
    """

    def __init__(
        self,
        request_id: str,
        method: str,
        path: str,
        endpoint: str,
        on_finish: Callable[[RequestRecord], None],
    ) -> None:
        self.request_id = request_id
        self.method = method
        self.path = path
        self.endpoint = endpoint
        self.started = time.monotonic()
        self.model = ""
        self.key: str | None = None
        self.agent: Agent = NO_AGENT
        self.stream = False
        self.generated = False
        self.completed = False
        self.requested_model: str | None = None
        self.queued_at: float | None = None
        self.queue_seconds: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.input_tokens: int | None = None
        self.cache_read_input_tokens: int | None = None
        self.cache_creation_input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.stop_reason: str | None = None
        self.media: Counter[str] = Counter()
        self.rule: str | None = None
        self.fallbacks: list[tuple[str, str, str]] = []
        self.status: int | None = None
        self.error_type: str | None = None
        self.duration: float | None = None
        self.ignored: list[str] = []
        self.trace_headers: dict[str, str] | None = None
        self._on_finish: Callable[[RequestRecord], None] | None = on_finish
        self._at_finish: list[Callable[[], None]] = []

    @property
    def quiet(self) -> bool:
        """A probe, ``/health``, ``/metrics`` or console request (see
        :data:`QUIET_PATHS`, :data:`QUIET_PREFIXES`)."""
        return self.path in QUIET_PATHS or self.path.startswith(QUIET_PREFIXES)

    @property
    def finished(self) -> bool:
        return self._on_finish is None

    def note(self, event: dict[str, Any]) -> None:
        """Take in one API event as it is sent (``message_start``, content
        events, ``message_delta``, ``message_stop``; pings are ignored)."""
        kind = event.get("type")
        if kind in _CONTENT_EVENTS:
            now = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now
        elif kind == "message_start":
            self.generated = True
            self._usage(event["message"].get("usage") or {})
        elif kind == "message_delta":
            self._usage(event.get("usage") or {})
            self.stop_reason = (event.get("delta") or {}).get("stop_reason")
        elif kind == "message_stop":
            self.completed = True

    def _usage(self, usage: dict[str, Any]) -> None:
        for key in (
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        ):
            value = usage.get(key)
            if isinstance(value, int):
                setattr(self, key, value)

    def at_finish(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (no arguments, must not raise) when the record
        finishes, before the observer; at once if it has. The model a request
        uses is given back this way (:meth:`missive.models.table.ModelTable.use`)."""
        if self._on_finish is None:
            callback()
        else:
            self._at_finish.append(callback)

    def finish(self, status: int, error_type: str | None = None) -> None:
        """End the record with the HTTP ``status`` (and ``error_type``, unless
        an error was noted already) and hand it to the observer. Later calls
        do nothing."""
        on_finish, self._on_finish = self._on_finish, None
        if on_finish is None:
            return
        self.status = status
        if self.error_type is None:
            self.error_type = error_type
        self.duration = time.monotonic() - self.started
        callbacks, self._at_finish = self._at_finish, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a finishing callback of request %s failed", self.request_id)
        if self.stop_reason is None:
            self.output_tokens = None  # message_start's 0: the answer's count never came
        try:
            on_finish(self)
        except Exception:  # metrics or logging must never break a request
            log.exception("recording request %s failed", self.request_id)

    def __del__(self) -> None:
        # Dropped unfinished: the client left before a response was sent
        # (Quart cancelled the handler, or never iterated the stream's body).
        if self._on_finish is not None:
            self.finish(200 if self.stream and self.generated else CLIENT_CLOSED, CLIENT_GONE)

    def fields(self) -> dict[str, Any]:
        """The request's log fields, without those that do not apply."""
        out: dict[str, Any] = {
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "endpoint": self.endpoint,
            "model": self.model or None,
            "key": self.key or None,
            "rule": self.rule,
            "agent_id": self.agent.id,
            "parent_agent_id": self.agent.parent_id,
        }
        if self.generated:
            out["stream"] = self.stream
        for key in (
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
        ):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.fallbacks:
            out["fallback"] = ",".join(f"{a}->{b}" for a, b, _ in self.fallbacks)
        if self.media:
            out["images"] = self.media.get("image", 0)
            out["documents"] = self.media.get("document", 0)
        if self.queue_seconds is not None:
            out["queue_s"] = round(self.queue_seconds, 4)
        if self.first_token_at is not None:
            out["ttft_s"] = round(self.first_token_at - self.started, 4)
        if self.duration is not None:
            out["duration_s"] = round(self.duration, 4)
        if self.stop_reason is not None:
            out["stop_reason"] = self.stop_reason
        if self.error_type is not None:
            out["error_type"] = self.error_type
        return {k: v for k, v in out.items() if v is not None}
