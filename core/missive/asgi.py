"""ASGI entry point: ``hypercorn missive.asgi:app``.

Configuration comes from ``$MISSIVE_CONFIG`` (else the user's or the
system's ``missive.toml``) and ``MISSIVE__...`` variables (see
:mod:`missive.config`). Hypercorn chooses the bind address here, so the
loopback-only rule of ``missive serve`` is not enforced: set API keys before
binding anything but loopback. Hypercorn's asyncio worker closes the
connections their clients closed at once (:mod:`missive.server.connections`),
and its own HTTP errors carry the error envelope (:mod:`missive.server.http_errors`).
"""

from __future__ import annotations

from .config import load_config
from .server.app import create_app
from .server.connections import install as close_connections_promptly
from .server.http_errors import install as envelope_http_errors
from .serving.logs import setup_logging

_config = load_config(search=True)
setup_logging(_config.server.log_level, _config.server.log_format)
app = create_app(_config)
close_connections_promptly()
envelope_http_errors()
