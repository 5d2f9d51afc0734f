"""Logging with the request id in every line."""

from __future__ import annotations

import contextvars
import logging

__all__ = ["request_id_var", "setup_logging"]

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


def setup_logging(level: str = "info") -> None:
    """Configure the ``missive`` loggers: ``time level [req_...] logger: message``."""
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(request_id)s] %(name)s: %(message)s"))
    root = logging.getLogger("missive")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
