"""Logging: the request id on every line, text or JSON lines, one line per request.

Every record passing the handler gets ``request_id``: the id the record
carries (``extra={"request_id": ...}``), else the one of the request being
served (:data:`request_id_var`, set by the app for each request; contextvars
follow the request into its tasks and worker threads), else none.

Two formats (``server.log_format``, ``missive serve --log-format``):

* ``text``: ``time level [req_...] logger: message``;
* ``json``: one JSON object per line with ``timestamp`` (RFC 3339, UTC),
  ``level``, ``logger``, ``message``, ``request_id`` (null outside a
  request), the record's ``fields`` as more keys, and ``exception`` (the
  traceback) when there is one.

With several worker processes (``server.workers``), each worker's lines
also name it: ``time level w1 [req_...] ...`` in text, ``"worker": 1`` in
JSON (:func:`set_worker`, called in each worker as it starts).

:func:`log_request` writes the line of each finished request at ``info``
(probes and ``/metrics`` at ``debug``). It carries ids, counts, times and
outcomes only: never headers (API keys), bodies or prompt text.
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .record import RequestRecord

__all__ = ["request_id_var", "setup_logging", "set_worker", "JsonFormatter", "TEXT_FORMAT", "log_request"]

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

#: The ``text`` format.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(worker_label)s[%(request_id)s] %(name)s: %(message)s"

#: This process's worker index when the server runs several (None: one
#: process, or the supervisor).
_worker: int | None = None


def set_worker(index: int | None) -> None:
    """Name worker ``index`` (0-based) on every log line this process writes
    from now on (None: no worker label)."""
    global _worker
    _worker = index


#: Loggers given Missive's handler: its own, and Hypercorn's when ``missive
#: serve`` runs it (so every line has one format).
LOGGERS = ("missive", "hypercorn.error", "hypercorn.access")

access_log = logging.getLogger("missive.access")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id_var.get()
        record.worker = _worker
        record.worker_label = "" if _worker is None else f"w{_worker} "
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module doc for the keys)."""

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", None)
        out: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": rid if rid and rid != "-" else None,
        }
        worker = getattr(record, "worker", None)
        if worker is not None:
            out["worker"] = worker
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def setup_logging(level: str = "info", log_format: str = "text") -> logging.Handler:
    """Send the ``missive`` and ``hypercorn.*`` loggers to stderr in
    ``log_format`` (``text`` or ``json``) at ``level``; return the handler."""
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    return handler


def log_request(record: RequestRecord) -> None:
    """The line of one finished request: ``info`` for API requests, ``debug``
    for probes, ``/health`` and ``/metrics`` (polled every few seconds)."""
    fields = record.fields()
    parts = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if k not in ("method", "path", "status"))
    level = logging.DEBUG if record.quiet else logging.INFO
    access_log.log(
        level,
        "%s %s %s %s",
        record.method,
        record.path,
        record.status,
        parts,
        extra={"request_id": record.request_id, "fields": fields},
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
